#!/usr/bin/env bash
# test_merge.sh — `qmla sweep --shard I/N` + `qmla merge` against a serial
# sweep of the same capture (the expectation is the serial run, not the
# merge code): 3 round-robin shards and 2 cost-balanced shards (one of them
# with 2 threads) merge into /responses, /summary and /cells identical byte
# for byte; merge refuses an incomplete set (naming the missing shard and
# items), two parts of one shard, a part of other parameters, a part of
# another plan, a file that is not a part, and an output that is a part.
# tiny-mla-default.h5: 6 layers x 2 cells x 1 sequence = 12 items, so a
# round-robin shard of 3 holds 4 items (8 rows).
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT.
set -uo pipefail
. "$(dirname "$0")/../support/cli_lib.sh"
. "$(dirname "$0")/../support/h5same.sh"
C=$ROOT/data/tiny-mla-default.h5
cd "$work"

expect 0 "serial sweep" -- "$QMLA" sweep "$C" -o serial.h5 --threads 1
for i in 0 1 2; do
  expect 0 "shard $i/3" -- "$QMLA" sweep "$C" -o p$i.h5 --shard $i/3 --threads 1
done
expect 0 "part 0 holds 8 rows" -- test "$(h5ls p0.h5/responses/layer | grep -o '{[0-9]*}')" = "{8}"
expect 0 "merge 3 parts" -- "$QMLA" merge p2.h5 p0.h5 p1.h5 -o merged.h5
containsF "merged   3 parts -> merged.h5 (24 rows)" "merge line"
expect 0 "round-robin merge equals serial" -- h5same serial.h5 merged.h5
expect 0 "shard 0/2 balanced" -- "$QMLA" sweep "$C" -o b0.h5 --shard 0/2 --balance --threads 1
expect 0 "shard 1/2 balanced, 2 threads" -- "$QMLA" sweep "$C" -o b1.h5 --shard 1/2 --balance --threads 2
expect 0 "merge balanced" -- "$QMLA" merge b0.h5 b1.h5 -o mb.h5
expect 0 "balanced merge equals serial" -- h5same serial.h5 mb.h5
expect 1 "the comparison tells a part from the whole" -- h5same serial.h5 p0.h5

expect 2 "incomplete set refused" -- "$QMLA" merge p0.h5 p1.h5 -o x.h5
containsF "incomplete: 4 of the plan's items are missing; no part for shard(s) 2" "missing count and shard"
containsF "(layer 1, cell \"code-s0\", sequence 0: shard 2)" "first missing item"
expect 0 "nothing written when refused" -- test ! -e x.h5
cp p1.h5 p1-copy.h5
expect 2 "two parts of one shard refused" -- "$QMLA" merge p0.h5 p1.h5 p1-copy.h5 p2.h5 -o x.h5
containsF "p1.h5 and p1-copy.h5 are both shard 1 of 3: overlapping parts" "overlap message"
expect 0 "shard 1/3 at 8 bits" -- "$QMLA" sweep "$C" -o f1.h5 --shard 1/3 --bits 8 --threads 1
expect 2 "foreign part refused" -- "$QMLA" merge p0.h5 f1.h5 p2.h5 -o x.h5
contains "f1.h5 is a part of another sweep than p0.h5 (found \".*bits=8" "foreign message"
expect 2 "part of another plan refused" -- "$QMLA" merge b0.h5 p1.h5 -o x.h5
containsF "p1.h5 is a part of another plan than b0.h5" "plan message"
expect 2 "results file is not a part" -- "$QMLA" merge serial.h5 -o x.h5
containsF "not a part file" "not a part message"
expect 2 "output that is a part refused" -- "$QMLA" merge p0.h5 p1.h5 p2.h5 -o p0.h5
expect 2 "bad --shard" -- "$QMLA" sweep "$C" -o y.h5 --shard 3/3
containsF "--shard: expected I/N with 0 <= I < N" "shard usage"
expect 0 "incomplete refusal kept parts" -- test -s p0.h5
# an output that already holds a part of another plan is rewritten
cp p1.h5 re.h5
expect 0 "balanced shard over a round-robin part" -- "$QMLA" sweep "$C" -o re.h5 --shard 1/2 --balance --threads 1
expect 0 "merge with the rewritten part" -- "$QMLA" merge b0.h5 re.h5 -o mre.h5
expect 0 "and it equals serial" -- h5same serial.h5 mre.h5
finish test_merge
