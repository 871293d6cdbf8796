#!/usr/bin/python3
"""tests/engine/test_ppl_kl.py — the KL columns of `qmla ppl` (issue 22 item 3)
against NumPy on models/tiny-mla.

For the first windows of data/heldout/prose.txt.gz (3 windows of 512) and
code.txt.gz (2 windows), the logits of every configuration are taken from
the library (qmla.Model.logits, qmla_model_forward: the rows ppl scores for
a window are those of [BOS] + window[:-1]; the test first checks that their
NLL gives the file's bits/byte). NumPy then computes, in float64,
log-softmax, per-token KL(P_ref || P_q) = sum p_ref (log p_ref - log p_q),
its mean over targets, the 95 % t interval over the windows' means (the
t quantile in closed form: df 1 tan(0.475 pi), df 2 a sqrt(2 / (1 - a^2))
with a = 0.95), the 99th percentile of the per-token KL rounded to float32
(np.percentile, linear) and the top-1 agreement (np.argmax); each is
compared with /ppl_table, /ppl/row_NNN and the printed table.

Properties: the reference's own row has KL exactly 0, p99 0, interval
[0, 0] and agreement 1 (fp32 by default, bf16 with --kl-ref bf16); a
reference not in --config (scored without a row) gives the same values bit
for bit as when it is one; Model.ppl returns the same values; a run with no
quantized config has no KL columns and --kl-ref none removes them, the other
datasets unchanged; qmla show and qmla export list the columns; a bad
--kl-ref is refused (exit 2).
Env (meson): QMLA_SOURCE_ROOT, QMLA_BIN, QMLA_LIB."""
import gzip
import json
import math
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

