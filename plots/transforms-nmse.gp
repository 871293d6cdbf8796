# plots/transforms-nmse.gp — held-out output NMSE per layer for each cache
# transform method (RTN, SmoothQuant†, QuaRot†, QuantMLA, …), both caches
# quantized at the /eval group's configuration (C4R4 or C2R4). One panel per
# results file, log scale; one point per /eval row (layer, cell), methods
# slightly offset along x; methods absent from every file are left out of
# the legend.
# Reads data/m<i>.eval.tsv (columns layer, method, nmse_out).
# Size 120 + 420 * nmodels by 460 pixels.
load plotdir."/common.gp"

methods = "rtn smoothquant quarot quantmla-content quantmla-rope quantmla quantmla#2"
mtitle(m) = m eq "rtn" ? "RTN" : m eq "smoothquant" ? "SmoothQuant†" : m eq "quarot" ? "QuaRot†" : \
            m eq "quantmla" ? "QuantMLA" : m eq "quantmla-content" ? "QuantMLA content only" : \
            m eq "quantmla-rope" ? "QuantMLA RoPE only" : m
mcolor(k) = word("#606060 #2a9d8f #e9a23b #1f5fa8 #7b4fa0 #c8321e #8c564b", k)

array present[words(methods)]
do for [k=1:words(methods)] { present[k] = 0 }
vmin = 1e300; vmax = 0; lmax = 0
do for [i=1:nmodels] {
    do for [k=1:words(methods)] {
        stats data(i, "eval") using (strcol("method") eq word(methods, k) ? 1 : 0) nooutput name "M"
        present[k] = present[k] + M_sum
    }
    stats data(i, "eval") using "nmse_out" nooutput name "S"
    vmin = (S_min < vmin && S_min > 0) ? S_min : vmin
    vmax = S_max > vmax ? S_max : vmax
    stats data(i, "eval") using "layer" nooutput name "L"
    lmax = L_max > lmax ? L_max : lmax
}
lo10(x) = 10**floor(log10(x) - 0.02)
hi10(x) = 10**ceil(log10(x) + 0.02)
ylo = lo10(vmin); yhi = hi10(vmax * 3)

W = 120.0 + 420.0 * nmodels
set multiplot title "Output NMSE per layer and transform" font ",13"
set tmargin at screen 0.86
set bmargin at screen 0.14
set logscale y
set format y "10^{%T}"
set yrange [ylo:yhi]
set xrange [-0.5:lmax + 0.5]
set xtics 0, (lmax > 15 ? 5 : 1)
set xlabel "layer"
set key top left Left reverse box opaque samplen 2 font ",10" maxrows 6
do for [i=1:nmodels] {
    set lmargin at screen (420.0 * (i - 1) + 110) / W
    set rmargin at screen (420.0 * i + 50) / W
    set title label[i] noenhanced
    if (i == 1) { set ylabel "output NMSE" } else { unset ylabel }
    plot for [k=1:words(methods)] data(i, "eval") \
         using (column("layer") + 0.08 * (k - 2.5)):(strcol("method") eq word(methods, k) ? column("nmse_out") : NaN) \
         with points pt (4 + k) ps 1.1 lw 2 lc rgb mcolor(k) title (present[k] > 0 ? mtitle(word(methods, k)) : "")
    unset key
}
unset multiplot
