# plots/common.gp — loaded first by every figure script: terminal, fonts and
# the colours shared by all figures. `qmla figures` runs each script in the
# output folder DIR with these variables set (docs/figures.md):
#   term     "png" | "svg" | "pdf"  (gnuplot's cairo terminals, and svg)
#   outfile  output file name, relative to DIR
#   width, height   size in pixels (pdf: 1/100 inch)
#   plotdir  this folder (absolute)
# and data/inputs.gp loaded: nmodels, label[i], model[i], source[i] and
# nmse[i] (the cache NMSE of input i, NaN if unknown); the
# tables of input i are data/m<i>.<table>.tsv (qmla export's TSV).
set encoding utf8
if (term eq "png") {
    set terminal pngcairo size width, height font "DejaVu Sans,11" enhanced
} else {
    if (term eq "svg") {
        set terminal svg size width, height font "DejaVu Sans,11" enhanced
    } else {
        set terminal pdfcairo size (width / 100.0), (height / 100.0) font "DejaVu Sans,9" enhanced
    }
}
set output outfile
set datafile separator "\t"
set datafile commentschars "#"
set datafile missing "nan"

# One colour per cache path in every figure: content blue, RoPE red; the
# RoPE/content ratio in a neutral dark grey (its heat map runs from blue,
# content worse, through white to red, RoPE worse).
c_content = "#1f5fa8"
c_rope = "#c8321e"
c_ratio = "#404040"
c_grid = "#d8d8d8"
c_pad = "#bdbdbd"
data(i, table) = sprintf("data/m%d.%s.tsv", i, table)
set border lw 1 lc rgb "#303030"
set grid lc rgb c_grid lw 1
