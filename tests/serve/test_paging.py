#!/usr/bin/python3
"""tests/serve/test_paging.py — the host bookkeeping of qmla.torch.MLAPagedCache
(python/qmla/paging.py) without torch: page sizes against docs/decode.md's
figures and `qmla storage` (QMLA_BIN), block tables and slots against a
brute-force owner map, the sink/window rule against a simulated ring,
plan buckets and prefill pieces. Random draws from seed 21.
Run: /usr/bin/python3 tests/serve/test_paging.py (QMLA_BIN=build/cli/qmla optional).
"""
import os
import random
import subprocess
import sys

ROOT = os.environ.get("QMLA_SOURCE_ROOT") or os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))
import qmla.paging as P  # noqa: E402

FAILS = []
N = [0]


def check(cond, what):
    N[0] += 1
    if not cond:
        FAILS.append(what)
        print("FAIL", what)


# ---- page sizes: the byte counts docs/decode.md states for the C layout
for name, want in (("C4R4", 20736), ("C2R4", 12544), ("C8R8", 39168), ("BF16", 73728)):
    check(P.page_bytes(P.parse_config(name)) == want, f"page bytes {name}")

# q8 metadata (include/qmla/kvcache.h): 4 + 2 * groups bytes per token and path
for name, want in (("C4R4", 20096), ("C2R4", 11904)):
    cfg = P.parse_config(name, meta="q8")
    check(P.page_bytes(cfg) == want and cfg["meta"] == "q8", f"page bytes {name} q8")
    check(P.cfg_list(cfg) == [cfg["c_bits"], cfg["r_bits"], 64, 4, 128, 2], f"cfg list {name} q8")
    check(P.page_bytes(P.parse_config(name)) - want == 64 * 10, f"{name}: q8 saves 10 bytes a token")
check(P.cfg_list(P.parse_config("C4R4"))[5] == 0 and P.cfg_list(P.parse_config("BF16"))[5] == 0,
      "cfg list: f16 and BF16 meta code 0")
check(P.split_cache_name("C4R4q8") == ("C4R4", "q8") and P.split_cache_name("BF16") == ("BF16", "f16"),
      "split_cache_name")


def refused(fn, needles, what):
    try:
        fn()
    except P.PagingError as e:
        check(all(n in str(e) for n in needles), f"{what}: message names {needles}: {e}")
        return
    check(False, f"{what} accepted")


refused(lambda: P.parse_config("C8R8", meta="q8"), ("C8R8", "q8", "C4R4 / C2R4"), "C8R8 q8")
refused(lambda: P.parse_config("BF16", meta="q8"), ("BF16", "q8"), "BF16 q8")
refused(lambda: P.parse_config("C4R4", meta="f32"), ("f32", "f16", "q8"), "meta f32")
q8c = P.parse_config("C2R4", meta="q8")
for v in (2, 5, 6, 8, 9, 10):
    refused(lambda v=v: P.check_variant(q8c, v, "C2R4"), ("C2R4", "q8", f"variant {v}", "0, 1, 3, 4, 7"),
            f"C2R4 q8 variant {v}")
for v in P.Q8_VARIANTS:
    P.check_variant(q8c, v)
    check(True, "")
for v in range(11):                       # f16 pages: no refusal here (the plan decides)
    P.check_variant(P.parse_config("C4R4"), v)
check(True, "f16: every variant passes check_variant")

# ---- refusals
for bad in ("C3R4", "C4R2", "FP8"):
    try:
        P.parse_config(bad)
        check(False, f"{bad} accepted")
    except P.PagingError as e:
        check("C4R4" in str(e), f"{bad}: message names the choices")
try:
    P.parse_config("C4R4", sink=-1)
    check(False, "negative sink accepted")
except P.PagingError:
    check(True, "")

