# plots/fig7-gains.gp — paper Fig. 7 (a): the local gain of each layer on the
# content and RoPE paths, g = (||J E||^2 / ||Y||^2) / (||E||^2 / ||X||^2) at
# the development QDQ direction (held-out directions left out): one point
# per (cell, sequence) of `qmla predict`'s JVP gain g_jvp (filled) and the
# finite gain g_finite (open, the sweep's response at the same E), the line
# through the per-layer geometric mean of g_jvp (a layer without points is
# left out of it). One panel per results file, log y.
# Reads data/m<i>.predict.tsv (columns layer, path, heldout, g_jvp,
# g_finite). Size 120 + 420 * nmodels by 460 pixels.
load plotdir."/common.gp"

dev(p, c) = (column("heldout") == 0 && column("path") == p && column(c) > 0) ? column(c) : NaN
vmin = 1e300; vmax = 0; lmax = 0
do for [i=1:nmodels] {
    do for [c in "g_jvp g_finite"] {
        stats data(i, "predict") using (dev(0, c) == dev(0, c) ? dev(0, c) : dev(1, c)) nooutput name "S"
        vmin = S_min < vmin ? S_min : vmin
        vmax = S_max > vmax ? S_max : vmax
    }
    stats data(i, "predict") using "layer" nooutput name "L"
    lmax = L_max > lmax ? L_max : lmax
}
# the per-layer geometric means of g_jvp of model i, path p, layer l at
# GM[(i - 1) * 2 * (lmax + 1) + p * (lmax + 1) + l + 1] (before any range is
# set: stats drops values outside the x range)
array GM[nmodels * 2 * (lmax + 1)]
do for [i=1:nmodels] {
    do for [p=0:1] {
        do for [l=0:lmax] {
            undefine M_*
            stats data(i, "predict") using (column("layer") == l ? log(dev(p, "g_jvp")) : NaN) \
                  nooutput name "M"
            GM[(i - 1) * 2 * (lmax + 1) + p * (lmax + 1) + l + 1] = exists("M_mean") ? exp(M_mean) : NaN
        }
    }
}
gm(i, p, k) = GM[(i - 1) * 2 * (lmax + 1) + p * (lmax + 1) + k]
lo10(x) = 10**floor(log10(x) - 0.02)
hi10(x) = 10**ceil(log10(x) + 0.02)
ylo = lo10(vmin); yhi = hi10(vmax * 2.5)

W = 120.0 + 420.0 * nmodels
set multiplot title "Local gain per layer and path (development direction)" font ",13"
set tmargin at screen 0.86
set bmargin at screen 0.14
set logscale y
set format y "10^{%T}"
set yrange [ylo:yhi]
set xrange [-0.5:lmax + 0.5]
set xtics 0, (lmax > 15 ? 5 : 1)
set xlabel "layer"
set key top left Left reverse box opaque samplen 2 font ",10" maxrows 4
off(p) = p == 0 ? -0.12 : 0.12
do for [i=1:nmodels] {
    set lmargin at screen (420.0 * (i - 1) + 110) / W
    set rmargin at screen (420.0 * i + 50) / W
    set title label[i] noenhanced
    if (i == 1) { set ylabel "gain g" } else { unset ylabel }
    plot sample [k=1:lmax + 1:1] '+' using (k - 1 + off(0)):(gm(i, 0, int(k))) \
             with lines lw 1.5 lc rgb c_content title "geometric mean per layer", \
         [k=1:lmax + 1:1] '+' using (k - 1 + off(1)):(gm(i, 1, int(k))) \
             with lines lw 1.5 lc rgb c_rope notitle, \
         data(i, "predict") using (column("layer") + off(0)):(dev(0, "g_jvp")) \
             with points pt 7 ps 1.0 lc rgb c_content title "content, JVP gain", \
         data(i, "predict") using (column("layer") + off(1)):(dev(1, "g_jvp")) \
             with points pt 9 ps 1.1 lc rgb c_rope title "RoPE, JVP gain", \
         data(i, "predict") using (column("layer") + off(0) + 0.06):(dev(0, "g_finite")) \
             with points pt 6 ps 1.0 lc rgb c_content title "finite gain (open)", \
         data(i, "predict") using (column("layer") + off(1) + 0.06):(dev(1, "g_finite")) \
             with points pt 8 ps 1.1 lc rgb c_rope notitle
    unset key
}
unset multiplot
