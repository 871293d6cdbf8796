# written by qmla figures: the inputs, m<i>.<table>.tsv for i = 1..nmodels
nmodels = 1
array label[1]
array model[1]
array source[1]
array nmse[1]
label[1] = 'qmla storage (f16 metadata)'
model[1] = ''
source[1] = 'results/storage.h5'
nmse[1] = NaN
