#!/usr/bin/env python3
"""qmla_capture: capture MLA layer tensors of a transformers checkpoint into a
qmla-capture v1 HDF5 file (docs/capture-format.md).

    python3 qmla_capture.py --model PATH -o OUT.h5 --corpus wikitext=wiki.txt \
        [--corpus c4=c4.txt] [--seeds 0,1,2 | --cells wikitext:0,c4:1] \
        [--layers 0-3,7] [--seqs 8] [--tokens 512] [--dtype bfloat16] \
        [--store float16] [--gzip 4] [--device cuda] [--force] [--check-tol X]

Per cell (corpus, seed) it samples `seqs` non-overlapping windows of `tokens`
tokens (a BOS token first where the tokenizer has one), runs the model once per
batch with hooks on the MLA attention modules (eager attention), and writes per
layer the weights (w_uk, w_uv from kv_b_proj, w_o, kv_norm_weight) and per cell
c_kv, k_rope, q_nope, q_rope, attn_out, positions and the pre-RoPE tensors with
the cos/sin applied.  Before a layer-cell is written its attention is recomputed
in float64 from the stored tensors (absorbed form); a miss beyond the tolerance
aborts and removes the partial output.  Output goes to OUT.h5.tmp, renamed at the
end.  Exit status: 0 written, 2 refused or inconsistent (message on stderr).

Tokenizer: AutoTokenizer of the checkpoint, or, where the model directory holds
qmla_tokenizer.json = {"type": "bytes", "bos_id": 256}, the UTF-8 bytes of the
text with bos_id first.
"""

import argparse
import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import qmla_capture_lib as L  # noqa: E402
from qmla_capture_lib import CaptureError  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(prog="qmla_capture.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="local checkpoint directory")
    p.add_argument("-o", "--output", required=True, help="output .h5 file")
    p.add_argument("--model-name", help="value of the root attribute 'model' (default: the "
                   "config's _name_or_path or the directory name)")
    p.add_argument("--model-type", help="load config.json as this transformers model_type "
                   "(e.g. deepseek_v3 for Kimi-K2, whose config says kimi_k2)")
    p.add_argument("--corpus", action="append", default=[], metavar="NAME=FILE",
                   help="a text corpus (repeatable)")
    p.add_argument("--cells", help="NAME:SEED,... (default: every corpus x every seed)")
    p.add_argument("--seeds", default="0", help="seeds for every corpus (default 0)")
    p.add_argument("--layers", default="all", help="MLA module indices, e.g. 0-3,7 (default all)")
    p.add_argument("--seqs", type=int, default=8, help="sequences per cell (N)")
    p.add_argument("--tokens", type=int, default=512, help="tokens per sequence (T)")
    p.add_argument("--batch", type=int, default=0, help="sequences per forward pass (default all)")
    p.add_argument("--dtype", default="bfloat16",
                   choices=["bfloat16", "float16", "float32", "float64"], help="compute dtype")
    p.add_argument("--store", choices=["float16", "float32", "float64"],
                   help="storage dtype of activations (default float16 for 16-bit compute, "
                   "else float32)")
    p.add_argument("--store-weights", choices=["float16", "float32", "float64"],
                   help="storage dtype of weights (default: as --store)")
    p.add_argument("--gzip", type=int, default=4, help="gzip level, 0 = none")
    p.add_argument("--device", default="cuda", help="device for the model (without --device-map)")
    p.add_argument("--device-map", help="transformers device_map, e.g. auto (several GPUs)")
    p.add_argument("--check-device", help="device of the float64 recomputation (default: "
                   "--device, or cuda:0 with --device-map)")
    p.add_argument("--check-tol", type=float, help="tolerance of the recomputation check "
                   "(default from compute and storage dtypes; written as check_tolerance)")
    p.add_argument("--yarn-mscale", choices=["fix", "model"], default="fix",
                   help="fix (default): where the module's softmax scale lacks the YaRN "
                   "mscale^2 of docs/models.md, set it before running; model: keep it")
    p.add_argument("--no-pre", action="store_true", help="omit the pre-RoPE tensors and cos/sin")
    p.add_argument("--hidden-in", action="store_true", help="also store hidden_in")
    p.add_argument("--trust-remote-code-tokenizer", action="store_true",
                   help="let AutoTokenizer run the checkpoint's tokenizer code (Kimi-K2)")
    p.add_argument("--force", action="store_true", help="overwrite an existing output")
    return p.parse_args(argv)


def parse_layers(spec, n):
    if spec in ("all", ""):
        return list(range(n))
    out = []
    for part in spec.split(","):
        part = part.strip()
        if "-" in part:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    bad = [i for i in out if not 0 <= i < n]
    if bad:
        raise CaptureError("--layers %s: index %d out of range (the model has %d MLA modules)"
                           % (spec, bad[0], n))
    return sorted(set(out))


def parse_cells(args):
    corpora = {}
    for c in args.corpus:
        if "=" not in c:
            raise CaptureError("--corpus %r: expected NAME=FILE" % c)
        name, path = c.split("=", 1)
        corpora[name] = path
    if not corpora:
        raise CaptureError("no --corpus NAME=FILE given")
    cells = []
    if args.cells:
        for c in args.cells.split(","):
            name, _, seed = c.strip().partition(":")
            if name not in corpora:
                raise CaptureError("--cells %s: no --corpus %s=FILE given" % (c, name))
            cells.append((name, int(seed or 0)))
    else:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        cells = [(n, s) for n in corpora for s in seeds]
    return corpora, cells


class ByteTokenizer:
    def __init__(self, spec):
        self.bos = spec.get("bos_id")

    def encode(self, text):
        return list(text.encode("utf-8"))


class HFTokenizer:
    def __init__(self, tok):
        self.tok = tok
        self.bos = tok.bos_token_id

    def encode(self, text):
        return list(self.tok(text, add_special_tokens=False)["input_ids"])


def load_tokenizer(path, trust_remote_code):
    spec_path = os.path.join(path, "qmla_tokenizer.json")
    if os.path.exists(spec_path):
        with open(spec_path) as f:
            spec = json.load(f)
        if spec.get("type") != "bytes":
            raise CaptureError("%s: unknown tokenizer type %r" % (spec_path, spec.get("type")))
        return ByteTokenizer(spec)
    from transformers import AutoTokenizer
    try:
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True,
                                            trust_remote_code=trust_remote_code)
    except Exception as e:  # noqa: BLE001 - report any loader failure plainly
        raise CaptureError("cannot load the tokenizer of %s: %s" % (path, e))
    return HFTokenizer(tok)


