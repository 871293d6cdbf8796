# plots/fig2-responses.gp — paper Fig. 2: layer-wise functional response under
# matched cache error. One panel per model: the content- and RoPE-path
# responses R = NMSE_out / NMSE_cache per layer (log scale); a last panel:
# the per-layer RoPE/content ratios of each model, with the median (diamond)
# and interquartile range (whiskers); the dashed line marks equal response.
# Error bars: the 95 % bootstrap intervals over sequences within cells
# (docs/math.md §3.1) of each layer's responses and ratio; a panel whose
# file has none (a cell holds one sequence, or NaN columns) says so.
# Reads data/m<i>.summary.tsv (columns layer, response_content,
# response_rope, ratio, and response_content_lo/_hi, response_rope_lo/_hi,
# ratio_lo/_hi). Run by `qmla figures` (variables: common.gp); its
# size is 420 + 360 * nmodels by 460 pixels (the last 420 for the ratios).
load plotdir."/common.gp"

# shared ranges over all models
ymin = 1e300; ymax = 0; lmax = 0
array MED[nmodels]
array LO[nmodels]
array HI[nmodels]
qmin = 1e300; qmax = 0; maxlab = 0
array CI[nmodels]
do for [i=1:nmodels] {
    # intervals, where the file has finite ones (stats defines nothing
    # when every value is NaN)
    undefine EC_* EP_* EQ_*
    stats data(i, "summary") using "response_content_lo" nooutput name "EC"
    stats data(i, "summary") using "response_rope_lo" nooutput name "EP"
    stats data(i, "summary") using "ratio_lo" nooutput name "EQ"
    CI[i] = exists("EC_records") || exists("EP_records")
    ymin = (exists("EC_min") && EC_min > 0 && EC_min < ymin) ? EC_min : ymin
    ymin = (exists("EP_min") && EP_min > 0 && EP_min < ymin) ? EP_min : ymin
    qmin = (exists("EQ_min") && EQ_min > 0 && EQ_min < qmin) ? EQ_min : qmin
    undefine EC_* EP_* EQ_*
    stats data(i, "summary") using "response_content_hi" nooutput name "EC"
    stats data(i, "summary") using "response_rope_hi" nooutput name "EP"
    stats data(i, "summary") using "ratio_hi" nooutput name "EQ"
    ymax = (exists("EC_max") && EC_max > ymax) ? EC_max : ymax
    ymax = (exists("EP_max") && EP_max > ymax) ? EP_max : ymax
    qmax = (exists("EQ_max") && EQ_max > qmax) ? EQ_max : qmax
    stats data(i, "summary") using "response_content" nooutput name "C"
    stats data(i, "summary") using "response_rope" nooutput name "P"
    stats data(i, "summary") using "layer" nooutput name "L"
    stats data(i, "summary") using "ratio" nooutput name "Q"
    ymin = (C_min < ymin && C_min > 0) ? C_min : ymin
    ymin = (P_min < ymin && P_min > 0) ? P_min : ymin
    ymax = C_max > ymax ? C_max : ymax
    ymax = P_max > ymax ? P_max : ymax
    lmax = L_max > lmax ? L_max : lmax
    MED[i] = Q_median; LO[i] = Q_lo_quartile; HI[i] = Q_up_quartile
    qmin = (Q_min < qmin && Q_min > 0) ? Q_min : qmin
    qmax = Q_max > qmax ? Q_max : qmax
    maxlab = strlen(label[i]) > maxlab ? strlen(label[i]) : maxlab
}
# decade-rounded limits, with room at the top for the legend
lo10(x) = 10**floor(log10(x) - 0.02)
hi10(x) = 10**ceil(log10(x) + 0.02)
ylo = lo10(ymin); yhi = hi10(ymax * 3)
qlo = lo10(qmin < 1 ? qmin : 1); qhi = hi10((qmax > 1 ? qmax : 1) * 6)
# model names under the ratio panel when they fit, else numbers (and the
# number in each panel's title)
numbered = (maxlab * 7.5 * nmodels > 330)

