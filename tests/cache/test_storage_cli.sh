#!/usr/bin/env bash
# test_storage_cli.sh — `qmla storage`: the TSV header and columns, the exact
# byte accounting of docs/math.md §9 (C4R4 f16: 1479424 bytes at 4K,
# 42627584 at 128K), the paper's 3.59x at 128K reached with q8 metadata, and
# usage errors (exit 2), policy numbers beyond int refused. Needs QMLA_BIN (set by meson).
set -uo pipefail
q=${QMLA_BIN:?QMLA_BIN not set}
pass=0 fail=0
ok() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAILED: $2" >&2; fi; }
out=$("$q" storage --contexts 4096,131072 --config C4R4 --policy sink4/local128 --format tsv)
ok '[ "$(echo "$out" | head -1 | cut -f5,11,12)" = "$(printf "context\tbytes_per_token\tratio")" ]' "tsv header"
ok '[ "$(echo "$out" | wc -l)" = 3 ]' "one row per context"
ok '[ "$(echo "$out" | awk -F"\t" "NR==2{print \$10}")" = 1479424 ]' "4K total bytes"
ok '[ "$(echo "$out" | awk -F"\t" "NR==3{print \$10}")" = 42627584 ]' "128K total bytes"
r=$("$q" storage --contexts 131072 --config C4R4 --meta q8 --format tsv | awk -F'\t' 'NR==2{print $12}')
ok 'awk -v r="$r" "BEGIN{exit !(r >= 3.59)}"' "q8 ratio at 128K >= 3.59 (found $r)"
r=$("$q" storage --contexts 4096 --config C4R4 --policy none --format tsv | awk -F'\t' 'NR==2{print $8}')
ok '[ "$r" = 0 ]' "policy none: no BF16 buffers"
"$q" storage --config C5R4 >/dev/null 2>&1; ok '[ $? = 2 ]' "bad config exits 2"
# a bad config anywhere in the list: the message names it, nothing on stdout
so=$("$q" storage --config C4R4,C5R4 2>/tmp/qmla-storage-err.$$); rc=$?
ok '[ $rc = 2 ] && [ -z "$so" ]' "bad second config: exit 2 (found $rc), no table printed (found: ${so:0:60})"
ok 'grep -q "found 5" /tmp/qmla-storage-err.$$' "bad second config named in the message"
rm -f /tmp/qmla-storage-err.$$
# no protection is printed as the policy none (was sink0/local0)
r=$("$q" storage --contexts 4096 --config C4R4 --policy none | awk 'NR==2{print $3}')
ok '[ "$r" = none ]' "policy none printed as none (found $r)"
"$q" storage --policy sink4 >/dev/null 2>&1; ok '[ $? = 2 ]' "bad policy exits 2"
"$q" storage --meta f32 >/dev/null 2>&1; ok '[ $? = 2 ]' "bad meta exits 2"
"$q" storage --contexts 0 >/dev/null 2>&1; ok '[ $? = 2 ]' "context 0 exits 2"
# policy numbers: beyond 9 digits refused (%d wrapped them: sink 1215752191,
# or negative byte counts with exit 0); the largest accepted are counted
# exactly: (999999999 + 999999999) x 576 x 2 bytes of BF16 buffers
for p in sink99999999999/local1 sink2000000000/local2000000000; do
  "$q" storage --policy $p >/dev/null 2>&1; ok '[ $? = 2 ]' "policy $p exits 2"
done
r=$("$q" storage --contexts 64 --policy sink999999999/local999999999 --format tsv | awk -F'\t' 'NR==2{print $8}')
ok '[ "$r" = 2303999997696 ]' "9-digit sink and window: BF16 buffer bytes (found $r)"
# a list of policies: a row per (config, policy, context), BF16 (no policy)
# once; the rows of one policy are those of that policy alone
out=$("$q" storage --contexts 4096,131072 --config BF16,C4R4 --policy sink4/local128,none --format tsv)
ok '[ "$(echo "$out" | wc -l)" = 7 ]' "policy list: 2 BF16 + 2 x 2 C4R4 rows and the header"
one=$("$q" storage --contexts 4096,131072 --config C4R4 --policy none --format tsv | tail -n 2)
ok '[ "$(echo "$out" | tail -n 2)" = "$one" ]' "policy list: the none rows equal --policy none's"
"$q" storage --policy sink4/local128,sink4 >/dev/null 2>&1; ok '[ $? = 2 ]' "bad policy in a list exits 2"
# -o: a new file is written, a file of another kind is refused and kept
t=$(mktemp -d)
"$q" storage --contexts 4096 -o "$t/s.h5" >/dev/null; ok '[ $? = 0 ] && [ -s "$t/s.h5" ]' "-o writes the file"
"$q" storage --contexts 131072 -o "$t/s.h5" >/dev/null; ok '[ $? = 0 ]' "-o replaces an earlier storage file"
sh=$("$q" show "$t/s.h5"); rc=$?
ok '[ $rc = 0 ] && echo "$sh" | grep -q "^storage accounting (qmla storage -o)" && echo "$sh" | grep -Eq "C4R4 +f16 +sink4/local128 +131072 +4.26276e\+07 +325.223 +3.54219"' "show of a storage file: provenance and the row (found: ${sh:0:80})"
printf 'text\n' >"$t/x.txt"
"$q" storage -o "$t/x.txt" >/dev/null 2>"$t/err"; rc=$?
ok '[ $rc = 2 ] && [ "$(cat "$t/x.txt")" = text ] && grep -q "x.txt" "$t/err"' "-o a text file: exit 2 naming it, file kept"
rm -rf "$t"
echo "test_storage_cli: $pass passed, $fail failed"
[ $fail = 0 ]
