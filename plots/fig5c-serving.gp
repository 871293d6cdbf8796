# plots/fig5c-serving.gp — paper Fig. 5 (c): whole-job output throughput per
# cache configuration of a serving run under KV-cache pressure, from
# `qmla serve-sim -o` (filled bars, one per configuration), beside the
# paper's (plots/table10-paper.tsv, open bars, for the configurations it
# has: BF16 and C4R4 on DeepSeek-R1-0528, eight GPUs); each bar labelled
# with its preemption count. One panel per results file.
# Reads data/m<i>.serve_sim.tsv (columns config, throughput, preemptions).
# Size 120 + 420 * nmodels by 460 pixels.
load plotdir."/common.gp"
# every line of a table file after the comments is data but the first (the
# column names), also for the plots that name no column in `using`
set datafile columnheaders

paper = plotdir."/table10-paper.tsv"
pb = NaN; pc = NaN; qb = NaN; qc = NaN
stats paper using (strcol("metric") eq "throughput" ? (pb = column("BF16"), pc = column("C4R4"), 1) : \
      strcol("metric") eq "preemptions" ? (qb = column("BF16"), qc = column("C4R4"), 1) : 0) \
      nooutput name "P"
pthr(c) = c eq "BF16" ? pb : c eq "C4R4" ? pc : NaN
ppre(c) = c eq "BF16" ? qb : c eq "C4R4" ? qc : NaN
ymax = (pb > pc ? pb : pc)
nmax = 0
do for [i=1:nmodels] {
    stats data(i, "serve_sim") using "throughput" nooutput name "T"
    ymax = T_max > ymax ? T_max : ymax
    nmax = T_records > nmax ? T_records : nmax
}
# the colours of common.gp and fig5a-storage.gp as numbers (lc rgb variable)
ccol(c) = c eq "BF16" ? 0x808080 : c eq "C4R4" ? 0x1f5fa8 : c eq "C2R4" ? 0x2a9d8f : \
          c eq "C8R8" ? 0xe9a23b : 0x404040
plab(n) = n == n ? sprintf("%d preempt.", n) : ""

W = 120.0 + 420.0 * nmodels
set multiplot title "Whole-job output throughput under KV-cache pressure" font ",13"
set tmargin at screen 0.86
set bmargin at screen 0.14
set yrange [0:ymax * 1.35]
set xrange [-0.6:nmax - 0.4]
set style fill solid 0.85 border lc rgb "#303030"
set boxwidth 0.34
set xlabel "cache configuration"
set key top left Left reverse box opaque samplen 1.5 font ",9"
do for [i=1:nmodels] {
    set lmargin at screen (420.0 * (i - 1) + 110) / W
    set rmargin at screen (420.0 * i + 50) / W
    set title label[i] noenhanced
    if (i == 1) { set ylabel "output tokens/s" } else { unset ylabel }
    plot data(i, "serve_sim") using ($0 - 0.18):"throughput":(0.34):(ccol(strcol("config"))) \
             with boxes lc rgb variable title "simulated (qmla serve-sim)", \
         data(i, "serve_sim") using ($0 + 0.18):(pthr(strcol("config"))):(0.34) \
             with boxes fs empty border rgb "black" lc rgb "black" lw 1.5 title "paper (Table 10)", \
         data(i, "serve_sim") using ($0 - 0.18):"throughput":(sprintf("%d preempt.", column("preemptions"))) \
             with labels offset 0, 0.9 font ",9" notitle, \
         data(i, "serve_sim") using ($0 + 0.18):(pthr(strcol("config"))):(plab(ppre(strcol("config")))) \
             with labels offset 0, 0.9 font ",9" notitle, \
         data(i, "serve_sim") using ($0):(0):xticlabels(strcol("config")) with points pt -1 notitle
    unset key
}
unset multiplot
