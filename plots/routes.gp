# plots/routes.gp — error routes per layer (paper §2.3): the output NMSE of
# each finite route when one cache path carries the matched quantization
# error. Content path (blue): matching (Ã − A)C, aggregation A·E and
# interaction (Ã − A)E; RoPE path (red): matching, its only route. One panel
# per model, log scale (the interaction route is second order in the error).
# Reads data/m<i>.responses_by_layer.tsv (columns layer,
# content_nmse_out_matching, content_nmse_out_aggregation,
# content_nmse_out_interaction, rope_nmse_out_matching).
# Size 120 + 400 * nmodels by 460 pixels.
load plotdir."/common.gp"

vmin = 1e300; vmax = 0; lmax = 0
do for [i=1:nmodels] {
    f = data(i, "responses_by_layer")
    do for [col in "content_nmse_out_matching content_nmse_out_aggregation content_nmse_out_interaction rope_nmse_out_matching"] {
        stats f using col nooutput name "S"
        vmin = (S_min < vmin && S_min > 0) ? S_min : vmin
        vmax = S_max > vmax ? S_max : vmax
    }
    stats f using "layer" nooutput name "L"
    lmax = L_max > lmax ? L_max : lmax
}
lo10(x) = 10**floor(log10(x) - 0.02)
hi10(x) = 10**ceil(log10(x) + 0.02)
ylo = lo10(vmin); yhi = hi10(vmax)

W = 120.0 + 400.0 * nmodels
set multiplot title "Error routes per layer (output NMSE of each route)" font ",13"
set tmargin at screen 0.86
set bmargin at screen (nmodels == 1 ? 0.25 : 0.2)
set logscale y
set format y "10^{%T}"
set mytics 10
set yrange [ylo:yhi]
set xrange [-0.5:lmax + 0.5]
set xtics 0, (lmax > 15 ? 5 : 1)
set xlabel "layer"
unset key
do for [i=1:nmodels] {
    set lmargin at screen (400.0 * (i - 1) + 90) / W
    set rmargin at screen (400.0 * i + 30) / W
    set title label[i] noenhanced
    if (i == 1) {
        set ylabel "route output NMSE (‖ΔY_{route}‖² / ‖Y‖²)"
    } else {
        unset ylabel
    }
    f = data(i, "responses_by_layer")
    plot f using "layer":"content_nmse_out_matching" with linespoints lw 2 dt 1 pt 7 ps 0.9 lc rgb c_content title "content: matching", \
         f using "layer":"content_nmse_out_aggregation" with linespoints lw 2 dt 2 pt 9 ps 1.0 lc rgb c_content title "content: aggregation", \
         f using "layer":"content_nmse_out_interaction" with linespoints lw 2 dt 3 pt 13 ps 0.9 lc rgb c_content title "content: interaction", \
         f using "layer":"rope_nmse_out_matching" with linespoints lw 2 dt 1 pt 5 ps 0.9 lc rgb c_rope title "RoPE: matching"
}
# the legend, once for all panels, in an empty plot across the figure
set lmargin at screen 0.02
set rmargin at screen 0.98
unset border; unset tics; unset xlabel; unset ylabel; unset title; unset grid
unset logscale y
set yrange [0:1]
set key at screen 0.5, screen 0.015 center bottom horizontal Left reverse samplen 3 maxcols 4 font ",10"
plot NaN with linespoints lw 2 dt 1 pt 7 ps 0.9 lc rgb c_content title "content: matching", \
     NaN with linespoints lw 2 dt 2 pt 9 ps 1.0 lc rgb c_content title "content: aggregation", \
     NaN with linespoints lw 2 dt 3 pt 13 ps 0.9 lc rgb c_content title "content: interaction", \
     NaN with linespoints lw 2 dt 1 pt 5 ps 0.9 lc rgb c_rope title "RoPE: matching"
unset multiplot