def sample_windows(tokens, n, T, bos, seed, what):
    """n non-overlapping windows of T tokens (BOS + T-1 text tokens where bos is not
    None), offsets drawn from random.Random(seed)."""
    w = T - (1 if bos is not None else 0)
    need = n * w
    if len(tokens) < need:
        raise CaptureError("%s is too short: %d windows of %d tokens need %d text tokens, found %d"
                           % (what, n, T, need, len(tokens)))
    rng = random.Random(seed)
    cuts = sorted(rng.randint(0, len(tokens) - need) for _ in range(n))
    offs = [cuts[i] + i * w for i in range(n)]
    head = [bos] if bos is not None else []
    return [head + tokens[o:o + w] for o in offs], offs


def load_config(args):
    from transformers import AutoConfig
    try:
        if args.model_type:
            with open(os.path.join(args.model, "config.json")) as f:
                d = json.load(f)
            for k in ("model_type", "auto_map"):
                d.pop(k, None)
            return AutoConfig.for_model(args.model_type, **d)
        return AutoConfig.from_pretrained(args.model, local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise CaptureError("cannot load the config of %s: %s" % (args.model, e))


def check_family(config):
    mt = getattr(config, "model_type", None)
    if mt in L.KNOWN_MODEL_TYPES:
        return mt
    if getattr(config, "kv_lora_rank", None):
        raise CaptureError("model type %r is an MLA family this tool does not know (supported: %s); "
                           "if its attention is DeepSeek-V3's, pass --model-type deepseek_v3"
                           % (mt, ", ".join(L.KNOWN_MODEL_TYPES)))
    raise CaptureError("model type %r has no MLA attention (no kv_lora_rank in its config); "
                       "supported: %s" % (mt, ", ".join(L.KNOWN_MODEL_TYPES)))


def load_model(args, config, torch_dtype):
    from transformers import AutoModelForCausalLM
    kw = dict(config=config, local_files_only=True, attn_implementation="eager")
    if args.dtype in ("float32", "float64"):
        # grouped-mm MoE kernels are 16-bit oriented; the plain loop is exact in any dtype
        kw["experts_implementation"] = "eager"
    if args.device_map:
        kw["device_map"] = args.device_map
    try:
        try:
            model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch_dtype, **kw)
        except TypeError:
            kw.pop("experts_implementation", None)
            model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch_dtype, **kw)
    except (OSError, ValueError, RuntimeError) as e:
        if getattr(config, "model_type", None) != "longcat_flash":
            raise CaptureError("cannot load the model %s: %s" % (args.model, e))
        # transformers 5.17 sizes LongcatFlash's fused experts for routed +
        # zero experts, the checkpoint holds the routed ones (hf_by_name.py)
        from hf_by_name import build_filled
        print("qmla_capture: from_pretrained refused %s (%s); building it from config.json "
              "and filling it by tensor name" % (args.model, str(e).splitlines()[0][:200]),
              file=sys.stderr)
        try:
            model, missing, unused = build_filled(args.model, torch_dtype)
        except (OSError, ValueError, RuntimeError) as e2:
            raise CaptureError("cannot load the model %s: %s; by name: %s" % (args.model, e, e2))
        if missing or unused:
            raise CaptureError("cannot load the model %s by name: model tensors not in "
                               "model.safetensors %s, file tensors unused %s"
                               % (args.model, missing[:6], unused[:6]))
    if "experts_implementation" in kw:
        try:
            model.config._experts_implementation = "eager"
        except (AttributeError, ValueError, TypeError):
            pass
    if not args.device_map:
        model.to(args.device)
    model.eval()
    return model


