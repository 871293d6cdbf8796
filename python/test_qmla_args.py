#!/usr/bin/python3
"""python/test_qmla_args.py — the binding refuses what it used to crash on or
silently change (issue 25 items 8 and 9):

1. closed objects: every method of a closed Model (it passed NULL to the
   library: a segfault), a closed Transforms (its layers read as []) and a
   closed Capture raise QmlaError naming the object and "closed";
2. thread counts beyond the qmla command's bound 1..1024 (cli/cli_util.c):
   Model.ppl(threads=10**6) and Transforms(threads=10**6) (a segfault in the
   library's OpenMP set-up) raise ValueError;
3. arguments that ctypes or int() changed: bits=2**32+4 (acted as 4), bits=4.9
   (as 4), bits=True, tf.apply(1.7, ...) (layer 1), sink=-5 (every token
   unquantized), local=-3, a layer 1.7 of a Capture, context/windows that are
   floats or negative, T and width of qdq_cuda, a bool for a driver option
   that is not a flag (threads=True ran with 1 thread) and NaN / inf for a
   driver's number: ValueError naming the argument, the expected range and the
   value found.
The cases that crashed run in a child process each, so that a crash is
reported as a failure instead of ending the test.
Env: QMLA_SOURCE_ROOT (repository), QMLA_LIB (build/python/libqmla.so)."""
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np

