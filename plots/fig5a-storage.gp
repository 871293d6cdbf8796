# plots/fig5a-storage.gp — paper Fig. 5 (a): persistent KV-cache bytes per
# token (left, log y) and the compression against BF16 (right) against the
# context, BF16 buffers, metadata and page tables included, one line per
# (configuration, metadata, policy) of `qmla storage -o` (BF16 grey, C4R4
# blue, C2R4 green, C8R8 orange, other configurations dark grey; no
# protection dashed); the paper's two C4R4 sink4/local128 ratios
# (plots/fig5a-paper.tsv: 3.22x at 4K, 3.59x at 128K) as black diamonds.
# Every input's lines in the same two panels (the input's label in the key
# when there are several).
# Reads data/m<i>.storage.tsv (columns config, meta, policy, series_index,
# context, bytes_per_token, ratio).
# Size 1100 by 480 pixels.
load plotdir."/common.gp"

nser = 0
do for [i=1:nmodels] {
    stats data(i, "storage") using "series_index" nooutput name "S"
    nser = S_max + 1 > nser ? S_max + 1 : nser
}
array SN[nmodels * nser]
array SC[nmodels * nser]
array SP[nmodels * nser]
do for [i=1:nmodels] {
    do for [k=1:nser] {
        nm = ""; cf = ""; po = ""
        stats data(i, "storage") using (column("series_index") == k - 1 ? \
              (cf = strcol("config"), po = strcol("policy"), \
               nm = cf . (strcol("meta") eq "-" ? "" : " ".strcol("meta")) . " " . po, 1) : 0) \
              nooutput name "N"
        SN[(i - 1) * nser + k] = (nmodels > 1 ? label[i] . ": " : "") . nm
        SC[(i - 1) * nser + k] = cf
        SP[(i - 1) * nser + k] = po
    }
}
ccolor(c) = c eq "BF16" ? "#808080" : c eq "C4R4" ? c_content : c eq "C2R4" ? "#2a9d8f" : \
            c eq "C8R8" ? "#e9a23b" : c_ratio
sdash(p) = p eq "none" ? 2 : 1
ser(i, k) = column("series_index") == k - 1 ? 1 : NaN
paper = plotdir."/fig5a-paper.tsv"

set multiplot title "Persistent KV-cache storage per token, everything counted" font ",13"
set tmargin at screen 0.86
set bmargin at screen 0.14
set logscale x 2
set xlabel "context (tokens)"
set xtics ("1K" 1024, "4K" 4096, "16K" 16384, "64K" 65536, "256K" 262144, "1M" 1048576)
set mxtics default
set lmargin at screen 0.08
set rmargin at screen 0.40
set logscale y
set ylabel "bytes per token"
unset key
plot for [i=1:nmodels] for [k=1:nser] data(i, "storage") \
         using "context":(ser(i, k) * column("bytes_per_token")) \
         with linespoints pt 7 ps 0.6 lw 1.8 dt sdash(SP[(i - 1) * nser + k]) \
         lc rgb ccolor(SC[(i - 1) * nser + k]) notitle
unset logscale y
set lmargin at screen 0.48
set rmargin at screen 0.76
set ylabel "compression against BF16 (×)"
set yrange [0:*]
set key outside right top Left reverse samplen 2.5 font ",9" spacing 1.1
plot for [i=1:nmodels] for [k=1:nser] data(i, "storage") \
         using "context":(ser(i, k) * column("ratio")) \
         with linespoints pt 7 ps 0.6 lw 1.8 dt sdash(SP[(i - 1) * nser + k]) \
         lc rgb ccolor(SC[(i - 1) * nser + k]) title SN[(i - 1) * nser + k] noenhanced, \
     paper using "context":"ratio" with points pt 12 ps 1.8 lw 2 lc rgb "black" \
         title "paper: C4R4 sink4/local128"
unset multiplot
