# plots/fig7-interventions.gp — paper Fig. 7 (c): equal-energy interventions.
# The gain ratio g(E')/g(E) of each control (independent signs, a whole-token
# permutation, an isotropic Gaussian direction; docs/math.md §6) on the
# content and RoPE paths: the geometric mean over items and repetitions with
# its 95 % percentile bootstrap interval, from `qmla intervene`; unity (the
# control changes nothing) dashed. One panel per results file; log y when
# the ratios span more than a factor 8, else linear.
# Reads data/m<i>.intervention_ratios.tsv (qmla export's derived table:
# columns control, control_index, path_index, gain_ratio, ci_low, ci_high).
# Size 120 + 420 * nmodels by 460 pixels.
load plotdir."/common.gp"

vmin = 1.0; vmax = 1.0
do for [i=1:nmodels] {
    stats data(i, "intervention_ratios") using "ci_low" nooutput name "A"
    stats data(i, "intervention_ratios") using "ci_high" nooutput name "B"
    stats data(i, "intervention_ratios") using "gain_ratio" nooutput name "G"
    vmin = A_min < vmin ? A_min : vmin
    vmin = G_min < vmin ? G_min : vmin
    vmax = B_max > vmax ? B_max : vmax
    vmax = G_max > vmax ? G_max : vmax
}
# log y over a wide range; over less than a decade (ratios near 1) linear
# with room above for the key
wide = vmax / vmin > 8
ylo = wide ? vmin / 1.15 : vmin - 0.08 * (vmax - vmin)
yhi = wide ? vmax * 1.6 : vmax + 0.45 * (vmax - vmin)

W = 120.0 + 420.0 * nmodels
set multiplot title "Gain ratio under equal-energy controls" font ",13"
set tmargin at screen 0.86
set bmargin at screen 0.14
if (wide) { set logscale y } else { set format y "%.2f" }
set yrange [ylo:yhi]
set xrange [-0.5:2.5]
set xtics ("signs" 0, "permutation" 1, "isotropic" 2)
set xlabel "control"
set key top left Left reverse box opaque samplen 2 font ",10"
off(p) = p == 0 ? -0.12 : 0.12
path(p) = column("path_index") == p ? column("gain_ratio") : NaN
do for [i=1:nmodels] {
    set lmargin at screen (420.0 * (i - 1) + 110) / W
    set rmargin at screen (420.0 * i + 50) / W
    set title label[i] noenhanced
    if (i == 1) { set ylabel "gain ratio g(E')/g(E)" } else { unset ylabel }
    plot 1 with lines dt 2 lw 1.2 lc rgb c_ratio title "unity", \
         data(i, "intervention_ratios") using (column("control_index") + off(0)):(path(0)):"ci_low":"ci_high" \
             with yerrorbars pt 7 ps 1.2 lw 1.5 lc rgb c_content title "content (95 % CI)", \
         data(i, "intervention_ratios") using (column("control_index") + off(1)):(path(1)):"ci_low":"ci_high" \
             with yerrorbars pt 9 ps 1.3 lw 1.5 lc rgb c_rope title "RoPE (95 % CI)"
    unset key
}
unset multiplot
