#!/usr/bin/env python3
"""make_oracle: generate tests/data/oracle-deepseek-v2.h5, a qmla-capture v1 file
whose attn_out is transformers' own DeepseekV2Attention output.

    PYTHONUNBUFFERED=1 python3 experiments/oracle/make_oracle.py -o tests/data/oracle-deepseek-v2.h5

A tiny DeepseekV2ForCausalLM (the real transformers class) with DeepSeek-V2-Lite's
per-head attention shapes (d_c 512, d_r 64, d_n 128, d_v 128, no q_lora) but
H = 2 heads, D = 256, 2 layers, YaRN (factor 40, mscale = mscale_all_dim = 0.707,
so tau = 192^-1/2 * mscale^2), random weights rounded to float16-exact values,
is saved with a byte tokenizer and captured by qmla_capture.py in float64 on the
GPU (TF32 off): 2 cells (synthetic text, seeds 0 and 1) x N = 2 x T = 32.
Weights are stored float16 (exact), activations float32; check_tolerance 1e-5.
The file is validated (float64 recomputation, RoPE rotation) before the command
exits 0.
"""

import argparse
import hashlib
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "capture"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--output", default="tests/data/oracle-deepseek-v2.h5")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--seqs", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--max-bytes", type=int, default=3 * 1024 * 1024)
    a = ap.parse_args()
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        import h5py  # noqa: F401
    except ImportError:
        print("SKIP: make_oracle needs torch and transformers")
        return 77
    import qmla_capture
    import qmla_capture_lib as L

    rope = L.yarn_rope(1e4, 40, 0.707, 0.707)
    cfg = L.make_config(
        "deepseek_v2", rope, vocab_size=320, hidden_size=a.d_model, num_attention_heads=a.heads,
        num_key_value_heads=a.heads, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
        v_head_dim=128, q_lora_rank=None, intermediate_size=256, moe_intermediate_size=64,
        num_hidden_layers=2, first_k_dense_replace=2, n_routed_experts=4, n_shared_experts=1,
        num_experts_per_tok=2, topk_method="greedy", max_position_embeddings=163840,
        bos_token_id=256, eos_token_id=257, tie_word_embeddings=False, rms_norm_eps=1e-6)
    work = tempfile.mkdtemp(prefix="qmla-oracle-")
    mdir = os.path.join(work, "tiny-deepseek-v2")
    L.build_tiny_checkpoint(cfg, mdir, seed=20251129, fp16_exact=True)
    texts = []
    for i, seed in enumerate((11, 12)):
        p = os.path.join(work, "synth%d.txt" % i)
        with open(p, "w") as f:
            f.write(L.synthetic_text(seed, 2000))
        texts.append(p)
    os.makedirs(os.path.dirname(os.path.abspath(a.output)), exist_ok=True)
    argv = ["--model", mdir, "-o", a.output, "--force",
            "--model-name", "qmla-oracle/tiny-deepseek-v2-yarn (random fp16-exact weights)",
            "--corpus", "synth-a=" + texts[0], "--corpus", "synth-b=" + texts[1],
            "--cells", "synth-a:0,synth-b:1", "--seqs", str(a.seqs), "--tokens", str(a.tokens),
            "--dtype", "float64", "--store", "float32", "--store-weights", "float16",
            "--check-tol", "1e-5", "--gzip", "9", "--device", a.device]
    rc = qmla_capture.main(argv)
    if rc != 0:
        return rc
    rep = L.validate_file(a.output, recompute=True)
    for p in rep["problems"]:
        print("problem: " + p)
    size = os.path.getsize(a.output)
    with open(a.output, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    c = rep["config"]
    print("oracle %s: %d bytes, sha256 %s" % (a.output, size, sha))
    print("  config %s" % c)
    print("  max recompute error %.3g, max rope error %.3g, tolerance %.3g"
          % (max(rep["errors"].values()), max(rep["rope_errors"].values()), rep["tolerance"]))
    tau = L.expected_softmax_scale(cfg, 128, 64)
    ok = not rep["problems"] and abs(c["softmax_scale"] / tau - 1) < 1e-12 and size <= a.max_bytes
    if size > a.max_bytes:
        print("too large: %d > %d bytes" % (size, a.max_bytes))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
