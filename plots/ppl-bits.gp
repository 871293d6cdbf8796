# plots/ppl-bits.gp — the accuracy table as a figure: bits/byte above the
# BF16 cache (Δ, log scale) for each cache configuration and policy (C4R4 and
# C2R4, without protection and under sink/local) and each method (RTN,
# SmoothQuant†, QuaRot†, QuantMLA, and QuantMLA content only when present),
# one panel per text of each results file (`qmla ppl`'s /ppl_table).
# A Δ at or below 1e-5 (or negative: better than BF16) is drawn at 1e-5 and
# marked with an open triangle.
# Reads data/m<i>.ppl_table.tsv (columns text_index, config, method, policy,
# delta_bits_per_byte). Size 120 + 840 * nmodels by 460 pixels (two texts).
load plotdir."/common.gp"

methods = "RTN SmoothQuant QuaRot QuantMLA-content QuantMLA"
mtitle(m) = m eq "SmoothQuant" ? "SmoothQuant†" : m eq "QuaRot" ? "QuaRot†" : \
            m eq "QuantMLA-content" ? "QuantMLA content only" : m
mcolor(k) = word("#606060 #2a9d8f #e9a23b #7b4fa0 #c8321e", k)
groups = "C4R4|none C4R4|sink C2R4|none C2R4|sink"
gtitle(g) = word("C4R4 C4R4+sink/local C2R4 C2R4+sink/local", g)
xg(cfg, pol) = cfg eq "C4R4" ? (pol eq "none" ? 0 : 1) : cfg eq "C2R4" ? (pol eq "none" ? 2 : 3) : NaN
floor_ = 1e-5
clip(d) = d > floor_ ? d : floor_

array present[words(methods)]
do for [k=1:words(methods)] { present[k] = 0 }
ntext = 1
vmax = floor_
do for [i=1:nmodels] {
    do for [k=1:words(methods)] {
        stats data(i, "ppl_table") using (strcol("method") eq word(methods, k) ? 1 : 0) nooutput name "M"
        present[k] = present[k] + M_sum
    }
    stats data(i, "ppl_table") using "text_index" nooutput name "T"
    ntext = T_max + 1 > ntext ? T_max + 1 : ntext
    stats data(i, "ppl_table") using "delta_bits_per_byte" nooutput name "S"
    vmax = S_max > vmax ? S_max : vmax
}
npanel = nmodels * ntext
W = 120.0 + 420.0 * npanel
set multiplot title "Bits/byte above the BF16 cache, per cache configuration and method" font ",13"
set tmargin at screen 0.86
set bmargin at screen 0.16
set logscale y
set format y "10^{%T}"
set yrange [floor_ * 0.7 : 10**ceil(log10(vmax) + 0.3)]
set xrange [-0.5:3.5]
set xtics ("C4R4" 0, "C4R4\nsink4/local128" 1, "C2R4" 2, "C2R4\nsink4/local128" 3) font ",9"
set style fill solid 0.85 border lc rgb "#303030"
set boxwidth 0.15
set key top left Left reverse box opaque samplen 1.5 font ",9" maxrows 5
p = 0
do for [i=1:nmodels] {
  do for [t=0:ntext-1] {
    p = p + 1
    set lmargin at screen (420.0 * (p - 1) + 100) / W
    set rmargin at screen (420.0 * p + 60) / W
    tn = sprintf("text %d", t + 1)
    stats data(i, "ppl_table") using (column("text_index") == t ? (tn = strcol("text"), 0) : 0) nooutput
    while (strstrt(tn, "/") > 0) { tn = tn[strstrt(tn, "/") + 1:*] }
    set title sprintf("%s: %s", label[i], tn) noenhanced
    if (p == 1) { set ylabel "Δ bits/byte vs BF16" } else { unset ylabel }
    plot for [k=1:words(methods)] data(i, "ppl_table") \
         using (xg(strcol("config"), strcol("policy")) + 0.16 * (k - 3)):\
               ((strcol("method") eq word(methods, k) && column("text_index") == t) ? clip(column("delta_bits_per_byte")) : NaN) \
         with boxes lc rgb mcolor(k) title (present[k] > 0 ? mtitle(word(methods, k)) : ""), \
         for [k=1:words(methods)] data(i, "ppl_table") \
         using (xg(strcol("config"), strcol("policy")) + 0.16 * (k - 3)):\
               ((strcol("method") eq word(methods, k) && column("text_index") == t && column("delta_bits_per_byte") <= floor_) ? floor_ * 1.25 : NaN) \
         with points pt 8 ps 0.8 lc rgb "#303030" notitle
    unset key
  }
}
unset multiplot
