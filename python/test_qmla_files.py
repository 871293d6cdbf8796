#!/usr/bin/python3
"""python/test_qmla_files.py — the binding's file readers and cache transforms
against independent NumPy / h5py computations (issue 11 item 7):

1. qmla.Transforms on transforms files written here with h5py in the layout of
   docs/transforms-format.md (random orthogonal R, scales, angles; both RoPE
   pairings): the metadata and every dataset read back equal what h5py
   wrote; apply (fwd, inv, invT) equals X @ T, X @ inv(T), X @ inv(T).T with
   T_C = diag(γ)^-1 R diag(s) and the dense block-diagonal T_P built here in
   float64; effective equals the NumPy quantizer of bench/numpy_sweep.py
   applied between the two dense maps; content_matrices equals T_C; a file
   with a non-orthogonal rotation, a missing file and an absent layer are
   refused naming the file (and the dataset).
2. qmla.Capture on data/tiny-mla-default.h5 against h5py reads of the same
   datasets (float16 on disk: converted exactly); a copy with a k_rope of the
   wrong width and one without q_nope are refused naming the file and dataset.
0. The ctypes mirrors of the C structs equal the library's own layout table
   (python/abi.c, compiled from the headers): every mirrored struct agrees
   field for field; a mirror with a field added, a field resized or fields
   reordered is reported naming the struct.
3. qmla.qdq_cuda: refused with a QmlaError when libqmla.so lacks the CUDA
   launcher or no device is usable; where a GPU and torch exist, qdq_torch on
   the GPU equals the CPU qdq bit for bit.
Env: QMLA_SOURCE_ROOT (repository), QMLA_LIB (build/python/libqmla.so)."""
import os
import shutil
import sys
import tempfile

import h5py
import numpy as np

root = os.environ.get("QMLA_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(root, "python"))
sys.path.insert(0, os.path.join(root, "bench"))
import qmla  # noqa: E402
from numpy_sweep import qdq as np_qdq  # noqa: E402

fails = 0


def check(name, ok, detail=""):
    global fails
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
    fails += not ok


def refused(name, fn, *must):
    """fn() must raise QmlaError whose message holds every string in must."""
    try:
        fn()
    except qmla.QmlaError as e:
        m = str(e)
        check(name, all(s in m for s in must), f"{m!r}")
        return
    check(name, False, "not refused")


def rel(a, b):
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / max(np.linalg.norm(b), 1e-300))


# ---------------------------------------------------------------- transforms
def pairs(d_r, pairing):
    h = d_r // 2
    return [(2 * i, 2 * i + 1) if pairing == "interleaved" else (i, i + h) for i in range(h)]


def dense_rope(angle, scale, d_r, pairing):
    """T_P [d_r, d_r]: (x T)_a = s (x_a cos θ + x_b sin θ), (x T)_b = s (−x_a sin θ + x_b cos θ)."""
    T = np.zeros((d_r, d_r))
    for (a, b), th, s in zip(pairs(d_r, pairing), angle, scale):
        T[a, a], T[a, b] = s * np.cos(th), -s * np.sin(th)
        T[b, a], T[b, b] = s * np.sin(th), s * np.cos(th)
    return T


