# written by qmla figures: the inputs, m<i>.<table>.tsv for i = 1..nmodels
nmodels = 1
array label[1]
array model[1]
array source[1]
array nmse[1]
label[1] = 'H200 serving benchmark'
model[1] = ''
source[1] = 'docs/evidence/serving/bench_serving-h200-2026-12-04-run9.h5'
nmse[1] = NaN