root = os.environ.get("QMLA_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(root, "python"))
import qmla  # noqa: E402

MODEL = os.path.join(root, "models", "tiny-mla")
CAPTURE = os.path.join(root, "data", "tiny-mla-default.h5")
fails = 0


def check(name, ok, detail=""):
    global fails
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
    fails += not ok


def raises(name, exc, fn, *must):
    """fn() must raise exc whose message holds every string in must."""
    try:
        r = fn()
    except exc as e:
        m = str(e)
        check(name, all(s in m for s in must), f"{type(e).__name__}: {m}")
        return
    except Exception as e:  # noqa: BLE001
        check(name, False, f"{type(e).__name__} instead of {exc.__name__}: {e}")
        return
    check(name, False, f"not refused (returned {str(r)[:80]!r})")


def in_child(name, code, *must):
    """Run code (which ends by raising) in a child process: it must exit
    with a Python traceback whose last line holds every string in must
    (a segfault is a failure here, not the end of this test)."""
    pre = f"import sys; sys.path.insert(0, {os.path.join(root, 'python')!r}); import qmla\n"
    p = subprocess.run([sys.executable, "-c", pre + code], capture_output=True, text=True,
                       timeout=120)
    last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    ok = p.returncode == 1 and all(s in last for s in must)
    why = f"exit {p.returncode}" + (" (signal %d)" % -p.returncode if p.returncode < 0 else "")
    check(name, ok, f"{why}: {last}")


def write_transforms(path, layers, d_c=8, d_r=4):
    """A minimal valid qmla-transforms v1 file (docs/transforms-format.md)."""
    rng = np.random.default_rng(5)
    with h5py.File(path, "w") as f:
        for k, v in (("format", "qmla-transforms"), ("method", "quantmla"), ("config", "C4R4"),
                     ("train_cells", "a"), ("capture", "x.h5"), ("command", "t"),
                     ("settings", "s")):
            f.attrs[k] = v
        f.attrs["version"] = np.int32(1)
        f.attrs["complete"] = np.int32(1)
        f.attrs["smoothquant_alpha"] = np.float64(np.nan)
        for layer in layers:
            g = f.create_group(f"layers/{layer}")
            g["content/rotation"] = np.linalg.qr(rng.standard_normal((d_c, d_c)))[0]
            g["content/scale"] = np.ones(d_c)
            g["content/gamma"] = np.ones(d_c, np.float32)
            g["rope/angle"] = np.zeros(d_r // 2)
            g["rope/scale"] = np.ones(d_r // 2)
            g["rope"].attrs["rope_pairing"] = "interleaved"


tmp = tempfile.mkdtemp(prefix="qmla-pyargs-")
tfp = os.path.join(tmp, "t.h5")
write_transforms(tfp, [0, 1])

# 1-2. crashes before: closed Model, huge thread counts
open_model = f"m = qmla.Model({MODEL!r})\n"
in_child("closed Model: n_params", open_model + "m.close()\nm.n_params",
         "QmlaError", "Model is closed", "tiny-mla")
in_child("closed Model: ppl", open_model + "m.close()\nm.ppl(b'hello world ' * 40, windows=1, context=64)",
         "QmlaError", "Model is closed")
in_child("Model.ppl threads=10**6", open_model + "m.ppl(b'hello world ' * 40, windows=1, context=64, threads=10**6)",
         "ValueError", "threads", "1..1024", "1000000")
in_child("Transforms threads=10**6",
         f"import numpy as np\ntf = qmla.Transforms({tfp!r}, threads=10**6)\n"
         "tf.apply(0, np.ones((4, 8), np.float32))",
         "ValueError", "threads", "1..1024", "1000000")
in_child("Transforms threads=0", f"qmla.Transforms({tfp!r}, threads=0)",
         "ValueError", "threads", "1..1024", "found 0")

# 3. silent changes
x = np.random.default_rng(1).standard_normal((6, 64)).astype(np.float32)
for bits, found in ((2 ** 32 + 4, str(2 ** 32 + 4)), (4.9, "4.9"), (True, "True"), (4.0, "4.0"),
                    (np.float32(4), "4.0"), (0, "found 0")):
    raises(f"qdq bits={bits!r}", ValueError, lambda: qmla.qdq(x, bits=bits), "bits", found)
for group, found in ((64.5, "64.5"), (-1, "-1"), (2 ** 32 + 64, str(2 ** 32 + 64))):
    raises(f"qdq group={group!r}", ValueError, lambda: qmla.qdq(x, group=group), "group", "1..",
           found)
raises("qdq bits=5 (an integer the quantizer lacks)", qmla.QmlaError, lambda: qmla.qdq(x, bits=5),
       "bits", "found 5")
check("qdq bits=np.int64(4) accepted", np.array_equal(qmla.qdq(x, bits=np.int64(4)), qmla.qdq(x)))

tf = qmla.Transforms(tfp)
c = np.random.default_rng(2).standard_normal((10, 8)).astype(np.float32)
raises("tf.apply(1.7, ...)", ValueError, lambda: tf.apply(1.7, c), "layer", "1.7")
raises("tf.apply(True, ...)", ValueError, lambda: tf.apply(True, c), "layer", "True")
raises("tf.layer(0.0)", ValueError, lambda: tf.layer(0.0), "layer", "0.0")
raises("tf.content_matrices(1.5)", ValueError, lambda: tf.content_matrices(1.5), "layer", "1.5")
raises("tf.effective sink=-5", ValueError, lambda: tf.effective(0, c, sink=-5), "sink", "0..", "-5")
raises("tf.effective local=-3", ValueError, lambda: tf.effective(0, c, local=-3), "local", "0..",
       "-3")
raises("tf.effective sink=2.5", ValueError, lambda: tf.effective(0, c, sink=2.5), "sink", "2.5")
raises("tf.effective bits=2**32+4", ValueError, lambda: tf.effective(0, c, bits=2 ** 32 + 4, group=8),
       "bits", str(2 ** 32 + 4))
raises("tf.effective quantize=2", ValueError, lambda: tf.effective(0, c, quantize=2), "quantize")
e0 = tf.effective(0, c, group=8, sink=2, local=3)
check("tf.effective sink=2 local=3 keeps those tokens",
      np.allclose(e0[:2], c[:2], atol=1e-5) and np.allclose(e0[-3:], c[-3:], atol=1e-5))
check("tf.apply(0, ...) works", tf.apply(0, c).shape == c.shape)
tf.close()
raises("closed Transforms: layers", qmla.QmlaError, lambda: tf.layers, "Transforms", "closed")
raises("closed Transforms: meta", qmla.QmlaError, lambda: tf.meta, "Transforms", "closed")
raises("closed Transforms: apply", qmla.QmlaError, lambda: tf.apply(0, c), "Transforms", "closed")

cap = qmla.Capture(CAPTURE)
l0 = cap.layers[0]
raises("Capture.cells(1.7)", ValueError, lambda: cap.cells(l0 + 0.7), "layer", str(l0 + 0.7))
raises("Capture.weights(True)", ValueError, lambda: cap.weights(True), "layer", "True")
cap.close()
raises("closed Capture: layers", qmla.QmlaError, lambda: cap.layers, "Capture", "closed")

m = qmla.Model(MODEL)
text = b"the quick brown fox " * 40
raises("Model.ppl context=64.5", ValueError, lambda: m.ppl(text, context=64.5), "context", "64.5")
raises("Model.ppl windows=-1", ValueError, lambda: m.ppl(text, windows=-1), "windows", "0..", "-1")
raises("Model.ppl threads=True", ValueError, lambda: m.ppl(text, threads=True), "threads", "True")
raises("Model.ppl threads=2.0", ValueError, lambda: m.ppl(text, threads=2.0), "threads", "2.0")
check("Model.ppl threads=np.int32(2) accepted",
      m.ppl(text, windows=1, context=64, threads=np.int32(2))["windows"] == 1)
m.close()
m.close()  # twice is fine

raises("qdq_cuda T=4.5", ValueError, lambda: qmla.qdq_cuda(1, 4.5, 64), "T", "4.5")
raises("qdq_cuda width=-64", ValueError, lambda: qmla.qdq_cuda(1, 4, -64), "width", "-64")
raises("qdq_cuda bits=4.9", ValueError, lambda: qmla.qdq_cuda(1, 4, 64, bits=4.9), "bits", "4.9")

out = os.path.join(tmp, "sw.h5")
raises("sweep threads=True (not a flag)", ValueError,
       lambda: qmla.sweep(CAPTURE, out, threads=True, bits=99), "threads", "True")
raises("learn lr=nan", ValueError, lambda: qmla.learn(CAPTURE, out, lr=float("nan")), "lr", "nan")
raises("learn lr=inf", ValueError, lambda: qmla.learn(CAPTURE, out, lr=float("inf")), "lr", "inf")
raises("sweep force=2", qmla.QmlaError, lambda: qmla.sweep(CAPTURE, out, force=2), "force",
       "expected 0 or 1")

print(f"test_qmla_args: {'FAILED ' + str(fails) if fails else 'all passed'}")
sys.exit(1 if fails else 0)
