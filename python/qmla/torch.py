"""python/qmla/torch.py — serving from packed caches in PyTorch (issue 21;
docs/serving.md, docs/python.md):

    import qmla.torch as qt
    ops = qt.load_ops()                       # torch.ops.qmla (builds once)
    cache = qt.MLAPagedCache(model, batch_size=8, max_cache_len=4096, config="C4R4")
    out = model.generate(ids, past_key_values=cache, max_new_tokens=256)

load_ops builds python/qmla/torch_ops.cpp with torch.utils.cpp_extension
against the installed torch and links libqmla.so (a CUDA build of
python/meson.build: the launchers of kernels/kvcache_cuda.h and
kernels/decode_cuda.h), registering qmla::kv_write, qmla::kv_write_ws_init,
qmla::kv_write_status, qmla::decode_plan and qmla::decode (torch.library).

MLAPagedCache is a transformers Cache for the MLA attention modules of the
DeepseekV2 / DeepseekV3 / Glm4MoeLite families (modules with
kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj, loaded with
attn_implementation="eager"). Per layer it keeps a page pool of the chosen
configuration (C4R4, C2R4 with f16 or q8 metadata, C8R8 with f16, and
BF16 sink/window rows; or BF16), one set of block tables for every layer (qmla.paging), and
the decode plans. In each attention forward:
  * the latent (the input of kv_b_proj, i.e. kv_a_layernorm's output) and
    the rotated RoPE key of the new tokens are written through the fused
    writer (qmla::kv_write) in the dtype the model computes them (BF16 rows
    for a BF16 model, float32 rows otherwise: the writer quantizes exactly
    the values the QDQ hook quantizes), zero-padded to 512 content channels
    when kv_lora_rank < 512 (exact: whole groups of zeros);
  * the queries are absorbed (q_lat = W_UK^T q_nope, with the rotated
    q_rope) and attention runs on the pages through qmla::decode, in pieces
    of at most 1024 / H query tokens (a prefill too);
  * the latent output is expanded by W_UV and handed back to the module,
    which applies o_proj.
transformers' own cache update is bypassed (update() stores nothing), so no
BF16 copy of the cache exists. Sequences of a batch must have equal lengths
(no padding). Importing this module imports torch and transformers; the
ctypes binding (import qmla) does not.
"""
import contextlib
import os
import weakref

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from . import lib_path
from . import paging as P

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.abspath(os.path.join(_HERE, "..", ".."))
MLA_PARTS = ("kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "o_proj")

_OPS = None
# The decode variant MLAPagedCache plans with unless told: 7, what
# qmla_decode_cuda_plan (the library's default) uses (kernels/decode_cuda.h;
# for C8R8 its plan is variant 10's, for BF16 variant 0)
DEFAULT_VARIANT = 7
# Variants whose low-bit kernels attend to BF16(fmaf(q, s, l)) (the values
# rounded to BF16, as the QDQ hook's cache) instead of fmaf(q, s, l): 2 and
# 5 (qmla_decode_cuda_variant_packed_f32 == 0); C8R8 rounds under every
# variant but its tensor-core ones, 9 and 10 (H200 run 13)
ROUNDED_VARIANTS = (2, 5)
C8R8_UNROUNDED_VARIANTS = (9, 10)
# Set True to wrap each phase of a paged attention forward in a
# torch.profiler.record_function range ("qmla.rows", "qmla.index",
# "qmla.kv_write", "qmla.absorb", "qmla.decode", "qmla.expand"): the
# benchmark's per-phase breakdown (experiments/serving/bench_serving.py)
PROFILE_RANGES = False


def variant_rounds(cfg, variant):
    """True when the decode kernel that `variant` names (a plan's variant,
    plan[5] of qmla::decode_plan) attends to BF16(fmaf(q, s, l)) on pages of
    cfg (qmla.paging.parse_config), False when to fmaf(q, s, l) unrounded or
    to BF16 rows (BF16 pages): C8R8 rounds except under variants 9 and 10;
    C4R4 / C2R4 round under 2 and 5 (which refuse q8 pages)."""
    if cfg["c_bits"] == 16:
        return False
    if cfg["c_bits"] == 8:
        return variant not in C8R8_UNROUNDED_VARIANTS
    return variant in ROUNDED_VARIANTS


def _range(name):
    if PROFILE_RANGES:
        return torch.profiler.record_function(name)
    return contextlib.nullcontext()


def load_ops(build_dir=None, verbose=False):
    """torch.ops.qmla, building the extension the first time (a few tens of
    seconds; torch's extension cache keeps it). Raises ImportError when
    libqmla.so is absent."""
    global _OPS
    if _OPS is not None:
        return _OPS
    from torch.utils import cpp_extension
    lib = os.path.abspath(lib_path())
    if not os.path.exists(lib):
        raise ImportError(f"qmla.torch: {lib} not found: build libqmla.so with CUDA "
                          "(meson setup build && ninja -C build python/libqmla.so) or set QMLA_LIB")
    libdir = os.path.dirname(lib)
    if build_dir:
        os.makedirs(build_dir, exist_ok=True)
    cpp_extension.load(
        name="qmla_torch_ops", sources=[os.path.join(_HERE, "torch_ops.cpp")],
        extra_include_paths=[os.path.join(_ROOT, "include"), os.path.join(_ROOT, "kernels")],
        extra_cflags=["-O2"],
        extra_ldflags=[f"-L{libdir}", "-l:" + os.path.basename(lib), f"-Wl,-rpath,{libdir}"],
        with_cuda=True, is_python_module=False, build_directory=build_dir, verbose=verbose)
    _OPS = torch.ops.qmla
    return _OPS


# ---------------------------------------------------------------- the hooks
# The attention modules compute the latent (kv_b_proj's input) before they
# call past_key_values.update(); update() of an MLAPagedCache names the
# layer, and the module's attention function (eager_attention_forward,
# looked up in the module's globals at call time) is replaced by one that
# serves that layer from the pages and leaves every other call alone.
_LATENT = {}
_ACTIVE = [None]            # (cache, layer_idx) between update() and attention


def _dispatch(orig):
    def eager_attention_forward(module, query, key, value, attention_mask, *args, **kwargs):
        act = _ACTIVE[0]
        if act is not None and getattr(module, "layer_idx", None) == act[1]:
            _ACTIVE[0] = None
            scaling = kwargs.get("scaling", args[0] if args else None)
            if scaling is None:
                scaling = module.scaling
            return act[0]._attend(module, query, key, float(scaling)), None
        # not a paged layer (another cache, or none): drop the latent the
        # kv_b_proj hook kept. Left in _LATENT it outlived the forward: under
        # transformers 5.17 a DynamicCache step hands kv_b_proj the whole
        # context's latent, and the benchmark's next point started with those
        # 27 tensors still allocated (run 6: 59.4 GB peak at C4R4 4K batch 1
        # after DynamicCache 32K batch 64, whose latents are 58.0 GB)
        _LATENT.pop(id(module), None)
        return orig(module, query, key, value, attention_mask, *args, **kwargs)
    eager_attention_forward.__qmla_paged__ = orig
    return eager_attention_forward


def mla_modules(model):
    return [m for m in model.modules() if all(hasattr(m, p) for p in MLA_PARTS)]


def attach(model):
    """Install the latent hooks and the attention dispatch on `model` (once;
    MLAPagedCache calls it). Calls without an MLAPagedCache are unchanged."""
    if getattr(model, "_qmla_paged_mods", None) is not None:
        return model._qmla_paged_mods
    mods = mla_modules(model)
    if not mods:
        raise ValueError("MLAPagedCache: the model has no MLA attention modules (modules with "
                         + ", ".join(MLA_PARTS) + ")")
    impl = getattr(model.config, "_attn_implementation", "eager")
    if impl != "eager":
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation("eager")
        else:
            raise ValueError(f"MLAPagedCache: attn_implementation {impl!r}: load the model with "
                             "attn_implementation='eager'")
    for m in mods:
        if getattr(m, "layer_idx", None) is None:
            raise ValueError(f"{type(m).__name__}: no layer_idx")

        def pre(mod, args, owner=m):
            _LATENT[id(owner)] = args[0]
        m.kv_b_proj.register_forward_pre_hook(pre)
    for g, fn in eager_attention_slots(mods):
        if not hasattr(fn, "__qmla_paged__"):
            g["eager_attention_forward"] = _dispatch(fn)
    object.__setattr__(model, "_qmla_paged_mods", mods)
    return mods


def eager_attention_slots(mods):
    """[(globals, eager_attention_forward)] once per source module of the
    attention modules `mods`: where transformers looks the function up at
    call time (also used by experiments/eval/eval_hook.py's CacheHook).
    ValueError when a module's source has none."""
    import inspect
    seen, out = set(), []
    for m in mods:
        g = inspect.unwrap(type(m).forward).__globals__
        if id(g) in seen:
            continue
        seen.add(id(g))
        fn = g.get("eager_attention_forward")
        if fn is None:
            raise ValueError(f"{type(m).__name__}: no eager_attention_forward in its module")
        out.append((g, fn))
    return out


class _PagedLayer(CacheLayerMixin):
    """transformers' per-layer view of an MLAPagedCache: lengths only (the
    pages belong to the cache)."""
    is_compileable = False
    is_sliding = False

    def __init__(self, owner, idx):
        super().__init__()
        # a weak reference: no cache <-> layer cycle, so that `del cache`
        # frees the pools at once (the benchmark's second point OOM'd on an
        # uncollected cycle)
        self._owner, self.idx = weakref.ref(owner), idx
        self.is_initialized = True
        self.max_batch_size = owner.batch
        self.max_cache_len = owner.max_len

    @property
    def owner(self):
        return self._owner()

    def lazy_initialization(self, key_states, *args):
        pass

    def update(self, key_states, value_states, cache_kwargs=None):
        return key_states, value_states

    def get_seq_length(self):
        return self.owner.lengths.get(self.idx, 0)

    def get_mask_sizes(self, query_length):
        # transformers 5.17 passes the query length; earlier 5.x cache_position
        q = query_length if isinstance(query_length, int) else int(query_length.shape[0])
        return self.get_seq_length() + q, 0

    def get_max_cache_shape(self):
        return -1          # grows page by page (generate treats it as a dynamic cache)

    def reset(self):
        self.owner.reset()

    def _refuse(self, *a, **k):
        raise NotImplementedError("MLAPagedCache: beam search, cropping and batch reordering "
                                  "are not supported (pages are shared by every layer)")
    crop = reorder_cache = batch_repeat_interleave = batch_select_indices = _refuse
    offload = prefetch = _refuse


# Every method transformers' Cache asks of a layer is defined above; abstract
# methods a later transformers adds fall back to the base's (no instantiation error).
_PagedLayer.__abstractmethods__ = frozenset()


def row_dtype(latent, key):
    """The dtype of the rows handed to qmla::kv_write for a latent and RoPE
    key: BF16 when both are BF16, else float32 (exact for float32 and
    float16; the writer quantizes what the model computed, as the QDQ hook
    of experiments/eval/eval_hook.py does)."""
    if latent.dtype == torch.bfloat16 and key.dtype == torch.bfloat16:
        return torch.bfloat16
    return torch.float32


def unpack_codes(b, bits):
    """uint8 [..., nbytes] -> codes [..., nbytes * 8 / bits] int32 (low bits
    first: include/qmla/quant_core.h's packing, for 2, 4 and 8 bits)."""
    per = 8 // bits
    sh = torch.arange(per, device=b.device, dtype=torch.int32) * bits
    c = (b.int().unsqueeze(-1) >> sh) & ((1 << bits) - 1)
    return c.reshape(*b.shape[:-1], -1)


def _meta_sl(rec, ng, q8):
    """The stored (step, minimum) [n, ng, 2] float64 of metadata records
    rec [n, mb] (uint8) of one path: f16 [ng][2] float16 bits; q8 the
    token's record S, M (float16 bits at 0, 2), step codes sc[ng] (uint8) at
    4, minimum codes m[ng] (int8) at 4 + ng, s = sc S and l = m M (exact
    float32 products, qmla_kv_group_meta)."""
    if not q8:
        return rec.contiguous().view(torch.float16).double().view(-1, ng, 2)
    sm = rec[:, :4].contiguous().view(torch.float16).float()    # [n, 2]: S, M
    sc = rec[:, 4:4 + ng].float()
    m = rec[:, 4 + ng:4 + 2 * ng].contiguous().view(torch.int8).float()
    return torch.stack([sc * sm[:, :1], m * sm[:, 1:]], -1).double()


def page_fields(pool, cfg, slots):
    """The stored fields of the tokens at `slots` [n] (int64) of a quantized
    pool, read from its bytes (include/qmla/kvcache.h's page layout,
    independently of the kernels): content and RoPE codes [n, 512] / [n, 64]
    (int32) and the stored metadata as float64 [n, groups, 2] (step,
    minimum; f16 pages: the float16 fields, q8 pages: sc S and m M)."""
    G, cb, rb = cfg["group"], cfg["c_bits"], cfg["r_bits"]
    q8 = cfg.get("meta", "f16") == "q8"
    pages, off = slots // P.PAGE, slots % P.PAGE
    pg = pool[pages]                                            # [n, page_bytes]
    ng_c, ng_r = P.D_C // G, P.D_R // G
    mb_c, mb_r = P.meta_bytes(cfg, ng_c), P.meta_bytes(cfg, ng_r)
    cbt, rbt = ng_c * G * cb // 8, ng_r * G * rb // 8
    o_rc, o_mc = P.PAGE * cbt, P.PAGE * (cbt + rbt)
    o_mr = o_mc + P.PAGE * mb_c
    idx = off[:, None]
    ar = lambda n: torch.arange(n, device=pool.device)[None, :]  # noqa: E731
    c_codes = unpack_codes(pg.gather(1, idx * cbt + ar(cbt)), cb)
    r_codes = unpack_codes(pg.gather(1, o_rc + idx * rbt + ar(rbt)), rb)
    mc = pg.gather(1, o_mc + idx * mb_c + ar(mb_c))
    mr = pg.gather(1, o_mr + idx * mb_r + ar(mb_r))
    return c_codes, r_codes, _meta_sl(mc, ng_c, q8), _meta_sl(mr, ng_r, q8)


def page_values(pool, cfg, slots):
    """The values fmaf(q, s, l) (one rounding to float32, given as float64)
    of the tokens at `slots` [n] of a quantized pool: [n, 576]; the values
    the C4R4 / C2R4 kernels attend to (docs/decode.md)."""
    G = cfg["group"]
    c_codes, r_codes, mc, mr = page_fields(pool, cfg, slots)
    c = c_codes.double().view(-1, P.D_C // G, G) * mc[..., :1] + mc[..., 1:]
    r = r_codes.double().view(-1, P.D_R // G, G) * mr[..., :1] + mr[..., 1:]
    return torch.cat([c.reshape(-1, P.D_C), r.reshape(-1, P.D_R)], 1).float().double()


class _LayerPages:
    def __init__(self, cache, device):
        c, B = cache.cfg, cache.batch
        self.pool = torch.zeros((cache.n_pages, P.page_bytes(c)), dtype=torch.uint8, device=device)
        none = torch.empty(0, dtype=torch.bfloat16, device=device)     # absent: empty
        self.sink = (torch.zeros((B, c["sink"], P.D), dtype=torch.bfloat16, device=device)
                     if c["sink"] and c["c_bits"] != 16 else none)
        self.window = (torch.zeros((B, c["window"], P.D), dtype=torch.bfloat16, device=device)
                       if c["window"] and c["c_bits"] != 16 else none)
        self.ws = torch.empty(16, dtype=torch.uint8, device=device)
        cache.ops.kv_write_ws_init(self.ws)

    def nbytes(self):
        return sum(t.numel() * t.element_size() for t in (self.pool, self.sink, self.window))


class MLAPagedCache(Cache):
    """A packed, paged MLA cache for model.generate / model(...,
    past_key_values=cache). config: C4R4, C2R4, C8R8 or BF16; meta: f16 or
    q8 (q8: C4R4 / C2R4 under decode variants 0, 1, 3, 4, 7 only,
    qmla.paging.Q8_CONFIGS / Q8_VARIANTS; 314 bytes a token for C4R4 where
    f16 takes 324; anything else refused with a PagingError naming
    configuration, variant and metadata); sink / window: the BF16
    protection (kernels: any S, W >= 0; S = W = 0 quantizes every token, as
    the QDQ hook of experiments/eval/eval_hook.py does); n_pages: physical
    pages per layer (default batch_size * ceil(max_cache_len / 64));
    variant: the decode kernel variant (docs/decode.md; default 7, the
    library's default plan qmla_decode_cuda_plan: variant 7's shape
    heuristic for C4R4 / C2R4, variant 0 for BF16 and C8R8)."""

    def __init__(self, model, batch_size, max_cache_len, config="C4R4", meta="f16", sink=4,
                 window=128, n_pages=None, variant=None, device=None):
        self.cfg = P.parse_config(config, sink=sink, window=window, meta=meta)
        self.cfg_list = P.cfg_list(self.cfg)
        self.config_name = config
        self.meta = self.cfg["meta"]
        self.variant = DEFAULT_VARIANT if variant is None else int(variant)
        P.check_variant(self.cfg, self.variant, config)
        self.batch, self.max_len = int(batch_size), int(max_cache_len)
        self.ops = load_ops()
        self.mods = attach(model)
        n_layers = max(m.layer_idx for m in self.mods) + 1
        max_pages = -(-self.max_len // P.PAGE)
        self.n_pages = int(n_pages) if n_pages else self.batch * max_pages
        self.tables = P.BlockTables(self.batch, self.max_len, P.PagePool(self.n_pages))
        self.lengths = {}
        self._pages = {}
        self._dims = {}
        self._plans = {}
        self._dws = None
        self._bt = None
        self._reserved = 0          # every sequence's block-table rows cover this length
        self._idx = None            # (key, slot, seq, pos, seq_len) of the last write (_index)
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self._bt = torch.zeros((self.batch, self.tables.max_pages), dtype=torch.int32,
                               device=self.device)
        super().__init__(layers=[_PagedLayer(self, i) for i in range(n_layers)])
        for m in self.mods:
            self._pages[m.layer_idx] = _LayerPages(self, self.device)
        self._first_layer = min(self._pages)

    # ---- Cache API
    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        if layer_idx not in self._pages:
            raise ValueError(f"MLAPagedCache: layer {layer_idx} is not an MLA layer of the model")
        _ACTIVE[0] = (self, layer_idx)
        return key_states, value_states

    def reset(self):
        for s in range(self.batch):
            self.tables.release(s)
        self.lengths = {}
        self._bt.zero_()
        self._reserved = 0
        self._idx = None

    # ---- bookkeeping
    def nbytes(self):
        """Device bytes of the pools, protection rows, block table and plans' workspace."""
        n = sum(p.nbytes() for p in self._pages.values()) + self._bt.numel() * 4
        return n + (self._dws.numel() if self._dws is not None else 0)

    def _reserve(self, new_len):
        """Pages and device block-table rows for new_len tokens of every
        sequence, all or nothing (qmla.paging.reserve): when the pool cannot
        hold them or the upload fails, the host tables, the device table and
        the kept index tensors stay as they were and the error goes on."""
        if new_len <= self._reserved:       # the common case: no Python loop per layer
            return
        if P.reserve(self.tables, new_len, self._upload_rows):
            self._idx = None
        self._reserved = min(self.tables.lengths)

    def _upload_rows(self, seqs, rows):
        """Block-table rows `rows` of sequences `seqs` into the device table
        (one copy to the device, then one indexed assignment: either fails
        before the table changes)."""
        r = torch.tensor(rows, dtype=torch.int32).to(self.device, non_blocking=False)
        self._bt[seqs] = r

    def _plan(self, B, s_q, H, new_len):
        cap = self.tables.max_pages * P.PAGE
        key = (B, s_q, H, P.plan_bucket_fine(new_len, cap))
        p = self._plans.get(key)
        if p is None:
            p = list(self.ops.decode_plan(self.cfg_list, B, s_q, H, key[3], self.variant))
            self._plans[key] = p
        if self._dws is None or self._dws.numel() < p[4]:
            self._dws = torch.empty(max(p[4], 16), dtype=torch.uint8, device=self.device)
        return p

    def _module_dims(self, module, H):
        d = self._dims.get(id(module))
        if d is None:
            d_n, d_r = module.qk_nope_head_dim, module.qk_rope_head_dim
            d_c, d_v = module.kv_lora_rank, module.v_head_dim
            if d_r != P.D_R:
                raise ValueError(f"MLAPagedCache: qk_rope_head_dim {d_r}: the packed cache "
                                 f"holds {P.D_R} RoPE channels")
            if d_c > P.D_C or d_c % 64:
                raise ValueError(f"MLAPagedCache: kv_lora_rank {d_c}: the packed cache holds at "
                                 f"most {P.D_C} content channels in groups of 64")
            w = module.kv_b_proj.weight.detach().float().view(H, d_n + d_v, d_c)
            d = dict(H=H, d_n=d_n, d_r=d_r, d_c=d_c, d_v=d_v, w_uk=w[:, :d_n].contiguous(),
                     w_uv=w[:, d_n:].contiguous())
            self._dims[id(module)] = d
        return d

    def write_rows(self, layer, rows):
        """Append rows [B, T, 576] ([c_kv ; k_rope], BF16 or float32) to
        `layer` without attention (benchmarks, tests). Returns the new length."""
        B, T, _ = rows.shape
        start = self.lengths.get(layer, 0)
        self._write(self._pages[layer], rows, start, start + T, layer)
        self.lengths[layer] = start + T
        return start + T

    def _index(self, B, T, start, new, layer):
        """The writer's index tensors (slot int64, seq, pos, seq_len int32) of
        positions start .. start+T-1 of every sequence. Every layer of one
        forward writes the same positions, so they are computed once, at the
        forward's first MLA layer, and reused by the others (before, each of
        a V2-Lite step's 27 layers launched about 10 small kernels for them).
        The first layer always computes them anew, so a forward, and a CUDA
        graph captured from one, never reads index tensors an earlier forward
        made. The block-table entries they read are those of the positions
        written, which do not change while the pages are held (_reserve drops
        the kept tensors whenever it changes a row, reset too)."""
        key = (B, T, start, new)
        if (layer is not None and layer != self._first_layer and self._idx is not None
                and self._idx[0] == key):
            return self._idx[1:]
        with _range("qmla.index"):
            dev = self.device
            pos = torch.arange(start, start + T, dtype=torch.int32, device=dev).repeat(B)
            seq = torch.arange(B, dtype=torch.int32, device=dev).repeat_interleave(T)
            slot = (self._bt[seq.long(), (pos // P.PAGE).long()].long() * P.PAGE
                    + (pos % P.PAGE).long())
            seq_len = torch.full((B,), new, dtype=torch.int32, device=dev)
        self._idx = (key, slot, seq, pos, seq_len)
        return slot, seq, pos, seq_len

    def _write(self, pg, rows, start, new, layer=None):
        B, T = rows.shape[0], rows.shape[1]
        self._reserve(new)
        slot, seq, pos, seq_len = self._index(B, T, start, new, layer)
        with _range("qmla.kv_write"):
            self.ops.kv_write(pg.pool, pg.sink, pg.window, pg.ws,
                              rows.reshape(B * T, P.D).contiguous(), slot, seq, pos, seq_len,
                              self.cfg_list)
        return seq_len

    def attends_rounded(self, B=1, s_q=1, H=16, length=None):
        """True when qmla::decode on this cache attends to BF16-rounded
        values BF16(fmaf(q, s, l)) for a call of that shape (B sequences,
        s_q query tokens each, H heads, sequences of `length` tokens;
        default: the cache's length), False when to fmaf(q, s, l) unrounded
        or to the BF16 rows themselves (BF16 pages). C8R8 rounds except
        under variants 9 and 10 (its default plan is variant 10's);
        C4R4 / C2R4 round under variants 2 and 5, and under variant 7 where
        its plan hands over to variant 2 (C4R4 f16 at several row tiles: s_q
        * H > 16; so a prefill piece may round where the decode steps of the
        same cache do not). q8 pages never round: variants 2 and 5 refuse
        them and variant 7 keeps a q8 plan on its own kernel (a prefill
        piece too). One call of qmla::decode, not a forward: a
        forward of T tokens runs pieces of at most 1024 / H tokens
        (qmla.paging.chunks); plan_rounded says it for the plans a run used."""
        if self.cfg["c_bits"] == 16:
            return False
        n = length if length is not None else max(self.lengths.values(), default=0)
        cap = self.tables.max_pages * P.PAGE
        p = self.ops.decode_plan(self.cfg_list, B, s_q, H, P.plan_bucket_fine(max(n, 1), cap),
                                 self.variant)
        return self.plan_rounded(p)

    def plan_rounded(self, plan):
        """attends_rounded for a plan of this cache (qmla::decode_plan's
        values: the variant that runs is plan[5])."""
        return variant_rounds(self.cfg, int(plan[5]))

    def decode_latent(self, layer, q, scale, seq_len=None):
        """qmla::decode of absorbed queries q [B, s_q, H, 576] (BF16) on
        `layer`'s pages (all sequences at the layer's length): the latent
        output [B, s_q, H, 512] BF16 and lse [B, s_q, H]."""
        B, s_q, H, _ = q.shape
        n = self.lengths.get(layer, 0)
        if seq_len is None:
            seq_len = torch.full((B,), n, dtype=torch.int32, device=self.device)
        pg = self._pages[layer]
        plan = self._plan(B, s_q, H, n)
        out = torch.empty((B, s_q, H, P.D_C), dtype=torch.bfloat16, device=self.device)
        lse = torch.empty((B, s_q, H), dtype=torch.float32, device=self.device)
        with _range("qmla.decode"):
            self.ops.decode(q.contiguous(), pg.pool, pg.sink, pg.window, self._bt, seq_len,
                            self._dws, out, lse, scale, self.cfg_list, plan)
        return out, lse

    def slots(self, length=None):
        """The slots [B, length] (int64, on the device) of positions 0 ..
        length-1 of every sequence (default: the cache's length)."""
        n = length if length is not None else max(self.tables.lengths)
        rows = [self.tables.slots(b, range(n)) for b in range(self.batch)]
        return torch.tensor(rows, dtype=torch.int64, device=self.device)

    def stored(self, layer, length=None):
        """What `layer` holds for positions 0 .. length-1 of every sequence,
        read back from the pool bytes: a dict with the values attention
        uses, 'values' [B, length, 576] float32 (BF16 pages: the BF16 rows;
        quantized pages: fmaf(q, s, l), page_values) and, for quantized
        pages, 'c_codes', 'r_codes', 'c_meta', 'r_meta' (page_fields), each
        [B, length, ...]. Positions a sink / window row serves are not
        substituted (sink = window = 0 stores every token in the pages)."""
        sl = self.slots(length)
        B, n = sl.shape
        pool = self._pages[layer].pool
        if self.cfg["c_bits"] == 16:
            flat = sl.reshape(-1)
            rows = pool.view(-1, P.PAGE, P.D * 2)[flat // P.PAGE, flat % P.PAGE]
            return {"values": rows.contiguous().view(torch.bfloat16).float().view(B, n, P.D)}
        flat = sl.reshape(-1)
        f = page_fields(pool, self.cfg, flat)
        out = {k: v.reshape(B, n, *v.shape[1:]) for k, v in
               zip(("c_codes", "r_codes", "c_meta", "r_meta"), f)}
        out["values"] = page_values(pool, self.cfg, flat).float().view(B, n, P.D)
        return out

    def check(self):
        """The writers' first failure since the last check (a non-finite value,
        a float16 metadata overflow) as a RuntimeError; synchronises."""
        for layer, pg in self._pages.items():
            msg = self.ops.kv_write_status(pg.ws, self.cfg_list)
            if msg:
                raise RuntimeError(f"MLAPagedCache layer {layer}: {msg}")

    # ---- one attention forward
    def _attend(self, module, query, key, scaling):
        B, H, T, _ = query.shape
        if B != self.batch:
            raise ValueError(f"MLAPagedCache: batch {B}, the cache was made for {self.batch}")
        d = self._module_dims(module, H)
        layer = module.layer_idx
        latent = _LATENT.pop(id(module), None)
        if latent is None or latent.numel() != B * T * d["d_c"]:
            raise RuntimeError(f"MLAPagedCache layer {layer}: no latent of {B} x {T} tokens for "
                               "this forward (kv_b_proj hook)")
        # transformers 5.17 hands kv_b_proj [B, 1, T, d_c] (earlier 5.x [B, T, d_c])
        latent = latent.reshape(B, T, d["d_c"])
        rdt = row_dtype(latent, key)
        pg = self._pages[layer]
        start = self.lengths.get(layer, 0)
        d_n, d_c = d["d_n"], d["d_c"]
        pad = P.D_C - d_c
        pieces = P.chunks(T, H)
        # the pages of all T tokens before the first piece is written: a pool
        # that cannot hold them refuses the forward at its first MLA layer with
        # nothing written (reserved piece by piece, a prefill of 3 pieces whose
        # third did not fit left this layer 2 pieces longer than the others)
        self._reserve(start + T)
        outs = []
        for s0, s1 in pieces:
            n = s1 - s0
            # [c_kv ; 0 ; k_rope] in one concatenation (the same rows as zeros()
            # and two slice assignments, two launches fewer)
            with _range("qmla.rows"):
                parts = [latent[:, s0:s1].to(rdt)]
                if pad:
                    parts.append(latent.new_zeros((B, n, pad), dtype=rdt))
                parts.append(key[:, 0, s0:s1, d_n:].to(rdt))
                rows = torch.cat(parts, -1)
            seq_len = self._write(pg, rows, start + s0, start + s1, layer)
            with _range("qmla.absorb"):
                # q_lat = W_UK^T q_nope in float32, rounded once to BF16 (as the
                # assignment into a BF16 tensor did), then [q_lat ; 0 ; q_rope]
                qn = query[:, :, s0:s1, :d_n].float()
                qs = [torch.einsum("bhtn,hnc->bthc", qn, d["w_uk"]).to(torch.bfloat16)]
                if pad:
                    qs.append(query.new_zeros((B, n, H, pad), dtype=torch.bfloat16))
                qs.append(query[:, :, s0:s1, d_n:].transpose(1, 2).to(torch.bfloat16))
                q = torch.cat(qs, -1)
            self.lengths[layer] = start + s1
            out, _ = self.decode_latent(layer, q, scaling, seq_len)
            outs.append(out)
        with _range("qmla.expand"):
            o = (outs[0] if len(outs) == 1 else torch.cat(outs, 1))[..., :d_c].float()
            return torch.einsum("bthc,hvc->bthv", o, d["w_uv"]).to(query.dtype)
