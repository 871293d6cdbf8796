# plots/allocate-strip.gp — the configuration `qmla allocate` chose for each
# layer (columns) at each budget (rows; docs/allocate.md): the cell's colour
# is the content bits, its label C{c}R{r}. Reads data/m1.allocate_strip.tsv
# (columns budget_index, budget, layer, c_bits, r_bits; written by
# scripts/allocate-table.py into pareto.h5). Size 620 by 360 pixels.
load plotdir."/common.gp"
f = data(1, "allocate_strip")
stats f using "layer" nooutput name "L"
stats f using "budget_index" nooutput name "Y"
set title "Bits chosen per layer and budget (colour: content bits)" font ",13"
set xlabel "layer"
set ylabel "budget"
set xrange [L_min - 0.5 : L_max + 0.5]
set yrange [Y_max + 0.5 : Y_min - 0.5]
set xtics 1
unset grid
set cbrange [1.5:8.5]
set palette defined (2 "#fde0c5", 3 "#f59e72", 4 "#c8321e", 8 "#5a0f0a")
set cbtics ("2" 2, "3" 3, "4" 4, "8" 8)
set cblabel "content bits"
plot f using "layer":"budget_index":(0.5):(0.5):(column("c_bits")) \
       with boxxyerror fs solid 1.0 border lc rgb "#ffffff" fc palette notitle, \
     f using "layer":"budget_index":(sprintf("C%dR%d", column("c_bits"), column("r_bits"))) \
       with labels font ",10" tc rgb "#000000" notitle, \
     f using (NaN):"budget_index":ytic(strcol("budget")) notitle