def write_transforms(path, layers, rng, d_c, d_r, pairing, bad_rotation=False):
    """A qmla-transforms v1 file (docs/transforms-format.md) with random
    transforms; returns {layer: dict of what was written}."""
    ref = {}
    with h5py.File(path, "w") as f:
        for k, v in (("format", "qmla-transforms"), ("method", "quantmla"), ("config", "C4R4"),
                     ("train_cells", "prose-s0,code-s0"), ("capture", "synthetic.h5"),
                     ("command", "test_qmla_files.py"), ("settings", "method=quantmla seed=3")):
            f.attrs[k] = v
        f.attrs["version"] = np.int32(1)
        f.attrs["complete"] = np.int32(1)
        f.attrs["smoothquant_alpha"] = np.float64(np.nan)
        for layer in layers:
            R, _ = np.linalg.qr(rng.standard_normal((d_c, d_c)))
            if bad_rotation:
                R[0, 0] += 1e-3
            d = {"rotation": R, "content_scale": np.exp(rng.uniform(-1, 1, d_c)),
                 "gamma": rng.uniform(0.5, 1.5, d_c).astype(np.float32) * rng.choice([-1, 1], d_c).astype(np.float32),
                 "angle": rng.uniform(-np.pi, np.pi, d_r // 2),
                 "rope_scale": np.exp(rng.uniform(-1, 1, d_r // 2)),
                 "objective_content_best": float(rng.uniform())}
            g = f.create_group(f"layers/{layer}")
            g["content/rotation"] = d["rotation"]
            g["content/scale"] = d["content_scale"]
            g["content/gamma"] = d["gamma"]
            g["rope/angle"] = d["angle"]
            g["rope/scale"] = d["rope_scale"]
            g["rope"].attrs["rope_pairing"] = pairing
            g.attrs["objective_content_best"] = d["objective_content_best"]
            ref[layer] = d
    return ref


tmp = tempfile.mkdtemp(prefix="qmla-pytest-")
# ------------------------------------------------------------------ ABI
lib = qmla._L()  # raises when any mirror differs from the headers
check("every ctypes mirror equals the library's layout", qmla._abi_problems(lib, qmla._abi_classes()) == [])
import ctypes as C  # noqa: E402


class ExecPlus(C.Structure):
    _fields_ = [("threads", C.c_int), ("extra", C.c_int)]


class ErrSwapped(C.Structure):
    _fields_ = [("msg", C.c_char * 1024), ("status", C.c_int)]


class SpecShort(C.Structure):
    _fields_ = [(n, t) for n, t in qmla._Spec._fields_[:-1]] + [("policy", C.c_char * 16)]


for nm, bad, what in (("qmla_exec", ExecPlus, "a field added"),
                      ("qmla_error", ErrSwapped, "fields reordered"),
                      ("qmla_cache_spec", SpecShort, "a field resized")):
    p = qmla._abi_problems(lib, {nm: bad})
    check(f"ABI check reports {what} ({nm})", len(p) >= 1 and all(nm in x for x in p), str(p))
mirrors = {v for v in vars(qmla).values() if isinstance(v, type) and issubclass(v, C.Structure)}
check("every ctypes Structure of python/qmla is in the ABI check",
      mirrors == set(qmla._abi_classes().values()),
      str(sorted(c.__name__ for c in mirrors - set(qmla._abi_classes().values()))))
check("ABI check reports a struct the library does not describe",
      qmla._abi_problems(lib, {"qmla_nonesuch": ExecPlus}) == ["qmla_nonesuch: the library has no layout for it"])

try:
    rng = np.random.default_rng(11)
    for pairing, d_c, d_r in (("interleaved", 128, 32), ("half", 192, 64)):
        path = os.path.join(tmp, f"t-{pairing}.h5")
        ref = write_transforms(path, (1, 4), rng, d_c, d_r, pairing)
        tf = qmla.Transforms(path)
        m = tf.meta
        check(f"{pairing}: meta", tf.layers == [1, 4] and m["method"] == "quantmla" and
              m["config"] == "C4R4" and m["settings"] == "method=quantmla seed=3" and m["complete"]
              and np.isnan(m["alpha"]),
              str(m))
        for layer, d in ref.items():
            L = tf.layer(layer)
            same = all(np.array_equal(L[k], d[k]) for k in
                       ("rotation", "content_scale", "gamma", "angle", "rope_scale"))
            check(f"{pairing} layer {layer}: datasets read back", same and L["pairing"] == pairing
                  and L["objective_content_best"] == d["objective_content_best"]
                  and np.isnan(L["objective_rope_init"]))
            Tc = (d["rotation"] / d["gamma"].astype(np.float64)[:, None]) * d["content_scale"][None, :]
            Tp = dense_rope(d["angle"], d["rope_scale"], d_r, pairing)
            X = (rng.standard_normal((200, d_c)) * rng.uniform(0.1, 3, d_c)).astype(np.float32)
            K = rng.standard_normal((200, d_r)).astype(np.float32)
            X64, K64 = X.astype(np.float64), K.astype(np.float64)
            for path_, x, x64, T in (("content", X, X64, Tc), ("rope", K, K64, Tp)):
                Ti = np.linalg.inv(T)
                for mp, M in (("fwd", T), ("inv", Ti), ("invT", Ti.T)):
                    y = tf.apply(layer, x, path_, mp)
                    e = rel(y, x64 @ M)
                    check(f"{pairing} layer {layer} {path_} {mp}: apply vs NumPy", e < 2e-6,
                          f"rel err {e:.2e}")
                # batch shape kept: [2, 100, w]
                y3 = tf.apply(layer, x.reshape(2, 100, -1), path_, "fwd")
                check(f"{pairing} layer {layer} {path_}: [..., w] shape kept",
                      y3.shape == (2, 100, x.shape[1]) and
                      np.array_equal(y3.reshape(200, -1), tf.apply(layer, x, path_, "fwd")))
                # effective cache: QDQ(X T) T^-1 with the library's X T (the
                # quantizer is discontinuous: NumPy's own X T would move codes
                # whose value sits on a rounding boundary) against NumPy's
                # quantizer and NumPy's inverse map
                xt = tf.apply(layer, x, path_, "fwd")
                check(f"{pairing} layer {layer} {path_}: X T vs NumPy", rel(xt, x64 @ T) < 2e-6)
                for bits, meta in ((4, "f16"), (2, "q8")):
                    eff = tf.effective(layer, x, path_, bits=bits, group=32, meta=meta)
                    want = np_qdq(xt, bits, 32, meta).astype(np.float64) @ Ti
                    e = rel(eff, want)
                    noise = rel(x64 @ T @ Ti, x64) + 1e-6
                    check(f"{pairing} layer {layer} {path_} C{bits} {meta}: effective vs NumPy",
                          e < 2e-6, f"rel err {e:.2e}")
                    # it quantizes: away from X by a quantizer-sized amount
                    d_q = rel(eff, x64)
                    check(f"{pairing} layer {layer} {path_} C{bits}: effective moves X",
                          1e-3 < d_q < 3.0, f"rel {d_q:.3g} (round trip {noise:.1e})")
                eff0 = tf.effective(layer, x, path_, quantize=False)
                check(f"{pairing} layer {layer} {path_}: X T T^-1 round trip",
                      rel(eff0, x64) < 2e-6)
                # the sink/local policy keeps the first / last tokens' values
                effp = tf.effective(layer, x, path_, bits=2, group=32, sink=3, local=5)
                check(f"{pairing} layer {layer} {path_}: sink 3 / local 5 kept",
                      np.array_equal(effp[:3], x[:3]) and np.array_equal(effp[-5:], x[-5:])
                      and not np.array_equal(effp[3:-5], x[3:-5]))
            A, B = tf.content_matrices(layer)
            check(f"{pairing} layer {layer}: content_matrices", rel(A, Tc) < 1e-12 and
                  rel(B, np.linalg.inv(Tc).T) < 1e-9)
        refused(f"{pairing}: absent layer", lambda: tf.layer(2), path, "layer 2")
        try:
            tf.apply(1, np.zeros((3, d_c + 1), np.float32))
            check(f"{pairing}: wrong width refused", False)
        except ValueError as e:
            check(f"{pairing}: wrong width refused", str(d_c) in str(e), str(e))
        tf.close()
    bad = os.path.join(tmp, "bad-rotation.h5")
    write_transforms(bad, (0,), rng, 64, 16, "half", bad_rotation=True)
    refused("non-orthogonal rotation", lambda: qmla.Transforms(bad), bad, "rotation")
    refused("missing transforms file", lambda: qmla.Transforms(os.path.join(tmp, "none.h5")),
            os.path.join(tmp, "none.h5"))

    # ---------------------------------------------------------------- capture
    cap_path = os.path.join(root, "data", "tiny-mla-default.h5")
    # h5py's reference first (HDF5 refuses a second open of a file the
    # library holds with another close degree)
    with h5py.File(cap_path, "r") as f:
        a = dict(f["config"].attrs)
        a["model"] = f.attrs["model"]
        H5 = {int(ln): {"w": {k: f[f"layers/{ln}/{k}"][...] for k in
                              ("w_uk", "w_uv", "w_o", "kv_norm_weight")},
                        "cells": {cn: ({k: cg[k][...] for k in cg}, dict(cg.attrs))
                                  for cn, cg in f[f"layers/{ln}/cells"].items()}}
              for ln in f["layers"]}
    cap = qmla.Capture(cap_path)
    c = cap.config
    check("capture config", c["H"] == a["n_heads"] and c["d_c"] == a["kv_lora_rank"] and
          c["d_r"] == a["qk_rope_head_dim"] and c["D"] == a["d_model"] and
          c["softmax_scale"] == a["softmax_scale"] and
          c["rope_pairing"] == a["rope_pairing"] and c["model"] == a["model"])
    check("capture layers", cap.layers == sorted(H5), str(cap.layers))
    for layer in cap.layers:
        g = H5[layer]
        check(f"layer {layer} cells", cap.cells(layer) == sorted(g["cells"]))
        w = cap.weights(layer)
        check(f"layer {layer} weights equal h5py", all(
            np.array_equal(w[k], g["w"][h].astype(np.float32)) for k, h in
            (("w_uk", "w_uk"), ("w_uv", "w_uv"), ("w_o", "w_o"), ("kv_norm", "kv_norm_weight"))))
        for cell in cap.cells(layer):
            cg, at = g["cells"][cell]
            d = cap.cell(layer, cell)
            same = all(np.array_equal(d[k], cg[k].astype(np.float32)) for k in
                       ("c_kv", "k_rope", "q_nope", "q_rope", "attn_out"))
            same &= np.array_equal(d["positions"], cg["positions"])
            same &= d["dataset"] == at["dataset"] and d["seed"] == at["seed"]
            same &= np.array_equal(cap.latent(layer, cell), d["c_kv"])
            same &= np.array_equal(cap.rope_key(layer, cell), d["k_rope"])
            qn, qr = cap.queries(layer, cell)
            same &= np.array_equal(qn, d["q_nope"]) and np.array_equal(qr, d["q_rope"])
            same &= cap.shape(layer, cell) == cg["c_kv"].shape[:2]
            check(f"layer {layer} {cell}: tensors equal h5py", bool(same))
    refused("absent cell", lambda: cap.cell(0, "nope-s9"), cap_path, "nope-s9")
    refused("absent layer", lambda: cap.weights(17), cap_path, "17")
    cap.close()
    missing = os.path.join(tmp, "missing.h5")
    refused("missing capture", lambda: qmla.Capture(missing), missing)
    wrong = os.path.join(tmp, "wrong-shape.h5")
    shutil.copy(cap_path, wrong)
    with h5py.File(wrong, "r+") as f:
        g = f["layers/2/cells/code-s0"]
        x = g["k_rope"][...]
        del g["k_rope"]
        g["k_rope"] = x[..., :48]
    refused("k_rope of the wrong width", lambda: qmla.Capture(wrong), wrong, "k_rope", "48")
    gone = os.path.join(tmp, "no-q_nope.h5")
    shutil.copy(cap_path, gone)
    with h5py.File(gone, "r+") as f:
        del f["layers/1/cells/prose-s0/q_nope"]
    refused("missing q_nope", lambda: qmla.Capture(gone), gone, "q_nope")
    nonfin = os.path.join(tmp, "nan.h5")
    shutil.copy(cap_path, nonfin)
    with h5py.File(nonfin, "r+") as f:
        f["layers/3/cells/prose-s0/c_kv"][0, 5, 7] = np.nan
    c2 = qmla.Capture(nonfin)
    refused("NaN in c_kv when read", lambda: c2.latent(3, "prose-s0"), nonfin, "c_kv")
    c2.close()

    # ---------------------------------------------------------------- CUDA
    ok, why = qmla.cuda_available()
    if not ok:
        refused("qdq_cuda without CUDA", lambda: qmla.qdq_cuda(1, 4, 64), "qdq_cuda", why)
        print("qdq_cuda: no device here (", why, ")")
    else:
        try:
            import torch
        except ImportError:
            torch = None
        if torch is None:
            print("qdq_cuda: a device but no torch: the GPU comparison is skipped")
        else:
            g = torch.Generator().manual_seed(5)
            for bits, meta in ((2, "f16"), (4, "f16"), (4, "q8"), (8, "f32")):
                x = torch.randn(300, 512, generator=g) * torch.rand(300, 1, generator=g) * 4
                cpu = qmla.qdq(x.numpy(), bits, 64, meta)
                gpu = qmla.qdq_torch(x.cuda(), bits, 64, meta).cpu().numpy()
                check(f"qdq_cuda {bits} bits {meta}: equal to the CPU bit for bit",
                      np.array_equal(cpu, gpu), f"{np.mean(cpu != gpu):.2e} differ")
            xn = torch.full((4, 64), float("nan"), device="cuda")
            refused("qdq_cuda NaN refused", lambda: qmla.qdq_torch(xn, 4), "token 0")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
print(f"test_python_files: {'FAIL' if fails else 'ok'} ({fails} failed)")
sys.exit(1 if fails else 0)
