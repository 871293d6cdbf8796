#!/usr/bin/env python3
"""test_capture: end-to-end tests of qmla_capture.py on small randomly initialised
configs of the real transformers classes (DeepseekV2 without and with q_lora, both
with YaRN; DeepseekV3 with YaRN; Glm4MoeLite; LongcatFlash), plus the refusals.

    PYTHONUNBUFFERED=1 python3 experiments/capture/test_capture.py [--device cuda]
        [--keep DIR] [--dump-sources FILE]

For each family: capture 2 cells x 3 sequences x 64 tokens in float32 (TF32 off),
then check the file against the contract (shapes, attributes), the float64
recomputation against attn_out (<= 1e-5 relative), post-RoPE = rotate(pre) under
the declared pairing, softmax_scale = (d_n+d_r)^-1/2 * mscale^2 (models.md) and
rms_norm_eps = the module's own.  One bfloat16 capture reports the error a
16-bit model gives.  Refusals: a non-MLA model (tiny Llama), too short a text,
an existing output without --force.  Needs torch, transformers, h5py: exits 77
(skip) where torch is absent.  Last line: "N passed, M failed".
"""

import argparse
import contextlib
import io
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

RESULTS = []


def check(name, ok, detail=""):
    RESULTS.append((name, bool(ok)))
    print("%s %s%s" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail else ""))
    return ok


def run_capture(argv):
    """qmla_capture.main in-process; returns (rc, stdout, stderr)."""
    import qmla_capture
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = qmla_capture.main(argv)
        except SystemExit as e:
            rc = e.code
        except Exception as e:  # noqa: BLE001 - a crash is a failed test, not an abort
            import traceback
            traceback.print_exc(file=err)
            rc = "crash: %r" % (e,)
    return rc, out.getvalue(), err.getvalue()


COMMON = dict(vocab_size=320, hidden_size=96, num_attention_heads=4, num_key_value_heads=4,
              kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=24,
              max_position_embeddings=163840, bos_token_id=256, eos_token_id=257,
              tie_word_embeddings=False)
MOE = dict(n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, moe_intermediate_size=32)


def family_configs():
    import qmla_capture_lib as L
    y_v2 = L.yarn_rope(1e4, 40, 0.707, 0.707)
    y_v3 = L.yarn_rope(1e4, 40, 1.0, 1.0)
    plain = lambda th: dict(rope_type="default", rope_theta=float(th))
    return [
        ("deepseek_v2 (no q_lora, YaRN)", "deepseek_v2", y_v2,
         dict(COMMON, **MOE, q_lora_rank=None, intermediate_size=128, num_hidden_layers=2,
              first_k_dense_replace=2, topk_method="greedy")),
        ("deepseek_v2 (q_lora, YaRN)", "deepseek_v2", y_v2,
         dict(COMMON, **MOE, q_lora_rank=48, intermediate_size=128, num_hidden_layers=2,
              first_k_dense_replace=2, topk_method="greedy")),
        ("deepseek_v3 (YaRN)", "deepseek_v3", y_v3,
         dict(COMMON, **MOE, q_lora_rank=48, intermediate_size=128, num_hidden_layers=2,
              first_k_dense_replace=2, n_group=1, topk_group=1, rope_interleave=True)),
        ("glm4_moe_lite", "glm4_moe_lite", plain(1e6),
         dict(COMMON, **MOE, q_lora_rank=48, intermediate_size=128, num_hidden_layers=2,
              qk_nope_head_dim=48, v_head_dim=64, n_group=1, topk_group=1, rms_norm_eps=1e-5,
              mlp_layer_types=["dense", "dense"])),
        ("longcat_flash", "longcat_flash", plain(5e6),
         dict({k: v for k, v in COMMON.items()}, q_lora_rank=48, num_layers=1, num_hidden_layers=2,
              head_dim=16, ffn_hidden_size=128, expert_ffn_hidden_size=32, n_routed_experts=4,
              zero_expert_num=2, moe_topk=2, rms_norm_eps=1e-5)),
    ]