def run(args, tmp):
    import torch
    import transformers
    import h5py
    import numpy as np

    t0 = time.time()
    config = load_config(args)
    family = check_family(config)
    corpora, cells = parse_cells(args)
    tok = load_tokenizer(args.model, args.trust_remote_code_tokenizer)

    # windows first: a corpus that is too short is refused before the model loads
    windows = {}
    encoded = {}
    for name, seed in cells:
        if name not in encoded:
            try:
                with open(corpora[name], encoding="utf-8") as f:
                    encoded[name] = tok.encode(f.read())
            except OSError as e:
                raise CaptureError("cannot read corpus %s: %s" % (name, e))
        windows[(name, seed)], _ = sample_windows(encoded[name], args.seqs, args.tokens, tok.bos, seed,
                                                  "corpus %s (%s)" % (name, corpora[name]))
    vocab = getattr(config, "vocab_size", None)
    if vocab:
        mx = max(max(max(s) for s in ws) for ws in windows.values())
        if mx >= vocab:
            raise CaptureError("token id %d is outside the model's vocabulary (%d)" % (mx, vocab))

    dt = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
          "float64": torch.float64}[args.dtype]
    if args.dtype in ("float32", "float64"):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    store = args.store or ("float16" if args.dtype in ("bfloat16", "float16") else "float32")
    store_w = args.store_weights or store
    model = load_model(args, config, dt)

    mods = L.find_mla_modules(model)
    if not mods:
        raise CaptureError("no MLA attention module found in %s" % args.model)
    unknown = [n for _, n, _, f in mods if f is None]
    if unknown:
        raise CaptureError("module %s looks like MLA but its class %s is unknown; refusing"
                           % (unknown[0], type(dict((n, m) for _, n, m, _ in mods)[unknown[0]]).__name__))
    n_layers = len(mods)
    sel = parse_layers(args.layers, n_layers)
    dims = L.module_dims(mods[0][2], config)
    for i, n, m, f in mods:
        if L.module_dims(m, config) != dims:
            raise CaptureError("module %s has other dimensions than module 0" % n)
        li = getattr(m, "layer_idx", None)
        if isinstance(li, int) and li != i:
            sys.stderr.write("qmla_capture: note: module %s has layer_idx %d, stored as %d\n" % (n, li, i))
    eps = L.module_eps(mods[0][2])
    fp8 = any(L.is_fp8(m.kv_b_proj) or L.is_fp8(m.o_proj) for _, _, m, _ in mods)

    # softmax scale: the module's, YaRN mscale^2 enforced unless --yarn-mscale model
    expected = L.expected_softmax_scale(config, dims["d_n"], dims["d_r"])
    notes = []
    for i, n, m, f in mods:
        cur = L.module_scale(m)
        if abs(cur / expected - 1.0) > 1e-9 and args.yarn_mscale == "fix":
            for a in ("scaling", "softmax_scale"):
                if isinstance(getattr(m, a, None), float):
                    setattr(m, a, expected)
            if i == 0:
                notes.append("softmax scale set from %.6g to %.6g (YaRN mscale^2)" % (cur, expected))
    scale_mod = L.module_scale(mods[0][2])

    tol = args.check_tol if args.check_tol is not None else L.default_check_tolerance(args.dtype, store, fp8)
    rtol = L.rope_tolerance(args.dtype)
    check_dev = args.check_device or ("cuda:0" if args.device_map else args.device)
    if check_dev.startswith("cuda") and not torch.cuda.is_available():
        check_dev = "cpu"
    base = model.base_model if hasattr(model, "base_model") else model.model
    in_dev = model.get_input_embeddings().weight.device
    batch = args.batch if args.batch > 0 else args.seqs
    layers = [(i, mods[i][2]) for i in sel]

    f = h5py.File(tmp, "w")
    pairing = None
    layout = {}          # layer -> (pairing, perm) or None
    scales = set()
    srcs = set()
    worst = 0.0
    try:
        written_w = set()
        for name, seed in cells:
            seqs = windows[(name, seed)]
            recs = {i: [] for i in sel}
            with L.Recorder(layers, store_hidden=args.hidden_in) as rec, torch.inference_mode():
                for b0 in range(0, len(seqs), batch):
                    ids = torch.tensor(seqs[b0:b0 + batch], dtype=torch.long, device=in_dev)
                    base(input_ids=ids, use_cache=False)
                    got = rec.take()
                    for i in sel:
                        if len(got.get(i, [])) != 1:
                            raise CaptureError("layer %d was called %d times in one forward pass"
                                               % (i, len(got.get(i, []))))
                        out, sc, src = L.process_record(got[i][0], mods[i][2], dims, family)
                        recs[i].append(out)
                        srcs.add(src)
                        scales.add(sc if sc is not None else L.module_scale(mods[i][2]))
            for i in sel:
                parts = recs.pop(i)
                cat = lambda k: torch.cat([p[k] for p in parts], 0)
                cell = {k: cat(k) for k in ("c_kv", "k_rope", "q_nope", "q_rope", "attn_out")}
                N, T = cell["c_kv"].shape[0], cell["c_kv"].shape[1]
                if "hidden_in" in parts[0]:
                    cell["hidden_in"] = cat("hidden_in")
                have_rope = all("rope" in p for p in parts) and not args.no_pre
                if have_rope and i not in layout:
                    r = parts[0]["rope"]
                    g = lambda x: x.to(torch.float64)
                    pr, perm, err = L.detect_rope_layout(g(r["q_pre"]), g(r["k_pre"]), g(r["q_post"]),
                                                         g(r["k_post"]), r["cos"], r["sin"])
                    if err > rtol:
                        sys.stderr.write("qmla_capture: note: layer %d: no RoPE layout reproduces the "
                                         "rotary output (best %s, error %.3g); pre-RoPE tensors omitted\n"
                                         % (i, pr, err))
                        layout[i] = None
                    else:
                        layout[i] = (pr, perm)
                        if pairing is None:
                            pairing = pr
                        elif pairing != pr:
                            raise CaptureError("layer %d uses RoPE pairing %s, earlier layers %s"
                                               % (i, pr, pairing))
                if have_rope and layout.get(i):
                    perm = layout[i][1]
                    pp = (lambda x: x[..., perm]) if perm is not None else (lambda x: x)
                    cell["q_rope_pre"] = pp(torch.cat([p["rope"]["q_pre"] for p in parts], 0))
                    cell["k_rope_pre"] = pp(torch.cat([p["rope"]["k_pre"][:, 0] for p in parts], 0))
                    cs = []
                    for p in parts:
                        B = p["c_kv"].shape[0]
                        cs.append((p["rope"]["cos"].expand(B, -1, -1), p["rope"]["sin"].expand(B, -1, -1)))
                    cell["rope_cos"] = torch.cat([c for c, _ in cs], 0)
                    cell["rope_sin"] = torch.cat([s for _, s in cs], 0)
                arrs = {k: L.to_store(v, store) for k, v in cell.items()}
                arrs["positions"] = np.tile(np.arange(T, dtype=np.int64), (N, 1))
                if i not in written_w:
                    w = L.layer_weights(mods[i][2], dims)
                    warrs = {k: L.to_store(v, store_w) for k, v in w.items()}
                else:
                    warrs = {k: f["layers/%d/%s" % (i, k)][()] for k in ("w_uk", "w_uv", "w_o")}
                tau = scales_one(scales)
                e = L.attention_rel_error(arrs, warrs, tau, device=check_dev)
                worst = max(worst, e)
                if not e <= tol:
                    raise CaptureError("layer %d cell %s-s%d: attention recomputed from the captured "
                                       "tensors misses attn_out by %.3g (tolerance %.3g); nothing written"
                                       % (i, name, seed, e, tol))
                lg = f.require_group("layers/%d" % i)
                if i not in written_w:
                    lg.attrs["layer"] = np.int64(i)
                    for k, v in warrs.items():
                        L.write_dataset(lg, k, v, args.gzip)
                    written_w.add(i)
                cg = lg.require_group("cells").create_group("%s-s%d" % (name, seed))
                cg.attrs["dataset"] = name
                cg.attrs["seed"] = np.int64(seed)
                for k, v in arrs.items():
                    L.write_dataset(cg, k, v, args.gzip)
                print("layer %d cell %s-s%d: N=%d T=%d recompute error %.3g (tolerance %.3g)"
                      % (i, name, seed, N, T, e, tol))
        if pairing is None:
            pairing = "interleaved" if family == "deepseek_v2" else "half"
            notes.append("RoPE pairing not observed, family default declared")
        tau = scales_one(scales)
        if abs(tau - scale_mod) > 1e-12 * abs(tau):
            notes.append("attention called with scale %.9g, module attribute %.9g" % (tau, scale_mod))
        source = ("qmla_capture.py; torch %s; transformers %s; family %s; compute %s; store %s, weights %s; "
                  "eager attention; q/k taken from %s%s" % (
                      torch.__version__, transformers.__version__, family, args.dtype, store, store_w,
                      " and ".join(sorted(srcs)), "".join("; " + n for n in notes)))
        name_attr = args.model_name or getattr(config, "_name_or_path", "") or os.path.basename(
            os.path.normpath(args.model))
        L.write_root(f, name_attr, source, tol, dict(
            n_layers=n_layers, n_heads=dims["H"], d_model=dims["D"], kv_lora_rank=dims["d_c"],
            qk_nope_head_dim=dims["d_n"], qk_rope_head_dim=dims["d_r"], v_head_dim=dims["d_v"],
            softmax_scale=tau, rope_pairing=pairing, rms_norm_eps=eps))
    finally:
        f.close()
    print("wrote %s: %d layers x %d cells, rope_pairing %s, softmax_scale %.9g, rms_norm_eps %g, "
          "worst recompute error %.3g, %.1f s" % (args.output, len(sel), len(cells), pairing, tau, eps,
                                                  worst, time.time() - t0))
    for n in notes:
        print("note: " + n)


def scales_one(scales):
    s = sorted(scales)
    if not s:
        raise CaptureError("no softmax scale observed")
    if s[-1] - s[0] > 1e-12 * abs(s[-1]):
        raise CaptureError("layers use different softmax scales: %s" % s)
    return s[0]


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    out = args.output
    tmp = out + ".tmp"
    if os.path.exists(out) and not args.force:
        sys.stderr.write("qmla_capture: error: output %s exists; pass --force to overwrite\n" % out)
        return 2
    try:
        try:
            import torch  # noqa: F401
            import transformers  # noqa: F401
            import h5py  # noqa: F401
        except ImportError as e:
            raise CaptureError("needs torch, transformers and h5py: %s" % e)
        run(args, tmp)
        os.replace(tmp, out)
        return 0
    except CaptureError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        sys.stderr.write("qmla_capture: error: %s\n" % e)
        return 2
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


if __name__ == "__main__":
    sys.exit(main())
