#!/bin/sh
# evaluations run beside the QuantMLA learning (the same commands as
# run-six-cell.sh's, split by method group)
set -e
Q=build/cli/qmla; CAP=/tmp/qmla-tf-six-cell.h5; O=/tmp/qmla-six-cell; EV=prose-s2,code-s2
$Q eval $CAP --config C4R4 --policy none --cells $EV --threads 2 --transforms $O/rtn.h5 --transforms $O/smoothquant.h5 --transforms $O/quarot.h5 -o $O/eval-c4-none-baselines.h5 > $O/eval-c4-none-baselines.txt
$Q eval $CAP --config C4R4 --policy none --cells $EV --threads 2 --transforms $O/qm-recon.h5 -o $O/eval-objective-c4-none-recon.h5 > $O/eval-objective-c4-none-recon.txt
$Q eval $CAP --config C4R4 --policy sink4/local128 --cells $EV --threads 2 --transforms $O/rtn.h5 --transforms $O/smoothquant.h5 --transforms $O/quarot.h5 -o $O/eval-c4-sink4-local128-baselines.h5 > $O/eval-c4-sink4-local128-baselines.txt
echo done
