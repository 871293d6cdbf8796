# written by qmla figures: the inputs, m<i>.<table>.tsv for i = 1..nmodels
nmodels = 1
array label[1]
array model[1]
array source[1]
array nmse[1]
label[1] = 'H200 decode run 14: H 16 / s_q 1 / default kernels'
model[1] = ''
source[1] = 'results/decode-h200-run14.h5'
nmse[1] = NaN
