#!/usr/bin/python3
"""python/test_qmla_drivers.py — every analysis driver reached from Python
(qmla.sweep, jvp, predict, intervene, learn, evaluate, allocate, capture, ppl_run over
include/qmla/job.h) writes the file the `qmla` command writes for the same
arguments: every dataset and every attribute equal, except the provenance
(command line, creation time, the capture's hash). Inputs: a small synth
capture made by `qmla synth`, models/tiny-mla and data/heldout/prose.txt.gz.
Also: a progress callback stops a run, an unknown option is refused.
Env: QMLA_SOURCE_ROOT, QMLA_LIB, QMLA_BIN (the qmla program)."""
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

root = os.environ.get("QMLA_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(root, "python"))
import qmla  # noqa: E402

QMLA = os.environ.get("QMLA_BIN", os.path.join(root, "build", "cli", "qmla"))
# the run, not the result: who ran it, when, how long (docs/results-format.md "Provenance")
PROVENANCE = {"command", "command_line", "created_utc", "capture_sha256", "elapsed_s", "threads"}
fails = 0
work = tempfile.mkdtemp(prefix="qmla-drivers-")


def cli(*args, ok=(0,)):
    r = subprocess.run([QMLA] + [str(a) for a in args], capture_output=True, text=True)
    if r.returncode not in ok:
        raise RuntimeError(f"qmla {' '.join(map(str, args))}: exit {r.returncode}\n{r.stderr}")
    return r


def contents(path):
    """{name: value} of every dataset and attribute, provenance left out."""
    out = {}
    with h5py.File(path, "r") as f:
        def attrs(name, obj):
            for k, v in obj.attrs.items():
                if k not in PROVENANCE:
                    out[f"{name}@{k}"] = np.asarray(v)
        attrs("", f)

        def visit(name, obj):
            attrs(name, obj)
            if isinstance(obj, h5py.Dataset):
                out[name] = obj[...]
        f.visititems(visit)
    return out


def same(what, a, b):
    global fails
    ca, cb = contents(a), contents(b)
    diff = [k for k in ca if k not in cb or not np.array_equal(
        ca[k], cb[k], equal_nan=ca[k].dtype.kind == "f")]
    diff += [k for k in cb if k not in ca]
    n = sum(1 for k in ca if "@" not in k)
    ok = not diff and n > 0
    print(f"{what}: {n} datasets, {len(ca) - n} attributes {'equal' if ok else 'DIFFER: ' + ', '.join(diff[:5])}")
    fails += not ok


def p(name):
    return os.path.join(work, name)


cap = p("cap.h5")
cli("synth", "-o", cap, "--shape", "tiny", "--cells", "3", "--seqs", "2", "--tokens", "32",
    "--layers", "2", "--seed", "5", "--threads", "1")

# sweep, jvp, predict, intervene
cli("sweep", cap, "-o", p("sw_cli.h5"), "--bits", "3", "--nmse", "0.02", "--cells", "synth-s0,synth-s2",
    "--threads", "2", "--verify")
r = qmla.sweep(cap, p("sw_py.h5"), bits=3, nmse=0.02, cells=["synth-s0", "synth-s2"], threads=2, verify=True)
same("sweep", p("sw_cli.h5"), p("sw_py.h5"))
fails += not r["n_layers"] == 2
cli("jvp", cap, "-o", p("jvp_cli.h5"), "--bits", "2,4", "--layers", "1", "--threads", "2")
qmla.jvp(cap, p("jvp_py.h5"), bits=[2, 4], layers=1, threads=2, engine="cpu")
same("jvp", p("jvp_cli.h5"), p("jvp_py.h5"))
cli("predict", cap, "-o", p("pr_cli.h5"), "--nmse", "0.002", "--threads", "2")
r = qmla.predict(cap, p("pr_py.h5"), nmse=0.002, threads=2)
same("predict", p("pr_cli.h5"), p("pr_py.h5"))
fails += not r["n_points"] > 0
cli("intervene", cap, "-o", p("iv_cli.h5"), "--reps", "3", "--bootstrap", "20", "--seed", "4", "--threads", "2")
qmla.intervene(cap, p("iv_py.h5"), reps=3, bootstrap=20, seed=4, threads=2)
same("intervene", p("iv_cli.h5"), p("iv_py.h5"))

# learn: the baselines and QuantMLA (with --also-content), then eval
for m in ("rtn", "smoothquant", "quarot"):
    cli("learn", cap, "-o", p(f"{m}_cli.h5"), "--method", m, "--train-cells", "synth-s0", "--alpha", "0.25")
    qmla.learn(cap, p(f"{m}_py.h5"), method=m, train_cells="synth-s0", alpha=0.25)
    same(f"learn {m}", p(f"{m}_cli.h5"), p(f"{m}_py.h5"))
args = ["--train-cells", "synth-s0", "--heldout-cells", "synth-s1", "--steps", "4", "--seed", "3",
        "--lr", "0.01", "--threads", "2"]
cli("learn", cap, "-o", p("qm_cli.h5"), "--also-content", p("qc_cli.h5"), *args)
r = qmla.learn(cap, p("qm_py.h5"), also_content=p("qc_py.h5"), train_cells="synth-s0",
               heldout_cells="synth-s1", steps=4, seed=3, lr=0.01, threads=2)
same("learn quantmla", p("qm_cli.h5"), p("qm_py.h5"))
same("learn quantmla, also-content", p("qc_cli.h5"), p("qc_py.h5"))
fails += not r["n_layers"] == 2
# learning in double through both fronts: the same file
cli("learn", cap, "-o", p("q64_cli.h5"), "--path", "content", "--attn-precision", "f64", *args)
qmla.learn(cap, p("q64_py.h5"), path="content", attn_precision="f64", train_cells="synth-s0",
           heldout_cells="synth-s1", steps=4, seed=3, lr=0.01, threads=2)
same("learn quantmla f64", p("q64_cli.h5"), p("q64_py.h5"))
tfs = [p("rtn_cli.h5"), p("smoothquant_cli.h5"), p("quarot_cli.h5"), p("qm_cli.h5"), p("qc_cli.h5")]
cli("eval", cap, *sum([["--transforms", t] for t in tfs], []), "--config", "C2R4", "--policy",
    "sink2/local4", "--cells", "synth-s2", "-o", p("ev_cli.h5"), "--threads", "2")
r = qmla.evaluate(cap, p("ev_py.h5"), tfs, "C2R4", policy="sink2/local4", cells="synth-s2", threads=2)
same("eval", p("ev_cli.h5"), p("ev_py.h5"))
fails += not (r["n_rows"] == 10 and "mean_quantmla-content" in r)

# allocate (qmla_alloc_run), then eval at the allocation
args = ["--budget", "C3R4", "--candidates", "C2R4,C3R4,C4R4,C3R8", "--context", "128", "--cells",
        "synth-s0,synth-s1", "--threads", "2"]
cli("allocate", cap, "-o", p("al_cli.h5"), *args)
r = qmla.allocate(cap, p("al_py.h5"), "C3R4", candidates="C2R4,C3R4,C4R4,C3R8", context=128,
                  cells=["synth-s0", "synth-s1"], threads=2)
same("allocate", p("al_cli.h5"), p("al_py.h5"))
fails += not (r["n_layers"] == 2 and r["bytes_per_token"] <= r["budget_bytes_per_token"])
r = qmla.evaluate(cap, p("ev_al.h5"), tfs[:1], p("al_py.h5"), cells="synth-s2", threads=2)
fails += not r["n_rows"] == 2

# capture and ppl on models/tiny-mla
model, prose = os.path.join(root, "models", "tiny-mla"), os.path.join(root, "data", "heldout", "prose.txt.gz")
cli("capture", model, "--corpus", f"prose={prose}", "--seeds", "0,1", "--seqs", "1", "--tokens", "24",
    "--layers", "0,2", "--store", "float16", "--threads", "2", "-o", p("capn_cli.h5"))
r = qmla.capture(model, p("capn_py.h5"), {"prose": prose}, seeds=[0, 1], seqs=1, tokens=24,
                 layers=[0, 2], store="float16", threads=2, model_name=model)
same("capture", p("capn_cli.h5"), p("capn_py.h5"))
cli("learn", os.path.join(root, "data", "tiny-mla-default.h5"), "-o", p("qr_tiny.h5"), "--method",
    "quarot", "--train-cells", "prose-s0")
cli("ppl", model, "--text", prose, "--config", "bf16,C4R4", "--policy", "none,sink4/local128",
    "--transforms", p("qr_tiny.h5"), "--tokens", "512", "--threads", "2", "-o", p("ppl_cli.h5"))
r = qmla.ppl_run(model, p("ppl_py.h5"), prose, config="bf16,C4R4", policy="none,sink4/local128",
                 transforms=[p("qr_tiny.h5")], tokens=512, threads=2)
same("ppl", p("ppl_cli.h5"), p("ppl_py.h5"))
fails += not r["n_rows"] == 5

# a progress callback stops the run; an unknown option is refused
try:
    qmla.learn(cap, p("stop.h5"), train_cells="synth-s0", steps=50, progress=lambda d, t: d >= 2)
    print("learn stop: not stopped FAIL")
    fails += 1
except qmla.QmlaError as e:
    print("learn stopped:", e, e.stopped)
    fails += not e.stopped
try:
    qmla.sweep(cap, p("x.h5"), bogus=1)
    print("unknown option: not refused FAIL")
    fails += 1
except qmla.QmlaError as e:
    print("unknown option refused:", e)
    fails += "bogus" not in str(e)
# the engine key (include/qmla/engine.h): a name the build lacks refused before any
# work (cuda, which a CUDA build has, is checked by tests/sweep/test_engine.c and
# tests/cli/test_cli.sh in either build)
for name, call in (("sweep", lambda: qmla.sweep(cap, p("eng.h5"), engine="nope")),
                   ("jvp", lambda: qmla.jvp(cap, p("eng.h5"), engine="nope")),
                   ("predict", lambda: qmla.predict(cap, p("eng.h5"), engine="nope")),
                   ("intervene", lambda: qmla.intervene(cap, p("eng.h5"), engine="nope")),
                   ("learn", lambda: qmla.learn(cap, p("eng.h5"), engine="nope")),
                   ("eval", lambda: qmla.evaluate(cap, p("eng.h5"), tfs, "C4R4", engine="nope"))):
    try:
        call()
        print(f"{name} engine=nope: not refused FAIL")
        fails += 1
    except qmla.QmlaError as e:
        bad = "engines: cpu" not in str(e) or os.path.exists(p("eng.h5"))
        print(f"{name} engine=nope refused:", e, "FAIL" if bad else "")
        fails += bad
# attn_precision: a bad value and f64 with a baseline refused, no file written
for kw, want in (({"attn_precision": "f16"}, "expected f32 or f64"),
                 ({"attn_precision": "f64", "method": "rtn"}, "expected --method quantmla")):
    try:
        qmla.learn(cap, p("prec.h5"), train_cells="synth-s0", **kw)
        print(f"learn {kw}: not refused FAIL")
        fails += 1
    except qmla.QmlaError as e:
        bad = want not in str(e) or os.path.exists(p("prec.h5"))
        print(f"learn {kw} refused:", e, "FAIL" if bad else "")
        fails += bad
print("FAIL" if fails else "OK", fails)
sys.exit(1 if fails else 0)