def test_family(label, model_type, rope, kw, work, texts, device):
    import numpy as np
    import h5py
    import qmla_capture_lib as L
    tag = label.split()[0]
    try:
        cfg = L.make_config(model_type, rope, **kw)
        d = os.path.join(work, label.replace(" ", "_").replace("(", "").replace(")", "").replace(",", ""))
        model = L.build_tiny_checkpoint(cfg, d, seed=len(label))
    except Exception as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        return check("%s: build tiny checkpoint" % label, False, repr(e))
    mods = L.find_mla_modules(model)
    m0 = mods[0][2]
    dims = L.module_dims(m0, cfg)
    eps_mod = L.module_eps(m0)
    scale_mod = L.module_scale(m0)
    out = os.path.join(work, tag + "-%d.h5" % len(label))
    rc, so, se = run_capture(["--model", d, "-o", out, "--corpus", "synA=" + texts[0],
                              "--corpus", "synB=" + texts[1], "--cells", "synA:0,synB:1",
                              "--seqs", "3", "--tokens", "64", "--batch", "2", "--dtype", "float32",
                              "--store", "float32", "--device", device, "--force"])
    if not check("%s: capture exits 0" % label, rc == 0, "" if rc == 0 else "rc=%r %s" % (rc, se[-3000:])):
        return
    print("   " + so.strip().splitlines()[-1])
    for line in se.strip().splitlines():
        print("   stderr: " + line)
    rep = L.validate_file(out, recompute=True, tol=1e-5, device=device)
    check("%s: file validates per the contract" % label, not rep["problems"], "; ".join(rep["problems"][:5]))
    c = rep["config"]
    want = dict(n_layers=len(mods), n_heads=dims["H"], d_model=dims["D"], kv_lora_rank=dims["d_c"],
                qk_nope_head_dim=dims["d_n"], qk_rope_head_dim=dims["d_r"], v_head_dim=dims["d_v"])
    bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
    check("%s: /config matches the model (%d MLA modules)" % (label, len(mods)), not bad, repr(bad))
    check("%s: all layers and 2 cells present" % label,
          rep["layers"] == [str(i) for i in range(len(mods))] and rep["cells"] == ["synA-s0", "synB-s1"],
          "layers %s cells %s" % (rep["layers"], rep["cells"]))
    worst = max(rep["errors"].values()) if rep["errors"] else float("inf")
    check("%s: recomputed attention matches attn_out <= 1e-5" % label, worst <= 1e-5, "max %.3g" % worst)
    rw = max(rep["rope_errors"].values()) if rep["rope_errors"] else float("inf")
    check("%s: post-RoPE = rotate(pre) under declared pairing %s" % (label, c.get("rope_pairing")),
          len(rep["rope_errors"]) == len(rep["errors"]) and rw <= 1e-5, "max %.3g" % rw)
    tau = L.expected_softmax_scale(cfg, dims["d_n"], dims["d_r"])
    check("%s: softmax_scale %.6g = formula %.6g (module had %.6g)" % (label, c["softmax_scale"], tau, scale_mod),
          abs(c["softmax_scale"] / tau - 1) < 1e-9)
    if rope.get("rope_type") == "yarn":
        check("%s: YaRN mscale^2 enters the scale" % label,
              c["softmax_scale"] > 1.01 * (dims["d_n"] + dims["d_r"]) ** -0.5)
    check("%s: rms_norm_eps %g = module's %g" % (label, c["rms_norm_eps"], eps_mod), c["rms_norm_eps"] == eps_mod)
    with h5py.File(out, "r") as f:
        src = f.attrs["source"]
        src = src.decode() if isinstance(src, bytes) else src
        g = f["layers/0/kv_norm_weight"][()].astype(np.float64)
        ckv = f["layers/0/cells/synA-s0/c_kv"][()].astype(np.float64)
    print("   source: " + src)
    # c_kv / gamma is RMS-normalised: rms 1, times mla_scale_kv_lora for LongCat
    sk = L._num_attr(m0, "mla_scale_kv_lora") or 1.0
    rms = float(np.sqrt(((ckv / g) ** 2).mean(-1)).mean())
    check("%s: c_kv is the normalised latent%s (rms of c_kv/gamma %.5f, expected %.5f)"
          % (label, " times mla_scale_kv_lora" if sk != 1.0 else "", rms, sk), abs(rms / sk - 1) < 1e-3)
    return out


