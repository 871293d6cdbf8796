# plots/fig5b-latency.gp — paper Fig. 5 (b): decode attention time of the
# low-bit caches over the BF16 cache's time at the same point and call, at
# batch 8 (left) and 32 (right), against the context (log x): C4R4 blue,
# C2R4 green, C8R8 orange (sink4/local128 protection), unity dashed. The
# paper's C4R4 range over 1K–1M at both batches (§4.4: 7.42 % lower to
# 4.29 % higher than BF16, i.e. 0.9258–1.0429) is the shaded band; the
# paper's per-point values are not in the text we hold. Every input's lines
# in the same panels (point type per input, its label in the key when there
# are several).
# Reads data/m<i>.table9.tsv (the decode benchmark's /table9, or
# scripts/decode-table.py's: columns batch, context, BF16_us, C4R4_us,
# C2R4_us, C8R8_us, medians of one call; a configuration not measured is NaN
# and not drawn). The ratio is C_us / BF16_us, as table9's Δ.
# Size 1000 by 460 pixels.
load plotdir."/common.gp"

ylo = 1.0; yhi = 1.0
do for [i=1:nmodels] {
    do for [c in "C4R4 C2R4 C8R8"] {
        stats data(i, "table9") using ((column("batch") == 8 || column("batch") == 32) ? \
              column(c."_us") / column("BF16_us") : NaN) nooutput name "R"
        if (R_records > 0) {
            ylo = R_min < ylo ? R_min : ylo
            yhi = R_max > yhi ? R_max : yhi
        }
    }
}
plo = 0.9258; phi = 1.0429
ylo = (ylo < plo ? ylo : plo); yhi = (yhi > phi ? yhi : phi)
pad = 0.08 * (yhi - ylo)
ccolor(c) = c eq "C4R4" ? c_content : c eq "C2R4" ? "#2a9d8f" : "#e9a23b"
bat(B, c) = column("batch") == B ? column(c."_us") / column("BF16_us") : NaN
pre(i) = nmodels > 1 ? label[i] . ": " : ""

set multiplot title "Decode attention time relative to BF16 (same call, medians)" font ",13"
set tmargin at screen 0.84
set bmargin at screen 0.14
set logscale x 2
set xrange [768:1400000]
set xtics ("1K" 1024, "4K" 4096, "16K" 16384, "64K" 65536, "256K" 262144, "1M" 1048576)
set xlabel "context (tokens)"
set yrange [ylo - pad:yhi + 2.5 * pad]
set format y "%.2f"
do for [p=1:2] {
    B = p == 1 ? 8 : 32
    set lmargin at screen (p == 1 ? 0.08 : 0.55)
    set rmargin at screen (p == 1 ? 0.47 : 0.94)
    set title sprintf("batch %d", B)
    if (p == 1) { set ylabel "time / BF16 time"; unset key } else { unset ylabel }
    # the key in the upper right corner of the right panel, over the band
    # (long contexts: the lines of H200 run 13 are below 0.9 there)
    if (p == 2) { set key at graph 0.98, graph 0.98 right top Left reverse box opaque samplen 2 font ",9" }
    plot '+' using 1:(plo):(phi) with filledcurves fs transparent solid 0.18 noborder \
             lc rgb c_content title "paper: C4R4 range, 1K–1M", \
         1 with lines dt 2 lw 1.2 lc rgb c_ratio title "BF16", \
         for [i=1:nmodels] for [c in "C4R4 C2R4 C8R8"] data(i, "table9") \
             using "context":(bat(B, c)) with linespoints pt (5 + 2 * ((i - 1) % 4)) ps 0.9 lw 1.8 \
             lc rgb ccolor(c) title pre(i) . c noenhanced
}
unset multiplot
