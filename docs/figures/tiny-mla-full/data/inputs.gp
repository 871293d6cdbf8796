# written by qmla figures: the inputs, m<i>.<table>.tsv for i = 1..nmodels
nmodels = 2
array label[2]
array model[2]
array source[2]
array nmse[2]
label[1] = 'tiny-mla, ν=0.01'
model[1] = 'qmla/tiny-mla'
source[1] = 'experiments/tiny-mla/results/tiny-mla-full-sweep.h5'
nmse[1] = 0.01
label[2] = 'tiny-mla, ν=0.001'
model[2] = 'qmla/tiny-mla'
source[2] = 'experiments/tiny-mla/results/tiny-mla-full-sweep-nu1e-3.h5'
nmse[2] = 0.001