def test_bf16(work, texts, device):
    import qmla_capture_lib as L
    cfg = L.make_config("deepseek_v3", L.yarn_rope(1e4, 40, 1.0, 1.0),
                        **dict(COMMON, **MOE, q_lora_rank=48, intermediate_size=128, num_hidden_layers=2,
                               first_k_dense_replace=1, n_group=1, topk_group=1, rope_interleave=True))
    d = os.path.join(work, "v3bf16")
    L.build_tiny_checkpoint(cfg, d, seed=7)
    out = os.path.join(work, "v3bf16.h5")
    rc, so, se = run_capture(["--model", d, "-o", out, "--corpus", "synA=" + texts[0], "--seqs", "3",
                              "--tokens", "64", "--dtype", "bfloat16", "--device", device, "--force"])
    if not check("deepseek_v3 bfloat16: capture with default tolerance exits 0", rc == 0, se[-2000:]):
        return
    rep = L.validate_file(out, device=device)
    worst = max(rep["errors"].values())
    rw = max(rep["rope_errors"].values()) if rep["rope_errors"] else float("nan")
    check("deepseek_v3 bfloat16 (store float16): validates, recompute error %.3g, rope error %.3g, "
          "tolerance %.3g" % (worst, rw, rep["tolerance"]), not rep["problems"], "; ".join(rep["problems"][:3]))


def test_refusals(work, texts, device, some_model):
    import qmla_capture_lib as L
    from transformers import AutoConfig
    # a model without MLA
    cfg = AutoConfig.for_model("llama", vocab_size=320, hidden_size=64, intermediate_size=128,
                               num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4)
    d = os.path.join(work, "llama")
    L.build_tiny_checkpoint(cfg, d)
    rc, so, se = run_capture(["--model", d, "-o", os.path.join(work, "llama.h5"), "--corpus",
                              "synA=" + texts[0], "--seqs", "2", "--tokens", "32", "--device", device])
    check("refuses a non-MLA model (llama)", rc not in (0, None) and "no MLA attention" in se
          and not os.path.exists(os.path.join(work, "llama.h5")), "rc=%r %s" % (rc, se.strip()))
    print("   message: " + se.strip())
    # too short a text
    short = os.path.join(work, "short.txt")
    with open(short, "w") as f:
        f.write("only a hundred bytes of text " * 3 + "x" * 13)
    out = os.path.join(work, "short.h5")
    rc, so, se = run_capture(["--model", some_model, "-o", out, "--corpus", "tiny=" + short,
                              "--seqs", "3", "--tokens", "64", "--device", device])
    check("refuses too short a text", rc not in (0, None) and "too short" in se and "found 100" in se
          and not os.path.exists(out) and not os.path.exists(out + ".tmp"), "rc=%r %s" % (rc, se.strip()))
    print("   message: " + se.strip())
    # an existing output, through the real command line (exit status of the process)
    out = os.path.join(work, "exists.h5")
    with open(out, "w") as f:
        f.write("not a capture")
    cmd = [sys.executable, os.path.join(HERE, "qmla_capture.py"), "--model", some_model, "-o", out,
           "--corpus", "synA=" + texts[0], "--seqs", "2", "--tokens", "32", "--dtype", "float32",
           "--device", device]
    p = subprocess.run(cmd, capture_output=True, text=True)
    check("refuses an existing output without --force (exit %d)" % p.returncode,
          p.returncode != 0 and "exists" in p.stderr and open(out).read() == "not a capture", p.stderr.strip())
    print("   message: " + p.stderr.strip())
    p = subprocess.run(cmd + ["--force"], capture_output=True, text=True)
    check("overwrites it with --force", p.returncode == 0 and L.validate_file(out)["problems"] == [],
          p.stderr.strip()[-2000:])


