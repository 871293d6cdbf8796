#!/bin/sh
# QuantMLA evaluations per layer, as qmla learn writes each layer of
# qm-both.h5 / qm-content.h5 (after the baseline evaluations are done)
set -e
Q=build/cli/qmla; CAP=/tmp/qmla-tf-six-cell.h5; O=/tmp/qmla-six-cell; EV=prose-s2,code-s2
while ! grep -q '^done' $O/evals-parallel.log 2>/dev/null; do sleep 10; done
for L in 0 1 2 3 4 5; do
  while ! grep -q "layer $L rope" $O/learn-qm-both.txt $O/learn-qm-both-part1.txt 2>/dev/null; do sleep 10; done
  sleep 5
  for pol in none sink4/local128; do
    tag=c4-$(echo $pol | tr / -)
    $Q eval $CAP --config C4R4 --policy $pol --cells $EV --threads 2 --layers $L \
       --transforms $O/qm-content.h5 --transforms $O/qm-both.h5 -o $O/eval-$tag-quantmla-L$L.h5 > $O/eval-$tag-quantmla-L$L.txt
  done
  echo "layer $L evaluated $(date -u +%H:%M:%S)"
done
echo done