W = 420.0 + 360.0 * nmodels
set multiplot title "Layer-wise response at matched cache NMSE: content vs RoPE path" font ",13"
set tmargin at screen 0.86
set bmargin at screen 0.14
set logscale y
set format y "10^{%T}"
set mytics 10
set yrange [ylo:yhi]
set xrange [-0.5:lmax + 0.5]
xstep = lmax > 15 ? 5 : 1
ps = lmax > 20 ? 0.5 : 0.9
set xtics 0, xstep
set xlabel "layer"
set key top left Left reverse box opaque samplen 2 spacing 1.1 font ",10"
do for [i=1:nmodels] {
    set lmargin at screen (360.0 * (i - 1) + 75) / W
    set rmargin at screen (360.0 * i - 10) / W
    if (numbered) {
        set title sprintf("(%d) %s", i, label[i]) noenhanced
    } else {
        set title label[i] noenhanced
    }
    if (i == 1) {
        set ylabel "response R = NMSE_{out} / NMSE_{cache}"
    } else {
        unset ylabel
    }
    if (CI[i]) {
        unset label 10
    } else {
        set label 10 "no intervals: a cell holds one sequence" at graph 0.97, graph 0.05 right font ",9" tc rgb "#606060"
    }
    plot data(i, "summary") using "layer":"response_content":"response_content_lo":"response_content_hi" with yerrorbars lw 1.5 pt 7 ps 0 lc rgb c_content notitle, \
         data(i, "summary") using "layer":"response_rope":"response_rope_lo":"response_rope_hi" with yerrorbars lw 1.5 pt 5 ps 0 lc rgb c_rope notitle, \
         data(i, "summary") using "layer":"response_content" with linespoints lw 2 pt 7 ps ps lc rgb c_content title "content R_C", \
         data(i, "summary") using "layer":"response_rope" with linespoints lw 2 pt 5 ps ps lc rgb c_rope title "RoPE R_P", \
         keyentry with yerrorbars lw 1.5 pt 1 ps 0 lc rgb "#303030" title (CI[i] ? "95% interval" : "")
    unset key
}
unset label 10

# ratio distributions
set lmargin at screen (360.0 * nmodels + 90) / W
set rmargin at screen (W - 20) / W
set title "per-layer RoPE/content ratio"
set ylabel "ratio R_P / R_C" offset 1, 0
set xlabel ""
set yrange [qlo:qhi]
set xrange [0.4:nmodels + 0.6]
unset xtics
set xtics scale 0 noenhanced
do for [i=1:nmodels] {
    if (numbered) {
        set xtics add (sprintf("(%d)", i) i)
    } else {
        set xtics add (label[i] i)
    }
}
set grid noxtics
set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead dt 2 lw 1.5 lc rgb "#606060"
set key top center Left reverse box opaque samplen 1.5 maxrows 3 font ",10"
jit(l) = 0.3 * ((l * 0.618034) - floor(l * 0.618034) - 0.5)
plot for [i=1:nmodels] data(i, "summary") using (i - 0.12 + jit(column("layer"))):"ratio":"ratio_lo":"ratio_hi" with yerrorbars lw 1 pt 6 ps 0 lc rgb c_ratio notitle, \
     for [i=1:nmodels] data(i, "summary") using (i - 0.12 + jit(column("layer"))):"ratio" with points pt 6 ps 0.8 lc rgb c_ratio title (i == 1 ? "one layer" : ""), \
     [k=1:nmodels:1] '+' using (k + 0.12):(MED[k]):(LO[k]):(HI[k]) with yerrorbars lw 2 pt 13 ps 1.8 lc rgb "black" title "median, IQR", \
     NaN with lines dt 2 lw 1.5 lc rgb "#606060" title "equal response"
unset multiplot