def dump_sources(path):
    """inspect.getsource of the MLA classes' forward, their rotary functions and
    eager attention, as transformers has them here."""
    import inspect
    import importlib
    import transformers
    mods = {"deepseek_v2": "DeepseekV2", "deepseek_v3": "DeepseekV3", "glm4_moe_lite": "Glm4MoeLite",
            "longcat_flash": "LongcatFlash"}
    with open(path, "w") as f:
        f.write("transformers %s\n" % transformers.__version__)
        for mt, pre in mods.items():
            try:
                m = importlib.import_module("transformers.models.%s.modeling_%s" % (mt, mt))
            except Exception as e:  # noqa: BLE001
                f.write("\n### %s: import failed: %r\n" % (mt, e))
                continue
            f.write("\n\n########## %s (%s) ##########\n" % (mt, m.__file__))
            for name, obj in vars(m).items():
                want = (name.startswith("apply_rotary") or name in ("rotate_half", "eager_attention_forward",
                        "yarn_get_mscale", "yarn_apply_mscale")
                        or (inspect.isclass(obj) and obj.__module__ == m.__name__ and (
                            name.endswith("Attention") or name.endswith("MLA") or name.endswith("RotaryEmbedding")
                            or name.endswith("RMSNorm"))))
                if want:
                    try:
                        f.write("\n# ---- %s\n%s" % (name, inspect.getsource(obj)))
                    except (OSError, TypeError) as e:
                        f.write("\n# ---- %s: %r\n" % (name, e))
        try:
            from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
            f.write("\n# ALL_ATTENTION_FUNCTIONS keys: %s\n" % list(ALL_ATTENTION_FUNCTIONS.keys()))
            f.write(inspect.getsource(type(ALL_ATTENTION_FUNCTIONS).get_interface))
        except Exception as e:  # noqa: BLE001
            f.write("\n# ALL_ATTENTION_FUNCTIONS: %r\n" % (e,))
        try:
            from transformers import modeling_rope_utils as R
            f.write("\n# ---- _compute_yarn_parameters\n" + inspect.getsource(R._compute_yarn_parameters))
        except Exception as e:  # noqa: BLE001
            f.write("\n# yarn: %r\n" % (e,))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--keep", help="keep the work directory here")
    ap.add_argument("--dump-sources", help="write transformers' MLA sources to this file")
    a = ap.parse_args()
    try:
        import torch
        import transformers
        import h5py  # noqa: F401
    except ImportError as e:
        print("SKIP: %s (test_capture needs torch, transformers and h5py)" % e)
        return 77
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        a.device = "cpu"
    print("torch %s, transformers %s, device %s" % (torch.__version__, transformers.__version__, a.device))
    if a.dump_sources:
        dump_sources(a.dump_sources)
    import qmla_capture_lib as L
    work = a.keep or tempfile.mkdtemp(prefix="qmla-capture-test-")
    os.makedirs(work, exist_ok=True)
    texts = []
    for i in range(2):
        p = os.path.join(work, "text%d.txt" % i)
        with open(p, "w") as f:
            f.write(L.synthetic_text(100 + i))
        texts.append(p)
    first_model = None
    for label, mt, rope, kw in family_configs():
        try:
            test_family(label, mt, rope, kw, work, texts, a.device)
        except Exception as e:  # noqa: BLE001
            import traceback
            traceback.print_exc()
            check("%s: no exception" % label, False, repr(e))
        if first_model is None:
            cand = [os.path.join(work, x) for x in sorted(os.listdir(work))
                    if os.path.isdir(os.path.join(work, x)) and x.startswith("deepseek_v2")]
            first_model = cand[0] if cand else None
    for fn, args in ((test_bf16, (work, texts, a.device)),
                     (test_refusals, (work, texts, a.device, first_model))):
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001
            import traceback
            traceback.print_exc()
            check("%s: no exception" % fn.__name__, False, repr(e))
    npass = sum(ok for _, ok in RESULTS)
    nfail = len(RESULTS) - npass
    print("%d passed, %d failed" % (npass, nfail))
    return 0 if nfail == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
