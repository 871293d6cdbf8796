# plots/serving-bench.gp — the serving benchmark (issue 21 item 4,
# docs/serving.md): per context (columns: 4K, 32K, 128K tokens), decode
# tokens/s in aggregate against batch (top row) and the cache's device GiB
# against batch (bottom row, log y) for the C4R4 and BF16 qmla pages and
# transformers' DynamicCache (BF16). A point whose cache would exceed the
# benchmark's budget (dashed line, bottom row) did not run: drawn as an open
# marker at the bytes it would need (bottom) and as a cross at its batch,
# in its cache's colour, near the foot of the tokens/s panel (top). Reads data/m1.serving_bench.tsv (columns cache_index,
# context, batch, fits, cache_gib, tok_s_aggregate, budget_gib; written by
# scripts/serving-table.py). Size 1260 by 760 pixels.
load plotdir."/common.gp"
f = data(1, "serving_bench")
stats f using "budget_gib" nooutput name "BUD"
stats f using "tok_s_aggregate" nooutput name "TOK"
array ctx[3] = [4096, 32768, 131072]
array cname[3] = ["4K", "32K", "128K"]
array col[3]
col[1] = c_rope
col[2] = c_content
col[3] = "#505050"
array nm[3] = ["C4R4 pages", "BF16 pages", "DynamicCache (BF16)"]
array pt_[3] = [7, 5, 9]
sel(k, c, fit) = (column("cache_index") == k && column("context") == c && column("fits") == fit)
# one curve per cache and context: the rows are filtered into data blocks
# first (a NaN-filtered `using` would leave every point unjoined); $X, the
# points that do not fit, gets one row outside the x range appended (a table of
# no rows makes no block)
mk(j) = sprintf("set table $F0; plot f using 'batch':'tok_s_aggregate':'cache_gib' with table if (sel(0, %d, 1)); " . \
                "set table $F1; plot f using 'batch':'tok_s_aggregate':'cache_gib' with table if (sel(1, %d, 1)); " . \
                "set table $F2; plot f using 'batch':'tok_s_aggregate':'cache_gib' with table if (sel(2, %d, 1)); " . \
                "set table $X; plot f using 'batch':'cache_gib':'cache_index' with table if (sel(0, %d, 0) || sel(1, %d, 0) || sel(2, %d, 0)); " . \
                "unset table", ctx[j], ctx[j], ctx[j], ctx[j], ctx[j], ctx[j])
set linetype 1 lc rgb c_rope
set linetype 2 lc rgb c_content
set linetype 3 lc rgb "#505050"
set multiplot layout 2, 3 title "Decode on a random V2-Lite-shaped attention stack (27 layers, H 16, d_c 512, BF16), H200" font ",13"
set logscale x 2
set xrange [0.7:90]
set xtics (1, 8, 32, 64)
do for [j = 1:3] {
    eval mk(j)
    set print $X append
    print "0.001\t1\t0"
    set print
    set title sprintf("context %s: aggregate tokens/s", cname[j]) font ",11"
    set xlabel "batch (sequences)"
    set ylabel "tokens/s (all sequences)"
    unset logscale y
    set yrange [0 : TOK_max * 1.18]
    if (j != 2) { unset key } else { set key top left box opaque font ",9" noenhanced }
    plot $F0 using 1:2 with linespoints pt pt_[1] ps 1.1 lw 2 lc rgb col[1] title nm[1], \
         $F1 using 1:2 with linespoints pt pt_[2] ps 1.1 lw 2 lc rgb col[2] title nm[2], \
         $F2 using 1:2 with linespoints pt pt_[3] ps 1.1 lw 2 lc rgb col[3] title nm[3], \
         $X using 1:(TOK_max * (0.06 + 0.08 * $3)):(int($3) + 1) \
           with points pt 2 ps 1.6 lw 2.5 lc variable notitle, \
         NaN with points pt 2 ps 1.4 lw 2 lc rgb "#303030" title "does not fit (no step ran)"
}
do for [j = 1:3] {
    eval mk(j)
    set print $X append
    print "0.001\t1\t0"
    set print
    set title sprintf("context %s: cache GiB (open: would need)", cname[j]) font ",11"
    set xlabel "batch (sequences)"
    set ylabel "cache GiB (device)"
    set logscale y 10
    set yrange [0.02 : 600]
    set format y "%g"
    if (j != 2) { unset key } else { set key bottom right box opaque font ",9" noenhanced }
    set arrow 1 from graph 0, first BUD_max to graph 1, first BUD_max nohead dt 2 lw 1.5 lc rgb "#303030"
    set label 1 sprintf("budget %.0f GiB", BUD_max) at graph 0.03, first BUD_max offset 0, 0.7 left font ",9"
    plot $F0 using 1:3 with linespoints pt pt_[1] ps 1.1 lw 2 lc rgb col[1] title nm[1], \
         $F1 using 1:3 with linespoints pt pt_[2] ps 1.1 lw 2 lc rgb col[2] title nm[2], \
         $F2 using 1:3 with linespoints pt pt_[3] ps 1.1 lw 2 lc rgb col[3] title nm[3], \
         $X using 1:2:(int($3) + 1) with points pt 6 ps 1.5 lw 2 lc variable notitle, \
         NaN with points pt 6 ps 1.4 lw 2 lc rgb "#303030" title "would need (does not fit)"
    unset arrow 1
    unset label 1
}
unset multiplot