# ---- bytes per token against `qmla storage` (no page rounding at multiples of 64)
qbin = os.environ.get("QMLA_BIN")
if qbin and os.path.exists(qbin):
    for name in ("C4R4", "C2R4", "C8R8", "BF16"):
        pol = "none" if name == "BF16" else "sink4/local128"
        r = subprocess.run([qbin, "storage", "--contexts", "4096,131072", "--config", name,
                            "--policy", pol, "--format", "tsv"], capture_output=True, text=True)
        check(r.returncode == 0, f"qmla storage {name}: rc {r.returncode} {r.stderr}")
        lines = [ln.split("\t") for ln in r.stdout.strip().splitlines()]
        head = lines[0]
        col = head.index("bytes_per_token")
        ctx = head.index("context")
        for row in lines[1:]:
            T = int(row[ctx])
            cfg = P.parse_config(name) if name != "BF16" else P.parse_config("BF16")
            got = P.bytes_per_token(cfg, T)
            check(abs(got - float(row[col])) <= 1e-6 * got,
                  f"bytes/token {name} {T}: {got} vs qmla storage {row[col]}")
    # q8 metadata: `qmla storage --meta q8` (C4R4 315.22 bytes a token at 128K)
    for name in ("C4R4", "C2R4"):
        r = subprocess.run([qbin, "storage", "--contexts", "4096,32768,131072", "--config", name,
                            "--meta", "q8", "--policy", "sink4/local128", "--format", "tsv"],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"qmla storage {name} q8: rc {r.returncode} {r.stderr}")
        lines = [ln.split("\t") for ln in r.stdout.strip().splitlines()]
        head = lines[0]
        col, ctx = head.index("bytes_per_token"), head.index("context")
        check(len(lines) == 4, f"qmla storage {name} q8: 3 rows")
        for row in lines[1:]:
            T = int(row[ctx])
            got = P.bytes_per_token(P.parse_config(name, meta="q8"), T)
            check(abs(got - float(row[col])) <= 1e-6 * got,
                  f"bytes/token {name} q8 {T}: {got} vs qmla storage {row[col]}")
    # a context off the page grid: ours counts the whole last page (>= storage's)
    cfg = P.parse_config("C4R4")
    check(P.bytes_per_token(cfg, 4097) > P.bytes_per_token(cfg, 4096), "page rounding")
else:
    print("note: QMLA_BIN not set, qmla storage comparison skipped")

