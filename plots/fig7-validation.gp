# plots/fig7-validation.gp — paper Fig. 7 (b): the frozen operator +
# allocation predictor against the measurement. One point per RoPE/content
# pair of `qmla predict` (an item and a QDQ direction): x the measured log
# response ratio log(g_finite RoPE / g_finite content), y the predicted
# log(pred_alloc RoPE / pred_alloc content); one marker per direction
# (held-out directions starred in the key), the identity line dashed; the
# key gives the Spearman correlation of the plotted points (Pearson of their
# average ranks) and their mean |y - x| (the file's
# mae_log_ratio_operator_allocation). One panel per results file.
# Reads data/m<i>.predict_pairs.tsv (qmla export's derived table: columns
# log_ratio_measured, log_ratio_pred_alloc, direction, direction_index,
# heldout, abs_error_alloc, rank_measured, rank_pred_alloc).
# Size 120 + 640 * nmodels by 500 pixels.
load plotdir."/common.gp"

vmin = 1e300; vmax = -1e300; ndir = 0
array RHO[nmodels]
array MAE[nmodels]
array NP[nmodels]
do for [i=1:nmodels] {
    stats data(i, "predict_pairs") using "log_ratio_measured" nooutput name "X"
    stats data(i, "predict_pairs") using "log_ratio_pred_alloc" nooutput name "Y"
    vmin = X_min < vmin ? X_min : vmin
    vmin = Y_min < vmin ? Y_min : vmin
    vmax = X_max > vmax ? X_max : vmax
    vmax = Y_max > vmax ? Y_max : vmax
    stats data(i, "predict_pairs") using "rank_measured":"rank_pred_alloc" nooutput name "R"
    RHO[i] = R_correlation
    stats data(i, "predict_pairs") using "abs_error_alloc" nooutput name "E"
    MAE[i] = E_mean
    NP[i] = E_records
    stats data(i, "predict_pairs") using "direction_index" nooutput name "D"
    ndir = D_max + 1 > ndir ? D_max + 1 : ndir
}
# the direction names, from the first file that has each index
array DN[ndir]
array DH[ndir]
do for [k=1:ndir] { DN[k] = sprintf("direction %d", k - 1); DH[k] = 0 }
do for [i=1:nmodels] {
    do for [k=1:ndir] {
        nm = ""
        stats data(i, "predict_pairs") using (column("direction_index") == k - 1 ? \
              (nm = strcol("direction"), hh = column("heldout"), 1) : 0) nooutput name "N"
        if (nm ne "") { DN[k] = nm; DH[k] = hh }
    }
}
pad = 0.06 * (vmax - vmin + 1e-3)
lo = vmin - pad; hi = vmax + pad
dcolor(k) = word("#1f5fa8 #c8321e #2a9d8f #e9a23b #7b4fa0 #606060 #8c564b #d62798", (k - 1) % 8 + 1)

W = 120.0 + 640.0 * nmodels
set multiplot title "Predicted against measured RoPE/content log response ratio" font ",13"
set tmargin at screen 0.86
set bmargin at screen 0.13
set xrange [lo:hi]
set yrange [lo:hi]
set size ratio -1
set xlabel "measured log(R_{RoPE} / R_{content})"
set key outside right top Left reverse box samplen 1.5 font ",9" spacing 1.1
do for [i=1:nmodels] {
    set lmargin at screen (640.0 * (i - 1) + 110) / W
    set rmargin at screen (640.0 * i - 150) / W
    set title label[i] noenhanced
    if (i == 1) { set ylabel "predicted log ratio (operator + allocation)" } else { unset ylabel }
    plot x with lines dt 2 lw 1.2 lc rgb c_ratio title "identity", \
         NaN with points pt -1 title sprintf("Spearman %.3f", RHO[i]), \
         NaN with points pt -1 title sprintf("MAE %.3f", MAE[i]), \
         NaN with points pt -1 title sprintf("(%d pairs; * held out)", NP[i]), \
         for [k=1:ndir] data(i, "predict_pairs") \
             using "log_ratio_measured":(column("direction_index") == k - 1 ? column("log_ratio_pred_alloc") : NaN) \
             with points pt (4 + 2 * ((k - 1) % 6)) + (k > 6) ps 1.1 lw 1.5 lc rgb dcolor(k) \
             title (DN[k] . (DH[k] > 0 ? "*" : "")) noenhanced
}
unset multiplot
