# plots/serving-bench.gp — the serving benchmark (issue 21 item 4,
# docs/serving.md): per context (columns: 4K, 32K, 128K tokens), decode
# tokens/s in aggregate against batch (top row, log y) and the cache's device
# GiB against batch (bottom row, log y) for the C4R4 and BF16 qmla pages and
# transformers' DynamicCache (BF16). Top row: the eager step (transformers'
# forward launch by launch; dashed, open markers) and, where the file has
# them (bench_serving.py since run 6), the whole step replayed from a CUDA
# graph (solid, filled markers; decode-kernel variants v0 / v1 / v7, the
# default plan since run 7, for C4R4, v0 / v3 for BF16). A point whose cache would exceed the benchmark's budget
# (dashed line, bottom row) did not run: drawn as an open marker at the bytes
# it would need (bottom) and as a cross at its batch, in its cache's colour,
# near the foot of the tokens/s panel (top). Reads data/m1.serving_bench.tsv
# (columns cache_index, context, batch, fits, cache_gib, tok_s_aggregate,
# budget_gib; written by scripts/serving-table.py). Size 1260 by 760 pixels.
load plotdir."/common.gp"
f = data(1, "serving_bench")
stats f using "budget_gib" nooutput name "BUD"
stats f using "tok_s_aggregate" nooutput name "TOK"
array ctx[3] = [4096, 32768, 131072]
array cname[3] = ["4K", "32K", "128K"]
# caches 0-7 (scripts/serving-table.py's cache_index) at 1-8
array col[8]
col[1] = c_rope
col[2] = c_content
col[3] = "#505050"
col[4] = c_rope
col[5] = "#e8861a"
col[6] = c_content
col[7] = "#2aa0a0"
col[8] = "#b01c2e"
array nm[8] = ["C4R4 eager", "BF16 eager", "DynamicCache eager", "C4R4 graph v0", "C4R4 graph v1", "BF16 graph v0", "BF16 graph v3", "C4R4 graph v7 (default)"]
array pt_[8] = [6, 4, 8, 7, 9, 5, 13, 11]
array dt_[8] = [2, 2, 2, 1, 1, 1, 1, 1]
array lw_[8] = [1.5, 1.5, 1.5, 2, 2, 2, 2, 2.5]
array nr[8] # lines of each cache's data block in the panel being drawn (a block without rows has 2: the blank line and the out-of-range row)
sel(k, c, fit) = (column("cache_index") == k && column("context") == c && column("fits") == fit)
# one curve per cache and context: the rows are filtered into data blocks
# first (a NaN-filtered `using` would leave every point unjoined); every block
# gets, after a blank line (no joining line), one row outside the x range
# appended (a table of no rows makes no block; a file without graph rows has
# none for caches 3-7); $X holds the points that do not fit
mk(j, k) = sprintf("set table $F%d; plot f using 'batch':'tok_s_aggregate':'cache_gib' with table if (sel(%d, %d, 1)); unset table; " . \
                   "set print $F%d append; print ''; print '0.001\t1\t1'; set print", k, k, ctx[j], k)
mkx(j) = sprintf("set table $X; plot f using 'batch':'cache_gib':'cache_index' with table if (sel(0, %d, 0) || sel(1, %d, 0) || sel(2, %d, 0)); unset table; " . \
                 "set print $X append; print '0.001\t1\t0'; set print", ctx[j], ctx[j], ctx[j])
set linetype 1 lc rgb c_rope
set linetype 2 lc rgb c_content
set linetype 3 lc rgb "#505050"
set multiplot layout 2, 3 title "Decode on a random V2-Lite-shaped attention stack (27 layers, H 16, d_c 512, BF16), H200" font ",13"
set logscale x 2
set xrange [0.7:90]
set xtics (1, 8, 32, 64)
ylo = (TOK_min > 0 ? TOK_min : 1) / 4.0
do for [j = 1:3] {
    do for [k = 0:7] { eval mk(j, k); eval sprintf("nr[%d] = |$F%d|", k + 1, k) }
    eval mkx(j)
    set title sprintf("context %s: aggregate tokens/s", cname[j]) font ",11"
    set xlabel "batch (sequences)"
    set ylabel "tokens/s (all sequences)"
    set logscale y 10
    set format y "%g"
    set yrange [ylo : TOK_max * 3]
    # the key in pieces: the eager curves in the first panel, the graph curves
    # in the second, the crosses in the third
    set key top left box opaque font ",8" noenhanced
    plot for [k = 0:7] sprintf("$F%d", k) using 1:2 with linespoints pt pt_[k + 1] ps 1.0 \
           lw lw_[k + 1] dt dt_[k + 1] lc rgb col[k + 1] \
           title (((j == 1 && k < 3) || (j == 2 && k >= 3)) && nr[k + 1] > 2 ? nm[k + 1] : ""), \
         $X using 1:(ylo * (1.4 + 0.5 * $3)):(int($3) + 1) \
           with points pt 2 ps 1.6 lw 2.5 lc variable notitle, \
         NaN with points pt 2 ps 1.4 lw 2 lc rgb "#303030" title (j == 3 ? "does not fit (no step ran)" : "")
}
do for [j = 1:3] {
    do for [k = 0:2] { eval mk(j, k) }
    eval mkx(j)
    set title sprintf("context %s: cache GiB (open: would need)", cname[j]) font ",11"
    set xlabel "batch (sequences)"
    set ylabel "cache GiB (device)"
    set logscale y 10
    set yrange [0.02 : 600]
    set format y "%g"
    if (j != 2) { unset key } else { set key bottom right box opaque font ",9" noenhanced }
    set arrow 1 from graph 0, first BUD_max to graph 1, first BUD_max nohead dt 2 lw 1.5 lc rgb "#303030"
    set label 1 sprintf("budget %.0f GiB", BUD_max) at graph 0.03, first BUD_max offset 0, 0.7 left font ",9"
    plot $F0 using 1:3 with linespoints pt 7 ps 1.1 lw 2 lc rgb col[1] title "C4R4 pages", \
         $F1 using 1:3 with linespoints pt 5 ps 1.1 lw 2 lc rgb col[2] title "BF16 pages", \
         $F2 using 1:3 with linespoints pt 9 ps 1.1 lw 2 lc rgb col[3] title "DynamicCache (BF16)", \
         $X using 1:2:(int($3) + 1) with points pt 6 ps 1.5 lw 2 lc variable notitle, \
         NaN with points pt 6 ps 1.4 lw 2 lc rgb "#303030" title "would need (does not fit)"
    unset arrow 1
    unset label 1
}
unset multiplot