# ---- block tables: random growth and release against an owner map
rng = random.Random(21)
pool = P.PagePool(40)
bt = P.BlockTables(batch=5, max_len=500, pool=pool)
owner = {}                                       # physical page -> sequence
for step in range(400):
    s = rng.randrange(5)
    if rng.random() < 0.08 and bt.lengths[s]:
        for p in bt.pages[s]:
            del owner[p]
        bt.release(s)
        continue
    new = min(500, bt.lengths[s] + rng.randrange(0, 90))
    try:
        added = bt.grow(s, new)
        for p in added:
            check(p not in owner, f"page {p} handed out twice")
            owner[p] = s
    except P.PagingError as e:
        need = -(-new // 64) - len(bt.pages[s])
        check(need > pool.free and "exhausted" in str(e), f"refusal with {pool.free} free: {e}")
        continue
    # every slot of every sequence: its own page, the right offset, distinct
    seen = set()
    for q in range(5):
        L = bt.lengths[q]
        check(len(bt.pages[q]) == -(-L // 64), f"seq {q}: {len(bt.pages[q])} pages for {L}")
        for t, sl in zip(range(L), bt.slots(q, range(L))):
            check(owner.get(sl // 64) == q and sl % 64 == t % 64, f"slot of seq {q} pos {t}")
            check(sl not in seen, "slot shared")
            seen.add(sl)
    check(pool.free + len(owner) == 40, "pages conserved")
tab = bt.table()
check(len(tab) == 5 and all(len(r) == bt.max_pages for r in tab), "table shape")
for q in range(5):
    check(tab[q][:len(bt.pages[q])] == bt.pages[q], "table rows")
for bad in ((0, 501), (7, 10)):
    try:
        bt.grow(*bad)
        check(False, f"grow{bad} accepted")
    except P.PagingError:
        check(True, "")
try:
    bt.slots(0, [bt.lengths[0]])
    check(False, "slot past the length")
except P.PagingError:
    check(True, "")
try:
    pool.release([0, 0])
    check(False, "double release")
except P.PagingError:
    check(True, "")

# ---- reserve (MLAPagedCache._reserve's logic): all or nothing. A mirror list
# stands in for the device block table; failures are injected where they can
# happen: the pool runs out at a later sequence, the upload raises, a growth
# raises after earlier sequences grew.
def snapshot(bt):
    return ([list(p) for p in bt.pages], list(bt.lengths), bt.pool.free, list(bt.pool._free))


def mirror_upload(dev, fail=None):
    def up(seqs, rows):
        if fail is not None:
            raise fail
        for s_, r in zip(seqs, rows):
            dev[s_] = list(r)
    return up


pool = P.PagePool(7)
bt = P.BlockTables(3, 64 * 5, pool)
dev = bt.table()
check(P.reserve(bt, 64, mirror_upload(dev)) == [0, 1, 2], "reserve 64: every row changed")
check(dev == bt.table() and pool.free == 4, "reserve 64: device rows == host rows, 3 pages used")
check(P.reserve(bt, 70, mirror_upload(dev)) == [0, 1, 2] and pool.free == 1, "reserve 70")
before, dev0 = snapshot(bt), [list(r) for r in dev]
# 3 sequences to 130 tokens need 3 pages, 1 free: sequence 0 would get it and
# sequence 1 fail (the old loop grew 0 and left its row un-uploaded)
try:
    P.reserve(bt, 130, mirror_upload(dev))
    check(False, "reserve beyond the pool accepted")
except P.PagingError as e:
    check("need 3 pages" in str(e) and "1 of 7 free" in str(e) and "nothing reserved" in str(e),
          "pool exhausted: message names the pages asked and free: " + str(e))
check(snapshot(bt) == before and dev == dev0, "pool exhausted: tables, pool, device rows unchanged")
try:
    P.reserve(bt, 64 * 5 + 1, mirror_upload(dev))
    check(False, "reserve above max_len accepted")
except P.PagingError as e:
    check("max_len" in str(e) and snapshot(bt) == before, "above max_len: refused, unchanged")
# the upload fails (a device error): the growth is undone
pool2 = P.PagePool(12)
bt2 = P.BlockTables(3, 64 * 4, pool2)
dev2 = bt2.table()
P.reserve(bt2, 100, mirror_upload(dev2))
before2, dev20 = snapshot(bt2), [list(r) for r in dev2]
boom = RuntimeError("CUDA error: injected")
try:
    P.reserve(bt2, 200, mirror_upload(dev2, fail=boom))
    check(False, "failed upload swallowed")
except RuntimeError as e:
    check(e is boom, "failed upload: the upload's error goes on")
check(snapshot(bt2) == before2 and dev2 == dev20, "failed upload: growth undone, device rows unchanged")
check(P.reserve(bt2, 200, mirror_upload(dev2)) == [0, 1, 2] and dev2 == bt2.table()
      and pool2.free == 0, "after a failed upload the same reservation succeeds, rows uploaded")
# a sequence's growth fails after earlier ones grew (grow made to raise at
# sequence 2): grow_all undoes sequences 0 and 1
pool3 = P.PagePool(20)
bt3 = P.BlockTables(4, 64 * 4, pool3)
P.reserve(bt3, 10, mirror_upload(bt3.table()))
before3 = snapshot(bt3)
real_grow = bt3.grow


def grow_fails_at_2(seq, new_len):
    if seq == 2:
        raise P.PagingError("injected")
    return real_grow(seq, new_len)


bt3.grow = grow_fails_at_2
try:
    P.reserve(bt3, 150, mirror_upload(bt3.table()))
    check(False, "failing growth swallowed")
except P.PagingError as e:
    check(str(e) == "injected", "failing growth: its error goes on")
check(snapshot(bt3) == before3, "failing growth at sequence 2: sequences 0, 1 undone, pool as before")
bt3.grow = real_grow
# sequences of different lengths: only the short ones grow; one staying inside
# its page changes no row
pool4 = P.PagePool(10)
bt4 = P.BlockTables(3, 64 * 3, pool4)
dev4 = bt4.table()
bt4.grow(1, 100)
dev4[1] = bt4.table()[1]
check(P.reserve(bt4, 64, mirror_upload(dev4)) == [0, 2] and bt4.lengths == [64, 100, 64],
      "reserve skips a longer sequence")
check(P.reserve(bt4, 100, mirror_upload(dev4)) == [0, 2], "reserve 100: 0 and 2 take a page")
check(P.reserve(bt4, 110, mirror_upload(dev4)) == [] and bt4.lengths == [110] * 3
      and dev4 == bt4.table(), "reserve inside the last pages: lengths grow, no row changes")

# ---- protection rule against a simulated ring of W rows + a sink
for S, W in ((4, 128), (0, 0), (4, 16), (0, 7)):
    cfg = P.parse_config("C4R4", sink=S, window=W)
    for L in (1, 5, 63, 64, 130, 300):
        ring = [None] * W
        for t in range(L):
            if W:
                ring[P.window_row(cfg, t)] = t
        for t in range(L):
            in_ring = W > 0 and ring[t % W] == t
            check(P.protected(cfg, t, L) == (t < S or in_ring), f"S{S} W{W} len {L} t {t}")

# ---- plan buckets and prefill pieces
cap = 64 * 40
prev = 0
for L in range(1, cap + 1, 37):
    b = P.plan_bucket(L, cap)
    check(L <= b <= cap, f"bucket {b} for {L}")
    check(b >= prev, "buckets monotone")
    prev = b
check(P.plan_bucket(65, cap) == 128 and P.plan_bucket(64, cap) == 64, "power-of-two buckets")
# the finer buckets MLAPagedCache plans with: >= the length, <= cap, monotone,
# at most 1/8 more than the length beyond 4096 tokens (plus the page), equal
# to the power-of-two bucket up to 4096 tokens
prev = 0
big = 64 * 4200
for L in list(range(1, big + 1, 97)) + [1024, 1025, 4096, 4097, 131072, 131073]:
    b = P.plan_bucket_fine(L, big)
    check(L <= b <= big and b % 64 == 0 or b == big, f"fine bucket {b} for {L}")
    if L > P.FINE_FROM:
        check(b <= L * 1.125 + 64, f"fine bucket {b} for {L} within 1/8")
    else:
        check(b == P.plan_bucket(L, big), f"fine bucket {b} for {L} = power of two")
for L in sorted(set(range(1, big + 1, 97))):
    b = P.plan_bucket_fine(L, big)
    check(b >= prev, "fine buckets monotone")
    prev = b
check(P.plan_bucket_fine(40000, 131136) == 40960 and P.plan_bucket_fine(131080, 131136) == 131136,
      "fine buckets: 40000 -> 40960, the benchmark's 128K length -> the cap")
for T, H in ((1, 16), (511, 8), (1024, 16), (3, 128), (2000, 1)):
    ch = P.chunks(T, H)
    check(ch[0][0] == 0 and ch[-1][1] == T and all(a[1] == b[0] for a, b in zip(ch, ch[1:])),
          f"pieces of {T} cover it")
    check(all(H * (b - a) <= 1024 for a, b in ch), f"pieces of {T} x {H} within 1024 rows")
    check(len(ch) == -(-T // max(1, 1024 // H)), f"fewest pieces {T} x {H}")

print(f"test_paging: {N[0] - len(FAILS)}/{N[0]} checks passed")
sys.exit(1 if FAILS else 0)
