#!/usr/bin/env bash
# tests/engine/test_ppl_resume.sh — `qmla ppl` resumes from RESULTS.h5.journal
# (kind ppl; docs/results-format.md, "Resume journals") on models/tiny-mla,
# two texts x {bf16, C4R4, C4R4 sink4/local128} x 12 windows (two groups, 24 windows):
#   - SIGINT mid-run: exit 130, no results file, the message names the
#     journal and says to rerun; the journal holds every finished window;
#   - a rerun with other options (--tokens, --context, --config, --policy)
#     is refused (exit 2, naming the journal, the key field that differs and
#     --force) and leaves the journal as it was;
#   - the same command again restores exactly the windows the SIGINT kept;
#   - the same command again, SIGKILLed once the second group has started;
#   - the same command again: "resumed K of 24 windows" with K at least the
#     windows journaled before the kill (so it did not start over), exit 0,
#     the journal removed, and every dataset and attribute of /ppl and
#     /ppl_table equal to an uninterrupted run's, bit for bit (the NLL sums
#     are journaled as C99 hex reals and summed in window order), the KL
#     columns from the fp32 reference included (per-window KL sums as hex
#     reals, per-token KL as float32 bit patterns);
#   - SIGTERM keeps a journal too; --force with other options discards it
#     (nothing resumed, the new options' results written).
# QMLA_TEST_SMALL=1 (set by tests/meson.build in a sanitizer build): every
# step on 6 windows per text (--tokens 3072, 12 windows) instead of 12.
# Env (set by meson): QMLA_BIN, QMLA_SOURCE_ROOT, QMLA_PYTHON.
source "$(dirname "$0")/../support/cli_lib.sh"
need_python
M=$ROOT/models/tiny-mla
H=$ROOT/data/heldout
tok=6144
[ "${QMLA_TEST_SMALL:-0}" = 1 ] && tok=3072
nw=$((2 * tok / 512))   # windows of both texts
A=(ppl "$M" --text "$H/prose.txt.gz" --text "$H/code.txt.gz" --config bf16,C4R4
   --policy none,sink4/local128 --tokens $tok)
J=$work/r.h5.journal
pid=
cleanup_extra() { [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; }
windows() { local n; n=$(grep -c '^W ' "${1:-$J}" 2>/dev/null); echo "${n:-0}"; }

expect 0 "uninterrupted run" -- "$QMLA" "${A[@]}" --threads 2 -o "$work/ref.h5"
[ ! -e "$work/ref.h5.journal" ] && ok || bad "the journal of a finished run was kept"

# SIGINT once a record is journaled
"$QMLA" "${A[@]}" --threads 1 -o "$work/r.h5" >"$work/int.out" 2>&1 &
pid=$!
for _ in $(seq 600); do [ "$(windows)" -ge 1 ] && break; sleep 0.1; done
kill -INT $pid
wait $pid; rc=$?; pid=
[ $rc = 130 ] && ok || bad "SIGINT: exit $rc, expected 130"
[ ! -e "$work/r.h5" ] && ok || bad "SIGINT: a results file was written"
grep -qF "interrupted (SIGINT); the finished windows are kept in $J — rerun the same command to resume" \
  "$work/int.out" && ok || { bad "SIGINT: message"; cat "$work/int.out" >&2; }
k1=$(windows)
[ "$k1" -ge 1 ] && ok || bad "SIGINT: no window journaled"
head -1 "$J" | grep -q '^qmla-journal 1 ppl ' && ok || bad "journal header: $(head -1 "$J")"

# other options: refused, the journal unchanged
sum0=$(sha256sum <"$J")
for other in "--tokens 4096|tokens=$tok in the journal, tokens=4096 now" \
             "--context 256|context=512 in the journal, context=256 now" \
             "--config bf16|configs=bf16@none,C4R4@none,C4R4@sink4%2Flocal128 in the journal, configs=bf16@none now" \
             "--policy none|configs=bf16@none,C4R4@none,C4R4@sink4%2Flocal128 in the journal, configs=bf16@none,C4R4@none now"; do
  IFS='|' read -r other field <<<"$other"
  # shellcheck disable=SC2086
  expect 2 "other options ($other)" -- "$QMLA" "${A[@]}" $other --threads 2 -o "$work/r.h5"
  containsF "$J: journal of another run" "$other: the journal named"
  containsF "$field" "$other: the field that differs named"
  containsF "use --force to discard it" "$other: --force suggested"
  [ "$(sha256sum <"$J")" = "$sum0" ] && ok || bad "$other: the journal changed"
done
[ ! -e "$work/r.h5" ] && ok || bad "a refused run wrote the results file"

# the same command, SIGKILLed once the second group has windows journaled
"$QMLA" "${A[@]}" --threads 1 -o "$work/r.h5" >"$work/kill.out" 2>&1 &
pid=$!
for _ in $(seq 900); do grep -q '^W 1 ' "$J" 2>/dev/null && break; sleep 0.1; done
kill -KILL $pid
wait $pid 2>/dev/null; pid=
grep -q "resumed $k1 of $nw windows from $J" "$work/kill.out" && ok || {
  bad "the first rerun did not resume the $k1 windows"; cat "$work/kill.out" >&2; }
grep -q '^W 1 ' "$J" && ok || bad "SIGKILL: the second group never reached the journal"
k2=$(windows)
[ ! -e "$work/r.h5" ] && ok || bad "SIGKILL: a results file was written"

# and again: resumes at least what was whole at the kill, writes the same results
expect 0 "rerun after SIGKILL" -- "$QMLA" "${A[@]}" --threads 2 -o "$work/r.h5"
k3=$(sed -n "s/.*resumed \\([0-9]*\\) of $nw windows from.*/\\1/p" "$work/out")
[ -n "$k3" ] && [ "$k3" -gt "$k1" ] && [ "$k3" -le "$k2" ] && ok ||
  { bad "after SIGKILL: resumed \"$k3\", expected more than $k1, at most $k2"; cat "$work/out" >&2; }
[ ! -e "$J" ] && ok || bad "the journal was kept after the results were written"
cat > "$work/same.py" <<'PY'
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:3])
n = 0
def attrs(x, y, where):
    global n
    assert sorted(x.attrs) == sorted(y.attrs), where
    for k in x.attrs:
        if k in ("command_line", "created_utc", "elapsed_s", "threads"):
            continue  # of the run, not the result (-o differs; the provenance block's time)
        assert np.array_equal(x.attrs[k], y.attrs[k]), (where, k, x.attrs[k], y.attrs[k])
        n += 1
