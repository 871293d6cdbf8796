# plots/allocate-pareto.gp — bits/byte against bytes per token (docs/allocate.md):
# every uniform cache configuration C{c}R{r} (grey points, named), the
# uniform Pareto front (grey line: no uniform configuration is better at
# fewer or equal bytes), the per-layer allocations of `qmla allocate` at each
# budget (red), the measured search of scripts/allocate-search.py where
# present (blue, dotted), and the BF16 cache's bits/byte (dashed). Reads
# data/m1.allocate_pareto.tsv (columns kind_index, name, bytes_per_token,
# bpb_mean, on_front; written by scripts/allocate-table.py into pareto.h5).
# Size 720 by 520 pixels.
load plotdir."/common.gp"
f = data(1, "allocate_pareto")
stats f using (column("kind_index") == 2 ? column("bpb_mean") : NaN) nooutput name "B"
stats f using (column("kind_index") == 1 ? column("bpb_mean") : NaN) nooutput name "A"
set title "Bits/byte against cache bytes per token: uniform and allocated" font ",13"
set xlabel "bytes per token (mean over layers)"
set ylabel "bits/byte (mean over the held-out texts)"
set key top right box opaque font ",10" noenhanced
set xrange [90:360]
set yrange [B_min - 0.005 : A_max + 0.08]
set arrow from graph 0, first B_min to graph 1, first B_min nohead dt 2 lc rgb "#303030"
set label "BF16 cache" at graph 0.02, first B_min offset 0, 0.6 font ",9"
plot f using (column("kind_index") == 0 ? column("bytes_per_token") : NaN):"bpb_mean" \
       with points pt 7 ps 0.9 lc rgb "#808080" title "uniform C<c>R<r>", \
     f using (column("kind_index") == 0 && column("on_front") == 1 ? column("bytes_per_token") : NaN):"bpb_mean" \
       smooth unique with lines lw 1.5 lc rgb "#808080" title "uniform Pareto front", \
     f using (column("kind_index") == 0 ? column("bytes_per_token") : NaN):"bpb_mean":(strcol("name")) \
       with labels offset 0, 0.8 font ",8" tc rgb "#606060" notitle noenhanced, \
     f using (column("kind_index") == 1 ? column("bytes_per_token") : NaN):"bpb_mean" \
       smooth unique with linespoints pt 9 ps 1.4 lw 2 lc rgb c_rope title "allocated (qmla allocate)", \
     f using (column("kind_index") == 1 ? column("bytes_per_token") : NaN):"bpb_mean":(strcol("name")) \
       with labels left offset 1.2, -0.7 font ",9" tc rgb c_rope notitle noenhanced, \
     f using (column("kind_index") == 3 ? column("bytes_per_token") : NaN):"bpb_mean" \
       smooth unique with linespoints pt 5 ps 1.0 lw 1.5 dt 3 lc rgb c_content title "measured search (per-layer ppl)"