root = os.environ.get("QMLA_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(root, "python"))
import qmla  # noqa: E402

QMLA = os.environ.get("QMLA_BIN", os.path.join(root, "build", "cli", "qmla"))
M = os.path.join(root, "models", "tiny-mla")
H = os.path.join(root, "data", "heldout")
T = 512
fails = 0
checks = 0


def check(cond, what):
    global fails, checks
    checks += 1
    if not cond:
        fails += 1
        print("FAIL:", what)


def ppl(out, *args):
    r = subprocess.run([QMLA, "ppl", M, "-o", out, "--threads", "2", *args],
                       capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def t975(df):
    if df == 1:
        return math.tan(0.475 * math.pi)
    if df == 2:
        a = 0.95
        return a * math.sqrt(2.0 / (1.0 - a * a))
    raise ValueError(df)


def log_softmax(lg):
    x = lg.astype(np.float64)
    mx = x.max(axis=1, keepdims=True)
    return x - (np.log(np.exp(x - mx).sum(axis=1, keepdims=True)) + mx)


model = qmla.Model(M)
BOS = json.load(open(os.path.join(M, "config.json")))["bos_token_id"]
work = tempfile.mkdtemp(prefix="qmla-test-kl-")
texts = {"prose": (os.path.join(H, "prose.txt.gz"), 3), "code": (os.path.join(H, "code.txt.gz"), 2)}
CONFIGS = [("fp32", "none"), ("bf16", "none"), ("C4R4", "none"), ("C2R4", "none"),
           ("C4R4", "sink4/local128"), ("C2R4", "sink4/local128")]
tables = {}
n_trunc = [0]  # rows whose t interval reaches below 0 (truncated at 0 by qmla)
for name, (path, nw) in texts.items():
    out = os.path.join(work, name + ".h5")
    rc, log = ppl(out, "--text", path, "--config", "fp32,bf16,C4R4,C2R4",
                  "--policy", "none,sink4/local128", "--tokens", str(nw * T))
    check(rc == 0, f"{name}: qmla ppl exit {rc}: {log[-400:]}")
    check("KL/fp32" in log and "top1" in log, f"{name}: the printed table has the KL columns")
    data = gzip.decompress(open(path, "rb").read())
    with h5py.File(out, "r") as f:
        t = {k: f["ppl_table"][k][...] for k in f["ppl_table"]}
        rows = [dict(f["ppl"][g].attrs) for g in sorted(f["ppl"]) if g.startswith("row_")]
    tables[name] = t
    cfg = [c.decode() if isinstance(c, bytes) else str(c) for c in t["config"]]
    pol = [c.decode() if isinstance(c, bytes) else str(c) for c in t["policy"]]
    keys = list(zip(cfg, pol))
    check(keys == CONFIGS, f"{name}: rows {keys}")
    # the logits of every window and configuration, from the library
    lp = {c: [] for c in CONFIGS}
    nll = {c: 0.0 for c in CONFIGS}
    for k in range(nw):
        win = np.frombuffer(data[k * T:(k + 1) * T], dtype=np.uint8).astype(np.int32)
        tok = np.concatenate([[BOS], win[:-1]]).astype(np.int32)
        for c in CONFIGS:
            ls = log_softmax(model.logits(tok, c[0], c[1]))
            lp[c].append(ls)
            nll[c] += -ls[np.arange(T), win].sum()
    ref = lp[("fp32", "none")]
    for i, c in enumerate(CONFIGS):
        bpb = nll[c] / (nw * T) / math.log(2)
        check(abs(bpb - t["bits_per_byte"][i]) <= 1e-12 * abs(bpb),
              f"{name} {c}: logits' bits/byte {bpb!r} vs file {t['bits_per_byte'][i]!r}")
        kl = np.concatenate([(np.exp(r) * (r - q)).sum(axis=1) for r, q in zip(ref, lp[c])])
        top1 = np.mean(np.concatenate([r.argmax(1) == q.argmax(1) for r, q in zip(ref, lp[c])]))
        wm = kl.reshape(nw, T).mean(axis=1)
        mean = kl.mean()
        h = t975(nw - 1) * wm.std(ddof=1) / math.sqrt(nw)
        p99 = np.percentile(kl.astype(np.float32).astype(np.float64), 99)
        got = {k: float(t[k][i]) for k in ("kl_mean_nats", "kl_ci95_lo", "kl_ci95_hi",
                                           "kl_p99_nats", "top1_agreement")}
        check(got["kl_ci95_lo"] >= 0, f"{name} {c}: interval truncated at 0 ({got['kl_ci95_lo']!r})")
        n_trunc[0] += mean - h < 0
        want = {"kl_mean_nats": mean, "kl_ci95_lo": max(0.0, mean - h), "kl_ci95_hi": mean + h,
                "kl_p99_nats": p99, "top1_agreement": top1}
        for k in want:
            tol = 1e-7 * abs(want[k]) + 1e-13 if k != "top1_agreement" else 0
            check(abs(got[k] - want[k]) <= tol, f"{name} {c} {k}: qmla {got[k]!r} NumPy {want[k]!r}")
            check(rows[i][k] == t[k][i], f"{name} {c} {k}: /ppl/row_{i:03d} differs from the table")
        check(str(rows[i]["kl_ref"]) == "fp32", f"{name} {c}: kl_ref attribute")
        print(f"{name:5s} {c[0]:4s} {c[1]:14s} KL {got['kl_mean_nats']:.6e} (NumPy {mean:.6e}) "
              f"CI [{got['kl_ci95_lo']:.3e}, {got['kl_ci95_hi']:.3e}] p99 {got['kl_p99_nats']:.4e} "
              f"top1 {got['top1_agreement']:.4f} (NumPy {top1:.4f})")
        if c != ("fp32", "none"):
            check(mean > 0, f"{name} {c}: the KL of a quantized/bf16 row is positive")
    # the reference's own row, exactly
    i = CONFIGS.index(("fp32", "none"))
    check(all(t[k][i] == 0.0 for k in ("kl_mean_nats", "kl_ci95_lo", "kl_ci95_hi", "kl_p99_nats"))
          and t["top1_agreement"][i] == 1.0, f"{name}: fp32 row against itself not exactly 0 / 1")

check(n_trunc[0] >= 1, "no row exercised the interval's truncation at 0")
print(f"{n_trunc[0]} rows with the t interval's low end below 0 (truncated at 0)")

# --kl-ref bf16: its row exactly 0 and 1; a reference not in --config (no row) bit for bit the same
p = texts["prose"][0]
out = os.path.join(work, "bf.h5")
rc, log = ppl(out, "--text", p, "--config", "bf16,C4R4", "--kl-ref", "bf16", "--tokens", str(3 * T))
check(rc == 0 and "KL/bf16" in log, f"--kl-ref bf16: exit {rc}")
with h5py.File(out, "r") as f:
    b = {k: f["ppl_table"][k][...] for k in f["ppl_table"]}
check(b["kl_mean_nats"][0] == 0 and b["kl_p99_nats"][0] == 0 and b["top1_agreement"][0] == 1,
      "--kl-ref bf16: the bf16 row against itself not exactly 0 / 1")
check(all(x == b"bf16" or x == "bf16" for x in b["kl_ref"]), "--kl-ref bf16: kl_ref column")
out = os.path.join(work, "hidden.h5")
rc, log = ppl(out, "--text", p, "--config", "C4R4,C2R4", "--tokens", str(3 * T))
check(rc == 0, f"reference without a row: exit {rc}")
with h5py.File(out, "r") as f:
    hdn = {k: f["ppl_table"][k][...] for k in f["ppl_table"]}
    check(f["ppl"].attrs["rows"] == 2, "the fp32 reference got a row it was not asked for")
a = tables["prose"]
for k in ("bits_per_byte", "kl_mean_nats", "kl_ci95_lo", "kl_ci95_hi", "kl_p99_nats",
          "top1_agreement"):
    check(np.array_equal(hdn[k], a[k][[2, 3]]), f"reference without a row: {k} differs")
# Model.ppl (qmla_model_ppl_kl, reference scored apart, one thread): the same values
text = gzip.decompress(open(p, "rb").read())
r = model.ppl(text, "C4R4", windows=3)
check(r.get("kl_ref") == "fp32" and r["kl_mean_nats"] == a["kl_mean_nats"][2]
      and r["kl_p99_nats"] == a["kl_p99_nats"][2] and r["top1_agreement"] == a["top1_agreement"][2]
      and r["kl_ci95_lo"] == a["kl_ci95_lo"][2], f"Model.ppl KL {r}")
check("kl_mean_nats" not in model.ppl(text, "bf16", windows=1), "Model.ppl bf16: KL by default")
r1 = model.ppl(text, "C4R4", windows=1, kl_ref="bf16")
check(math.isnan(r1["kl_ci95_lo"]) and r1["kl_mean_nats"] > 0, f"one window: interval NaN {r1}")
# no quantized config, or --kl-ref none: no KL columns, the rest as before
for args, name in ((["--config", "fp32,bf16"], "plain"), (["--config", "fp32,bf16,C4R4", "--kl-ref", "none"], "none")):
    out = os.path.join(work, name + ".h5")
    rc, log = ppl(out, "--text", p, "--tokens", str(3 * T), *args)
    check(rc == 0 and "KL/" not in log, f"{name}: exit {rc} or KL printed")
    with h5py.File(out, "r") as f:
        cols = set(f["ppl_table"])
        check(not any(c.startswith("kl_") or c == "top1_agreement" for c in cols), f"{name}: {cols}")
        n = len(f["ppl_table/config"])
        check(np.array_equal(f["ppl_table/bits_per_byte"][...], a["bits_per_byte"][:n]),
              f"{name}: bits/byte changed")
rc, log = ppl(os.path.join(work, "x.h5"), "--text", p, "--config", "C4R4", "--kl-ref", "C4R4")
check(rc == 2 and "--kl-ref: expected fp32, bf16 or none" in log, f"bad --kl-ref: exit {rc}: {log}")
# qmla show and qmla export read the columns
s = subprocess.run([QMLA, "show", os.path.join(work, "prose.h5")], capture_output=True, text=True)
check(s.returncode == 0 and "kl_mean_nats" in s.stdout and "top1_agreement" in s.stdout,
      f"qmla show: {s.stdout[-300:]}{s.stderr}")
s = subprocess.run([QMLA, "export", os.path.join(work, "prose.h5"), "--table", "ppl_table",
                    "--format", "csv"], capture_output=True, text=True)
hdr = [ln for ln in s.stdout.splitlines() if ln and not ln.startswith("#")][0].split(",")
check(s.returncode == 0 and {"kl_ref", "kl_mean_nats", "kl_ci95_lo", "kl_ci95_hi", "kl_p99_nats",
                             "top1_agreement"} <= set(hdr), f"qmla export: {hdr}")
print(f"test_ppl_kl: {checks - fails} passed, {fails} failed")
subprocess.run(["rm", "-rf", work])
sys.exit(1 if fails else 0)
