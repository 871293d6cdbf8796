# plots/fig6-atlas.gp — paper Fig. 6: layer-wise atlas of dual-path output
# distortion. Upper: content (C) and RoPE (R) output NMSE per layer (columns)
# and model (rows), one log colour scale shared by all models and both
# paths. Lower: the RoPE/content output-NMSE ratio, log scale centred on 1
# (white: equal distortion; red: RoPE worse; blue: content worse). Gray pads
# layers beyond a model's analysed depth.
# Reads data/m<i>.responses_by_layer.tsv (columns layer, content_nmse_out,
# rope_nmse_out). Size 1000 by 300 + 100 * nmodels pixels.
load plotdir."/common.gp"

vmin = 1e300; vmax = 0; qmin = 1e300; qmax = 0; lmax = 0; maxlab = 0
do for [i=1:nmodels] {
    f = data(i, "responses_by_layer")
    stats f using "content_nmse_out" nooutput name "C"
    stats f using "rope_nmse_out" nooutput name "P"
    stats f using (column("rope_nmse_out") / column("content_nmse_out")) nooutput name "Q"
    stats f using "layer" nooutput name "L"
    vmin = (C_min < vmin && C_min > 0) ? C_min : vmin
    vmin = (P_min < vmin && P_min > 0) ? P_min : vmin
    vmax = C_max > vmax ? C_max : vmax
    vmax = P_max > vmax ? P_max : vmax
    qmin = (Q_min < qmin && Q_min > 0) ? Q_min : qmin
    qmax = Q_max > qmax ? Q_max : qmax
    lmax = L_max > lmax ? L_max : lmax
    maxlab = strlen(label[i]) > maxlab ? strlen(label[i]) : maxlab
}
lo10(x) = 10**floor(log10(x))
hi10(x) = 10**ceil(log10(x))
vlo = lo10(vmin); vhi = hi10(vmax)
vlo = vhi / vlo < 100 ? vhi / 100 : vlo
# ratio scale symmetric in log around 1, in half decades
m = qmax > 1 / qmin ? qmax : 1 / qmin
m = 10**(ceil(2 * log10(m > 1.5 ? m : 1.5)) / 2.0)
show_values = lmax <= 15

# rows: model i has C at y = 2 (nmodels - i) + 1, R just below (upper panel);
# its ratio row at y = nmodels - i (lower panel)
yC(i) = 2 * (nmodels - i) + 1
yR(i) = 2 * (nmodels - i)
yQ(i) = nmodels - i

H = 300.0 + 100 * nmodels
left = (maxlab + 16) * 7.2 + 20
left = left < 150 ? 150 : left
top = 75.0; mid = 70.0; bottom = 55.0
uh = (H - top - mid - bottom) * 2 / 3.0
same_nu = 1
do for [i=1:nmodels] {
    same_nu = (nmse[i] == nmse[1]) ? same_nu : 0
}
set multiplot title (same_nu ? sprintf("Layer atlas of dual-path output distortion at cache NMSE %g", nmse[1]) : "Layer atlas of dual-path output distortion (matched cache NMSE)") font ",13"
set lmargin at screen left / width
set rmargin at screen (width - 170.0) / width
unset key
set xrange [-0.5:lmax + 0.5]
set xtics 0, (lmax > 15 ? 5 : 1) scale 0
set grid noxtics noytics
set style fill solid 1.0 noborder
set logscale cb
set format cb "10^{%T}"
unset colorbox
set colorbox user origin screen (width - 150.0) / width, screen (H - top - uh) / H size screen 18.0 / width, screen uh / H

# upper: output NMSE
set tmargin at screen (H - top) / H
set bmargin at screen (H - top - uh) / H
set yrange [-0.5:2 * nmodels - 0.5]
set ytics scale 0 noenhanced ()
do for [i=1:nmodels] {
    set ytics add (label[i]." · content" yC(i), label[i]." · RoPE" yR(i))
}
set xlabel ""
set format x ""
set cbrange [vlo:vhi]
unset cblabel
set label 11 "output NMSE" at screen (width - 141.0) / width, screen (H - top + 26) / H center font ",10"
set palette defined (0 "#440154", 1 "#3b528b", 2 "#21918c", 3 "#5ec962", 4 "#fde725")
set object 1 rect from -0.5, -0.5 to lmax + 0.5, 2 * nmodels - 0.5 fc rgb c_pad fs solid 1.0 behind
txt(v, lo, hi) = (log10(v) - log10(lo)) / (log10(hi) - log10(lo)) > 0.55 ? 0x000000 : 0xffffff
plot for [i=1:nmodels] data(i, "responses_by_layer") using "layer":(yC(i)):(0.5):(0.5):"content_nmse_out" with boxxyerror fc palette, \
     for [i=1:nmodels] data(i, "responses_by_layer") using "layer":(yR(i)):(0.5):(0.5):"rope_nmse_out" with boxxyerror fc palette, \
     for [i=1:nmodels] data(i, "responses_by_layer") using "layer":(yC(i)):(show_values ? sprintf("%.2g", column("content_nmse_out")) : ""):(txt(column("content_nmse_out"), vlo, vhi)) with labels tc rgb variable font ",9", \
     for [i=1:nmodels] data(i, "responses_by_layer") using "layer":(yR(i)):(show_values ? sprintf("%.2g", column("rope_nmse_out")) : ""):(txt(column("rope_nmse_out"), vlo, vhi)) with labels tc rgb variable font ",9"
unset object 1

# lower: ratio
lh = H - top - mid - bottom - uh
set tmargin at screen (bottom + lh) / H
set bmargin at screen bottom / H
set colorbox user origin screen (width - 150.0) / width, screen bottom / H size screen 18.0 / width, screen lh / H
set yrange [-0.5:nmodels - 0.5]
set ytics scale 0 noenhanced ()
do for [i=1:nmodels] {
    set ytics add (label[i]." · RoPE/content" yQ(i))
}
set xlabel "layer"
set format x "%g"
set cbrange [1.0 / m:m]
set format cb "%g"
unset mcbtics
set label 12 "RoPE / content" at screen (width - 141.0) / width, screen (bottom + lh + 26) / H center font ",10"
set palette defined (0 "#1f5fa8", 0.5 "#ffffff", 1 "#c8321e")
set object 2 rect from -0.5, -0.5 to lmax + 0.5, nmodels - 0.5 fc rgb c_pad fs solid 1.0 behind
ratio(r) = column("rope_nmse_out") / column("content_nmse_out")
plot for [i=1:nmodels] data(i, "responses_by_layer") using "layer":(yQ(i)):(0.5):(0.5):(ratio(0)) with boxxyerror fc palette, \
     for [i=1:nmodels] data(i, "responses_by_layer") using "layer":(yQ(i)):(show_values ? sprintf("%.2g×", ratio(0)) : "") with labels tc rgb "black" font ",9"
unset multiplot