attrs(a["ppl"], b["ppl"], "/ppl")
assert sorted(a["ppl"]) == sorted(b["ppl"]) and len(a["ppl"]) == 6, sorted(b["ppl"])
for r in a["ppl"]:
    attrs(a["ppl"][r], b["ppl"][r], r)
t, u = a["ppl_table"], b["ppl_table"]
assert sorted(t) == sorted(u)
# the KL columns (reference fp32, scored without a row) are resumed too
assert {"kl_mean_nats", "kl_ci95_lo", "kl_ci95_hi", "kl_p99_nats", "top1_agreement"} <= set(t), sorted(t)
assert (t["kl_mean_nats"][...] > 0).all(), t["kl_mean_nats"][...]
for k in t:
    x, y = t[k][...], u[k][...]
    assert x.dtype == y.dtype and x.shape == y.shape, k
    assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), (k, x, y)
    n += 1
print(n, "values equal")
PY
"$PY" "$work/same.py" "$work/ref.h5" "$work/r.h5" && ok || bad "resumed results differ from the uninterrupted run's"

# --force with other options: the journal is discarded, nothing resumed
"$QMLA" "${A[@]}" --threads 1 -o "$work/f.h5" >"$work/int2.out" 2>&1 &
pid=$!
for _ in $(seq 600); do [ "$(windows "$work/f.h5.journal")" -ge 1 ] && break; sleep 0.1; done
kill -TERM $pid
wait $pid; rc=$?; pid=
[ $rc = 130 ] && [ -s "$work/f.h5.journal" ] && ok || bad "SIGTERM: exit $rc, journal kept?"
grep -qF "interrupted (SIGTERM)" "$work/int2.out" && ok || bad "SIGTERM: message"
expect 0 "--force with other options" -- "$QMLA" "${A[@]}" --tokens 1024 --threads 2 --force -o "$work/f.h5"
lacks "resumed" "--force: nothing resumed"
[ ! -e "$work/f.h5.journal" ] && ok || bad "--force: the journal was kept"
"$PY" -c 'import h5py,sys; t=h5py.File(sys.argv[1])["ppl_table/tokens"][...]; assert list(t)==[1024]*6, t' \
  "$work/f.h5" && ok || bad "--force: the results are not the new options'"
expect 0 "help names --force" -- "$QMLA" ppl --help
containsF "RESULTS.h5.journal" "help describes the journal"
containsF "--force" "help names --force"
finish test_ppl_resume
