#!/usr/bin/env python3
"""experiments/serving/test_ops.py — the qmla:: torch operators on the GPU
(issue 21 item 1), on the accelerator machine (torch + libqmla.so built
with CUDA):

  python3 experiments/serving/test_ops.py [--out DIR]

For C4R4, C2R4, C8R8 (sink 4, window 16) and BF16, and C4R4 / C2R4 with q8
metadata (C4R4q8, C2R4q8: the f16 run's rows and page mapping; since
serving run 10), a batch of 3 sequences (lengths 200, 77, 1) over a
shuffled page mapping:
  * qmla::kv_write's pool bytes decoded here in torch (codes little-endian,
    float16 step and minimum: include/qmla/kvcache.h) give, for every token,
    exactly the library's CPU quantizer's values (qmla.qdq through ctypes,
    fmaf(q, s, l) rounded once to float32; q8: qmla.qdq with meta q8, the
    pages' records S, M, sc, m read as s = sc S, l = m M, and the values
    differ from the f16 pages'), and the sink / window rows hold
    the BF16 rows bit for bit; BF16 pages hold the rows;
  * the same rows as float32 (unrounded) through qmla::kv_write into a
    second cache: the values are qmla.qdq's of the float32 rows (and differ
    from the BF16 write's: the test tells the paths apart), sink / window
    rows and BF16 pages hold the rows rounded to nearest even;
  * qmla::decode for s_q = 1, 3 and 64 (1,024 query rows: a prefill piece
    of MLAPagedCache), H = 16, under variant 0 and under the default 7 (the
    plan's variant: C8R8 10, C4R4 f16 at s_q 3 variant 2), against a float64
    softmax attention on those values, rounded to BF16 or not as the plan's
    variant attends (qmla.torch.variant_rounds: C8R8 rounds except under 9
    and 10, C4R4 / C2R4 under 2 and 5; docs/decode.md), NMSE <= 1e-5 and
    |lse| <= 1e-4 (tests/cache/test_decode_cuda.c's bounds);
  * a CUDA graph capturing kv_write + decode, replayed on new inputs, gives
    exactly the eager result; no allocation by the caching allocator
    during eager calls;
  * every refusal (dtype, shape, stride, device, plan, workspace, missing
    protection rows, configuration; q8 metadata under variants 2 and 5, for
    C8R8 and BF16, on pages of the f16 size, a variant-2 plan on q8 pages)
    raises RuntimeError with a message naming the argument; a NaN row is
    reported by qmla::kv_write_status naming its token and group.
On qmla.torch.MLAPagedCache over a random 2-layer BF16 DeepseekV2 stack
(H 16, d_c 512; since serving run 8):
  * _reserve is all or nothing (qmla.paging.reserve): a write the pool
    cannot hold at a later sequence, and one whose device upload raises
    (injected), leave the host tables, the lengths, the device block table
    and the pages as they were; a prefill of 3 pieces beyond the pool is
    refused at the first layer with every layer at length 0 and no page
    written, and a prefill that fits then runs;
  * the premise of generate.py's per-position rounding: C4R4 variant 7's
    plan for a prefill piece of 8 x 16 query rows rounds (variant 2), its
    decode plan does not; C8R8's cache plans variant 10 (unrounded); C4R4
    q8's prefill piece stays on variant 7 (unrounded); MLAPagedCache
    refuses q8 for C8R8, BF16 and variants 2 and 8, naming configuration,
    variant and metadata;
  * qmla.paging.plan_bucket_fine: C4R4 (sink 4, window 128) at 5,000 and
    40,000 tokens (batch 2) and 20,000 (batch 8) of a 65,536-token cache,
    and C4R4 q8 at 40,000 (batch 2) and 20,000 (batch 8):
    decode with the cache's fine-bucket plan and with the power-of-two
    bucket's plan, each against a float64 attention over the values its own
    plan's variant attends to (rounded or not: MLAPagedCache.plan_rounded;
    the same bounds), the fine bucket below the power of two in every case,
    and both plans' kernel times (test_ops.json).
Exit 0 when every check passes. Random draws from seed 21.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
import qmla  # noqa: E402
import qmla.paging as P  # noqa: E402
import qmla.torch as qt  # noqa: E402

RES = []


def check(ok, what, detail=""):
    RES.append((what, bool(ok), detail))
    print("%s %s%s" % ("PASS" if ok else "FAIL", what, (": " + str(detail)) if detail else ""),
          flush=True)
    return ok


page_values = qt.page_values       # the pool reader (qmla.torch: include/qmla/kvcache.h layout)


def make_cache(cfg, B, n_pages, dev):
    pool = torch.zeros((n_pages, P.page_bytes(cfg)), dtype=torch.uint8, device=dev)
    none = torch.empty(0, dtype=torch.bfloat16, device=dev)
    sink = torch.zeros((B, cfg["sink"], P.D), dtype=torch.bfloat16, device=dev) if cfg["sink"] else none
    win = torch.zeros((B, cfg["window"], P.D), dtype=torch.bfloat16, device=dev) if cfg["window"] else none
    return pool, sink, win


def qdq_ref(x, cfg):
    """qmla.qdq (the CPU quantizer: the C twin's quantizer) of float32 rows x
    [n, 576], both paths, under the cache's metadata (f16 or q8), as float64."""
    x, meta = x.numpy(), cfg.get("meta", "f16")
    return torch.from_numpy(np.concatenate([
        qmla.qdq(np.ascontiguousarray(x[:, :P.D_C]), bits=cfg["c_bits"], group=64, meta=meta),
        qmla.qdq(np.ascontiguousarray(x[:, P.D_C:]), bits=cfg["r_bits"], group=64, meta=meta)],
        1)).double()


def bf16_pages(pool, slot_t):
    """The BF16 rows stored at slot_t in a BF16 pool."""
    got = torch.stack([pool[s // 64, (s % 64) * 1152:(s % 64) * 1152 + 1152] for s in slot_t.tolist()])
    return got.cpu().view(torch.bfloat16)


def protection_rows_equal(sink, win, cfg, lens, rows):
    """(sink ok, window ok): every sink row and window ring row of the
    sequences of lengths `lens` equals its BF16 row of `rows` bit for bit."""
    off = 0
    ok_s = ok_w = True
    for b, L in enumerate(lens):
        xb = rows[off:off + L]
        for t in range(min(cfg["sink"], L)):
            ok_s &= torch.equal(sink[b, t].cpu(), xb[t])
        for t in range(max(0, L - cfg["window"]), L):
            ok_w &= torch.equal(win[b, t % cfg["window"]].cpu(), xb[t])
        off += L
    return ok_s, ok_w


def run_config(name, ops, dev, gen, f16=None):
    """One configuration's checks (name: C4R4, C2R4, C8R8, BF16, or C4R4q8 /
    C2R4q8 for q8 metadata). f16: what the f16 run of the same configuration
    returned: a q8 run writes the same rows over the same page mapping and
    checks that its values differ from the f16 pages' (the reference tells
    the two metadata formats apart)."""
    base, meta = P.split_cache_name(name)
    cfg = P.parse_config(base, sink=4, window=16, meta=meta)
    cl = P.cfg_list(cfg)
    check(pool_width_ok(cfg), f"{name}: page bytes {P.page_bytes(cfg)} (include/qmla/kvcache.h)")
    lens = [200, 77, 1]
    B, H = len(lens), 16
    max_pages = 4
    n_pages = 16
    perm = f16["perm"] if f16 else torch.randperm(n_pages, generator=gen).tolist()
    bt = torch.tensor([perm[i * max_pages:(i + 1) * max_pages] for i in range(B)], dtype=torch.int32)
    pool, sink, win = make_cache(cfg, B, n_pages, dev)
    ws = torch.empty(16, dtype=torch.uint8, device=dev)
    ops.kv_write_ws_init(ws)
    # rows: a latent-like spread per channel, a few large channels
    rows, slot, seq, pos = [], [], [], []
    for b, L in enumerate(lens):
        if f16:
            x = f16["rows"][b]
        else:
            x = torch.randn((L, P.D), generator=gen) * (0.5 + torch.rand(P.D, generator=gen) * 2)
            x[:, 7] *= 8
        rows.append(x)
        for t in range(L):
            slot.append(int(bt[b, t // 64]) * 64 + t % 64)
            seq.append(b)
            pos.append(t)
    kv32 = torch.cat(rows)
    kv = kv32.to(torch.bfloat16)
    slot_t = torch.tensor(slot, dtype=torch.int64)
    kv_d, slot_d = kv.to(dev), slot_t.to(dev)
    seq_d = torch.tensor(seq, dtype=torch.int32, device=dev)
    pos_d = torch.tensor(pos, dtype=torch.int32, device=dev)
    len_d = torch.tensor(lens, dtype=torch.int32, device=dev)
    m0 = torch.cuda.memory_allocated(dev)
    ops.kv_write(pool, sink, win, ws, kv_d, slot_d, seq_d, pos_d, len_d, cl)
    check(torch.cuda.memory_allocated(dev) == m0, f"{name}: kv_write allocates nothing")
    check(ops.kv_write_status(ws, cl) == "", f"{name}: writer status clean")
    # pool contents against the library quantizer
    kvf = kv.float()
    if cfg["c_bits"] == 16:
        check(torch.equal(bf16_pages(pool, slot_t), kv), f"{name}: BF16 pages hold the rows bit for bit")
        vals = kvf.double()
    else:
        ref = qdq_ref(kvf, cfg)
        vals = page_values(pool, cfg, slot_d).cpu()
        check(torch.equal(vals, ref), f"{name}: pool values == qmla.qdq (CPU quantizer, {meta} "
              "metadata) bit for bit", "max |d| %.3g" % float((vals - ref).abs().max()))
        if f16 is not None:
            moved = int((vals != f16["vals"]).any(1).sum())
            check(moved > 0, f"{name}: the values differ from the f16 write's (the check tells "
                  "the metadata formats apart)", f"{moved} of {vals.shape[0]} tokens differ")
        ok_s, ok_w = protection_rows_equal(sink, win, cfg, lens, kv)
        check(ok_s, f"{name}: sink rows bit for bit")
        check(ok_w, f"{name}: window ring rows bit for bit")
    f32_rows(name, ops, dev, cfg, cl, B, n_pages, kv32, slot_t, slot_d, seq_d, pos_d, len_d, lens,
             vals)
    # the values attention uses per token: fmaf(q, s, l) unrounded or rounded to
    # BF16, as the plan's variant attends (qmla.torch.variant_rounds)
    def kref_of(rounded):
        kref, off = [], 0
        for b, L in enumerate(lens):
            v = vals[off:off + L].clone()
            if cfg["c_bits"] != 16:
                if rounded:
                    v = v.float().to(torch.bfloat16).double()
                for t in range(L):
                    if P.protected(cfg, t, L):
                        v[t] = kvf[off + t].double()
            kref.append(v)
            off += L
        return kref
    bt_d = bt.to(dev)
    scale = 1.0 / math.sqrt(192.0)
    # variant 0, and the cache's default 7 (C8R8: variant 10's plan, unrounded
    # since decode run 13; C4R4 f16 at s_q 3: 3 sequences x 3 row tiles hand
    # over to variant 2, rounded; q8 pages stay on variant 7)
    for var, s_q in ((0, 1), (0, 3), (0, 64), (7, 1), (7, 3), (7, 64)):
        q = (torch.randn((B, s_q, H, P.D), generator=gen)).to(torch.bfloat16)
        plan = list(ops.decode_plan(cl, B, s_q, H, max(lens), var))
        rounded = qt.variant_rounds(cfg, int(plan[5]))
        kref = kref_of(rounded)
        dws = torch.empty(plan[4], dtype=torch.uint8, device=dev)
        out = torch.empty((B, s_q, H, P.D_C), dtype=torch.bfloat16, device=dev)
        lse = torch.empty((B, s_q, H), dtype=torch.float32, device=dev)
        qd = q.to(dev)
        m0 = torch.cuda.memory_allocated(dev)
        ops.decode(qd, pool, sink, win, bt_d, len_d, dws, out, lse, scale, cl, plan)
        tag = f"{name} v{var} (plan v{plan[5]}, {'rounded' if rounded else 'unrounded'}) s_q {s_q}"
        check(torch.cuda.memory_allocated(dev) == m0, f"{tag}: decode allocates nothing")
        num = den = 0.0
        lerr = 0.0
        for b, L in enumerate(lens):
            K = kref[b]
            for i in range(s_q):
                vis = L - s_q + i + 1
                if vis <= 0:
                    continue
                z = scale * (q[b, i].double() @ K[:vis].T)             # [H, vis]
                l_ref = torch.logsumexp(z, -1)
                o_ref = torch.softmax(z, -1) @ K[:vis, :P.D_C]
                o = out[b, i].double().cpu()
                num += float(((o - o_ref) ** 2).sum())
                den += float((o_ref ** 2).sum())
                lerr = max(lerr, float((lse[b, i].double().cpu() - l_ref).abs().max()))
        nmse = num / den
        check(nmse <= 1e-5 and lerr <= 1e-4, f"{tag}: decode vs float64 attention",
              "nmse %.3e lse err %.3e" % (nmse, lerr))
        DECODE_NMSE.append(dict(config=name, variant=var, plan_variant=int(plan[5]), s_q=s_q,
                                rounded=rounded, nmse=nmse, lse_err=lerr))
    # graph capture of write + decode, replayed on new inputs
    s_q = 1
    plan = list(ops.decode_plan(cl, B, s_q, H, 256, 0))
    dws = torch.empty(plan[4], dtype=torch.uint8, device=dev)
    g_q = torch.randn((B, s_q, H, P.D), generator=gen).to(torch.bfloat16).to(dev)
    g_kv = torch.randn((B, P.D), generator=gen).to(torch.bfloat16).to(dev)
    new_len = torch.tensor([L + 1 for L in lens], dtype=torch.int32, device=dev)
    g_slot = torch.tensor([int(bt[b, L // 64]) * 64 + L % 64 for b, L in enumerate(lens)],
                          dtype=torch.int64, device=dev)
    g_seq = torch.arange(B, dtype=torch.int32, device=dev)
    g_pos = torch.tensor(lens, dtype=torch.int32, device=dev)
    g_out = torch.empty((B, s_q, H, P.D_C), dtype=torch.bfloat16, device=dev)
    g_lse = torch.empty((B, s_q, H), dtype=torch.float32, device=dev)
    pool0 = pool.clone()
    sink0, win0 = sink.clone(), win.clone()

    def step():
        ops.kv_write(pool, sink, win, ws, g_kv, g_slot, g_seq, g_pos, new_len, cl)
        ops.decode(g_q, pool, sink, win, bt_d, new_len, dws, g_out, g_lse, scale, cl, plan)

    s = torch.cuda.Stream(dev)
    s.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(s):
        step()                                         # warm-up (attributes set)
    torch.cuda.current_stream(dev).wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            step()
        captured = True
    except Exception as e:  # noqa: BLE001
        captured = check(False, f"{name}: CUDA graph capture of kv_write + decode", repr(e))
    if captured:
        def restore():
            pool.copy_(pool0)
            sink.copy_(sink0)
            win.copy_(win0)
        same = True
        for trial in range(3):
            g_q.copy_(torch.randn((B, s_q, H, P.D), generator=gen).to(torch.bfloat16))
            g_kv.copy_(torch.randn((B, P.D), generator=gen).to(torch.bfloat16))
            restore()
            graph.replay()
            torch.cuda.synchronize(dev)
            o_g, l_g, p_g = g_out.clone(), g_lse.clone(), pool.clone()
            restore()
            step()
            torch.cuda.synchronize(dev)
            same &= torch.equal(o_g, g_out) and torch.equal(l_g, g_lse) and torch.equal(p_g, pool)
        check(same, f"{name}: CUDA graph replay == eager (3 new inputs, out, lse, pool bit for bit)")
    return dict(pool=pool, sink=sink, win=win, ws=ws, kv=kv_d, slot=slot_d, seq=seq_d, pos=pos_d,
                len=len_d, bt=bt_d, cl=cl, cfg=cfg, H=H, B=B, vals=vals, rows=rows, perm=perm)


DECODE_NMSE = []


def pool_width_ok(cfg):
    """The page bytes the operators expect (qmla_kv_layout_of) are
    qmla.paging's: C4R4 20736 / 20096 (f16 / q8), C2R4 12544 / 11904, C8R8
    39168, BF16 73728 (docs/decode.md)."""
    want = {("C4R4", "f16"): 20736, ("C4R4", "q8"): 20096, ("C2R4", "f16"): 12544,
            ("C2R4", "q8"): 11904, ("C8R8", "f16"): 39168, ("BF16", "f16"): 73728}
    name = "BF16" if cfg["c_bits"] == 16 else f"C{cfg['c_bits']}R{cfg['r_bits']}"
    return P.page_bytes(cfg) == want[(name, cfg["meta"])]


def f32_rows(name, ops, dev, cfg, cl, B, n_pages, kv32, slot_t, slot_d, seq_d, pos_d, len_d, lens,
             vals16):
    """qmla::kv_write of float32 rows into a fresh cache, against qmla.qdq
    of the float32 rows; vals16: the values of the BF16 write of the same
    rows rounded (they must differ)."""
    pool, sink, win = make_cache(cfg, B, n_pages, dev)
    ws = torch.empty(16, dtype=torch.uint8, device=dev)
    ops.kv_write_ws_init(ws)
    kv_d = kv32.to(dev)
    m0 = torch.cuda.memory_allocated(dev)
    ops.kv_write(pool, sink, win, ws, kv_d, slot_d, seq_d, pos_d, len_d, cl)
    check(torch.cuda.memory_allocated(dev) == m0, f"{name} float32 rows: kv_write allocates nothing")
    check(ops.kv_write_status(ws, cl) == "", f"{name} float32 rows: writer status clean")
    kvr = kv32.to(torch.bfloat16)                   # the rounded rows (BF16 copies)
    if cfg["c_bits"] == 16:
        check(torch.equal(bf16_pages(pool, slot_t), kvr),
              f"{name} float32 rows: BF16 pages hold the rows rounded to nearest even")
        return
    ref = qdq_ref(kv32, cfg)
    vals = page_values(pool, cfg, slot_d).cpu()
    check(torch.equal(vals, ref), f"{name} float32 rows: pool values == qmla.qdq of the float32 "
          "rows bit for bit", "max |d| %.3g" % float((vals - ref).abs().max()))
    moved = int((vals != vals16).any(1).sum())
    check(moved > 0, f"{name} float32 rows: the BF16-rounded write differs (the check "
          "discriminates)", f"{moved} of {vals.shape[0]} tokens differ")
    ok_s, ok_w = protection_rows_equal(sink, win, cfg, lens, kvr)
    check(ok_s and ok_w, f"{name} float32 rows: sink and window rows == the rows rounded to BF16")


def expect_error(what, fn, needle):
    print("trying refusal:", what, flush=True)
    try:
        fn()
    except RuntimeError as e:
        msg = str(e).split("\n")[0]
        return check(needle in str(e), f"refusal: {what}", msg[:160])
    return check(False, f"refusal: {what}", "no error raised")


def refusals(ops, c, dev):
    pool, sink, win, ws = c["pool"], c["sink"], c["win"], c["ws"]
    kv, slot, seq, pos, ln, bt, cl, H, B = (c[k] for k in ("kv", "slot", "seq", "pos", "len", "bt",
                                                         "cl", "H", "B"))
    W = lambda **o: ops.kv_write(o.get("pool", pool), o.get("sink", sink), o.get("win", win),  # noqa: E731
                                  o.get("ws", ws), o.get("kv", kv), o.get("slot", slot),
                                  o.get("seq", seq), o.get("pos", pos), o.get("len", ln),
                                  o.get("cl", cl))
    expect_error("kv float16", lambda: W(kv=kv.half()),
                 "kv: expected dtype BFloat16 or Float, found Half")
    expect_error("kv float64", lambda: W(kv=kv.double()),
                 "kv: expected dtype BFloat16 or Float, found Double")
    expect_error("kv float32 strided", lambda: W(kv=torch.cat([kv, kv], 1).float()[:, ::2]),
                 "contiguous")
    expect_error("kv width 512", lambda: W(kv=kv[:, :512].contiguous()), "kv: expected shape")
    expect_error("kv strided", lambda: W(kv=torch.cat([kv, kv], 1)[:, ::2]), "contiguous")
    expect_error("kv on the CPU", lambda: W(kv=kv.cpu()), "expected a CUDA tensor")
    expect_error("slot int32", lambda: W(slot=slot.int()), "slot: expected dtype")
    expect_error("slot short", lambda: W(slot=slot[:-1].contiguous()), "slot: expected shape")
    expect_error("pool of other pages", lambda: W(pool=torch.zeros((4, 100), dtype=torch.uint8,
                                                                   device=dev)), "pool: expected shape")
    expect_error("window missing", lambda: W(win=win[:0]), "window: the configuration keeps")
    expect_error("window of 8 rows", lambda: W(win=win[:, :8].contiguous()), "window: expected shape")
    expect_error("ws 8 bytes", lambda: W(ws=ws[:8]), "ws: expected at least")
    expect_error("content bits 3", lambda: W(cl=[3, 4, 64, 4, 16]), "content bits")
    expect_error("cfg of 4 values", lambda: W(cl=[4, 4, 64, 4]), "cfg: expected")
    expect_error("all on the CPU", lambda: ops.kv_write(pool.cpu(), sink.cpu(), win.cpu(), ws.cpu(),
                                                       kv.cpu(), slot.cpu(), seq.cpu(), pos.cpu(),
                                                       ln.cpu(), cl), "CPU")
    plan = list(ops.decode_plan(cl, B, 1, H, 256, 0))
    dws = torch.empty(plan[4], dtype=torch.uint8, device=dev)
    q = torch.zeros((B, 1, H, P.D), dtype=torch.bfloat16, device=dev)
    out = torch.empty((B, 1, H, P.D_C), dtype=torch.bfloat16, device=dev)
    lse = torch.empty((B, 1, H), dtype=torch.float32, device=dev)
    Dd = lambda **o: ops.decode(o.get("q", q), pool, sink, win, o.get("bt", bt), ln,  # noqa: E731
                                 o.get("ws", dws), o.get("out", out), o.get("lse", lse), 0.1,
                                 cl, o.get("plan", plan))
    Dd()
    check(True, "decode with valid arguments runs")
    expect_error("q float16", lambda: Dd(q=q.half()), "q: expected dtype")
    q2 = torch.zeros((B, 1, H, 2 * P.D), dtype=torch.bfloat16, device=dev)[..., ::2]
    expect_error("q strided", lambda: Dd(q=q2), "contiguous")
    expect_error("q heads 8 vs plan 16", lambda: Dd(q=q[:, :, :8].contiguous()), "plan was made for")
    expect_error("plan of 3 values", lambda: Dd(plan=plan[:3]), "plan: expected")
    expect_error("workspace short", lambda: Dd(ws=dws[:16]), "ws: the plan needs")
    expect_error("out float32", lambda: Dd(out=out.float()), "out: expected dtype")
    expect_error("lse shape", lambda: Dd(lse=lse[:, :, :4].contiguous()), "lse: expected shape")
    expect_error("block table short", lambda: Dd(bt=bt[:, :2].contiguous()), "do not cover")
    expect_error("block table int64", lambda: Dd(bt=bt.long()), "block_table: expected dtype")
    expect_error("plan s_q * H above 1024", lambda: ops.decode_plan(cl, 1, 65, 16, 64, 0), "above 1024")
    # one past the last variant (kernels/decode_cuda.h QMLA_DECODE_VARIANTS, 11 since
    # decode run 13 added 9 and 10: "variant 9" was this check's value until
    # serving run 10, where it no longer refused and the check failed)
    expect_error("plan variant 11", lambda: ops.decode_plan(cl, 1, 1, 16, 64, 11), "variant 11")
    # q8 metadata (cfg[5] = 2): the refusals name configuration, variant and metadata
    q8 = P.cfg_list(P.parse_config("C4R4", sink=4, window=16, meta="q8"))
    expect_error("q8 plan variant 2", lambda: ops.decode_plan(q8, 1, 1, 16, 64, 2), "q8 metadata")
    expect_error("q8 plan variant 5", lambda: ops.decode_plan(q8, 1, 1, 16, 64, 5), "variant 5")
    expect_error("q8 plan C8R8", lambda: ops.decode_plan([8, 8, 64, 4, 16, 2], 1, 1, 16, 64, 0),
                 "q8 metadata")
    expect_error("q8 pages of f16 size", lambda: W(cl=q8), "pool: expected shape")
    plan2 = list(ops.decode_plan(cl, B, 1, H, 256, 2))      # an f16 plan of variant 2
    qpool = torch.zeros((pool.shape[0], P.page_bytes(P.parse_config("C4R4", meta="q8"))),
                        dtype=torch.uint8, device=dev)
    dws2 = torch.empty(max(plan2[4], 16), dtype=torch.uint8, device=dev)
    expect_error("decode of q8 pages with a variant-2 plan",
                 lambda: ops.decode(q, qpool, sink, win, bt, ln, dws2, out, lse, 0.1, q8, plan2),
                 "q8 metadata")
    expect_error("cfg meta 1 (f32)", lambda: W(cl=cl[:5] + [1]), "metadata: expected f16")
    expect_error("BF16 cfg with q8", lambda: ops.decode_plan([16, 16, 64, 0, 0, 2], 1, 1, 16, 64, 0),
                 "stores no metadata")
    expect_error("cfg of 7 values", lambda: W(cl=cl[:5] + [0, 0]), "cfg: expected")
    # a NaN row: reported by the status call, naming token and group
    bad = kv.clone()
    bad[5, 130] = float("nan")
    W(kv=bad)
    msg = ops.kv_write_status(ws, cl)
    check("non-finite" in msg and "token 5" in msg and "group 2" in msg, "NaN row reported", msg)
    check(ops.kv_write_status(ws, cl) == "", "status re-armed after a report")


def small_model(dev):
    """A random 2-layer BF16 DeepseekV2 stack (H 16, d_c 512, d_r 64; MLP
    identity) for the MLAPagedCache checks: bench_serving.make_model, small."""
    from bench_serving import make_model
    return make_model(dev, layers=2, hidden=128, heads=16, d_n=32, d_v=32, vocab=64)


def host_state(cache):
    t = cache.tables
    return ([list(p) for p in t.pages], list(t.lengths), t.pool.free, dict(cache.lengths),
            cache._reserved)


def latent_rows(B, T, gen, dev):
    x = torch.randn((B, T, P.D), generator=gen) * (0.5 + torch.rand(P.D, generator=gen) * 2)
    return x.to(torch.bfloat16).to(dev)


def reserve_checks(model, dev, gen):
    """MLAPagedCache._reserve all or nothing (qmla.paging.reserve), failures
    injected: the pool runs out for a later sequence, the device upload
    raises, and a prefill of 3 pieces that does not fit."""
    layers = sorted(m.layer_idx for m in qt.attach(model))
    cache = qt.MLAPagedCache(model, batch_size=3, max_cache_len=256, config="C4R4", n_pages=7)
    for L in layers:
        cache.write_rows(L, latent_rows(3, 70, gen, dev))          # 2 pages each: 6 of 7
    before, bt0 = host_state(cache), cache._bt.clone()
    pools0 = [cache._pages[L].pool.clone() for L in layers]
    try:
        cache.write_rows(layers[0], latent_rows(3, 64, gen, dev))  # 3 more pages, 1 free
        check(False, "cache: a write beyond the pool accepted")
    except P.PagingError as e:
        check("nothing reserved" in str(e), "cache: pool exhausted at a later sequence refused", e)
    check(host_state(cache) == before and torch.equal(cache._bt, bt0),
          "cache: pool exhausted: host tables, lengths, device block table unchanged")
    check(all(torch.equal(cache._pages[L].pool, p0) for L, p0 in zip(layers, pools0)),
          "cache: pool exhausted: no page written")
    check(cache._bt.cpu().tolist() == cache.tables.table(), "cache: device table == host table")
    # the upload fails (injected): growth undone
    cache2 = qt.MLAPagedCache(model, batch_size=3, max_cache_len=256, config="C4R4", n_pages=12)
    for L in layers:
        cache2.write_rows(L, latent_rows(3, 70, gen, dev))
    before, bt0 = host_state(cache2), cache2._bt.clone()

    def fail(seqs, rows):
        raise RuntimeError("injected upload failure")
    cache2._upload_rows = fail
    try:
        cache2.write_rows(layers[0], latent_rows(3, 64, gen, dev))
        check(False, "cache: a failed upload swallowed")
    except RuntimeError as e:
        check("injected" in str(e), "cache: the upload's error goes on", e)
    check(host_state(cache2) == before and torch.equal(cache2._bt, bt0),
          "cache: failed upload: host tables, lengths, device block table unchanged")
    del cache2._upload_rows
    for L in layers:
        cache2.write_rows(L, latent_rows(3, 64, gen, dev))
    check(cache2._bt.cpu().tolist() == cache2.tables.table() and cache2.tables.pool.free == 3,
          "cache: after the failed upload the same write succeeds, device table == host table")
    # a prefill of 130 tokens (pieces 64, 64, 2 at H 16) into a pool of 128 tokens:
    # refused at the first layer with nothing written (piece by piece, layer 0 took 2)
    cache3 = qt.MLAPagedCache(model, batch_size=1, max_cache_len=256, config="C4R4", n_pages=2)
    ids = torch.randint(0, 64, (1, 130), generator=gen).to(dev)
    try:
        with torch.no_grad():
            model(input_ids=ids, past_key_values=cache3, use_cache=True)
        check(False, "cache: a prefill beyond the pool accepted")
    except P.PagingError as e:
        check("nothing reserved" in str(e), "cache: prefill beyond the pool refused", e)
    check(all(cache3.lengths.get(L, 0) == 0 for L in layers) and cache3.tables.lengths == [0]
          and cache3.tables.pool.free == 2 and cache3.get_seq_length() == 0
          and all(int(cache3._pages[L].pool.count_nonzero()) == 0 for L in layers),
          "cache: refused prefill: every layer at length 0, no page written",
          {L: cache3.lengths.get(L, 0) for L in layers})
    with torch.no_grad():
        model(input_ids=ids[:, :100], past_key_values=cache3, use_cache=True)
    check(all(cache3.lengths[L] == 100 for L in layers) and cache3.get_seq_length() == 100,
          "cache: then a prefill of 100 tokens fits, every layer at 100")
    cache3.check()


def rounding_checks(model):
    """The premise of generate.py's per-position rounding: a C4R4 prefill
    piece of several row tiles can plan variant 2 (rounded) where the decode
    steps of the same cache plan variant 7 (unrounded)."""
    c4 = qt.MLAPagedCache(model, batch_size=1, max_cache_len=256, config="C4R4", sink=0, window=0)
    pre, dec = c4.attends_rounded(1, 8, 16, 64), c4.attends_rounded(1, 1, 16, 64)
    check(pre and not dec, "C4R4 v7: prefill 1 x 8 x H 16 rounds (variant 2), decode does not",
          (pre, dec))
    c8 = qt.MLAPagedCache(model, batch_size=1, max_cache_len=256, config="C8R8")
    c8v0 = qt.MLAPagedCache(model, batch_size=1, max_cache_len=256, config="C8R8", variant=0)
    bf = qt.MLAPagedCache(model, batch_size=1, max_cache_len=256, config="BF16")
    r8, r8v0 = c8.attends_rounded(1, 1, 16, 64), c8v0.attends_rounded(1, 1, 16, 64)
    check(not r8 and r8v0 and not bf.attends_rounded(1, 8, 16, 64),
          "C8R8's default (variant 10) does not round, its variant 0 does, BF16 pages never",
          (r8, r8v0))
    p8 = c8._plan(1, 1, 16, 64)
    check(int(p8[5]) == 10 and not c8.plan_rounded(p8), "C8R8's cache plans variant 10", p8[:7])
    # q8 metadata: variant 7 keeps a q8 prefill piece on its own kernel (no
    # hand-over to variant 2, which reads f16 pages only), so it never rounds
    q8 = qt.MLAPagedCache(model, batch_size=1, max_cache_len=256, config="C4R4", meta="q8",
                          sink=0, window=0)
    pq = q8._plan(1, 8, 16, 64)
    check(int(pq[5]) == 7 and not q8.plan_rounded(pq) and not q8.attends_rounded(1, 1, 16, 64),
          "C4R4 q8 v7: prefill 1 x 8 x H 16 plans variant 7 (unrounded), decode too", pq[:7])
    check(q8._pages[min(q8._pages)].pool.shape[1] == 20096 and q8.cfg_list[5] == 2,
          "C4R4 q8 cache: pages of 20096 bytes, cfg meta 2")
    for kw, needles in ((dict(config="C8R8", meta="q8"), ("C8R8", "q8")),
                        (dict(config="BF16", meta="q8"), ("BF16", "q8")),
                        (dict(config="C4R4", meta="q8", variant=2), ("C4R4", "q8", "variant 2")),
                        (dict(config="C2R4", meta="q8", variant=8), ("C2R4", "q8", "variant 8"))):
        try:
            qt.MLAPagedCache(model, batch_size=1, max_cache_len=256, **kw)
            check(False, f"MLAPagedCache {kw} accepted")
        except P.PagingError as e:
            check(all(n in str(e) for n in needles), f"MLAPagedCache {kw} refused", str(e)[:160])


def fine_bucket_checks(model, ops, dev, gen, out):
    """qmla.paging.plan_bucket_fine on the device: a C4R4 cache (sink 4,
    window 128) of max_cache_len 65536 at lengths beyond 4096, decode
    through MLAPagedCache (its plan for the fine bucket) against a float64
    attention over the values its plan attends to (rounded or not:
    plan_rounded of that plan), and the same batch under the power-of-two
    bucket's plan against its own plan's reference: both correct, the fine
    bucket below the power of two in every case; their plans and kernel
    times (CUDA events, median of 50, recorded, not asserted) and each
    output's NMSE against the other rounding's reference (a diagnostic:
    whether the bound tells the two apart)."""
    H, scale = 16, 1.0 / math.sqrt(96.0)
    rows_out = []
    for B, L, meta in ((2, 5000, "f16"), (2, 40000, "f16"), (8, 20000, "f16"), (2, 40000, "q8"),
                       (8, 20000, "q8")):
        cache = qt.MLAPagedCache(model, batch_size=B, max_cache_len=65536, config="C4R4",
                                 meta=meta)
        layer = min(cache._pages)
        rows = latent_rows(B, L, gen, dev)
        cache.write_rows(layer, rows)
        cache.check()
        cap = cache.tables.max_pages * P.PAGE
        fine, pow2 = P.plan_bucket_fine(L, cap), P.plan_bucket(L, cap)
        q = (torch.randn((B, 1, H, P.D), generator=gen)).to(torch.bfloat16).to(dev)
        o_fine, lse_fine = cache.decode_latent(layer, q, scale)
        plan_f = cache._plan(B, 1, H, L)
        plan_p = list(ops.decode_plan(cache.cfg_list, B, 1, H, pow2, cache.variant))
        dws = torch.empty(max(plan_p[4], 16), dtype=torch.uint8, device=dev)
        seq_len = torch.full((B,), L, dtype=torch.int32, device=dev)
        pg = cache._pages[layer]
        o_pow = torch.empty_like(o_fine)
        lse_pow = torch.empty_like(lse_fine)

        def run(plan, ws, o, lse, bt=cache._bt, cl=cache.cfg_list):
            ops.decode(q, pg.pool, pg.sink, pg.window, bt, seq_len, ws, o, lse, scale, cl, plan)
        run(plan_p, dws, o_pow, lse_pow)
        stored = cache.stored(layer, L)["values"].double()         # [B, L, 576]
        rf = rows.double()
        protected = list(range(cache.cfg["sink"])) + list(range(L - cache.cfg["window"], L))

        def reference(rounded):
            """float64 attention over BF16(fmaf(q, s, l)) (rounded) or
            fmaf(q, s, l) (not), the protected rows as written."""
            vals = stored.clone()
            if rounded:
                vals = vals.float().to(torch.bfloat16).double()
            for t in protected:
                vals[:, t] = rf[:, t]
            z = scale * torch.einsum("bhd,btd->bht", q[:, 0].double(), vals)
            return (torch.einsum("bht,btc->bhc", torch.softmax(z, -1), vals[..., :P.D_C]),
                    torch.logsumexp(z, -1))
        res = dict(batch=B, length=L, meta=meta, fine_bucket=fine, pow2_bucket=pow2,
                   plan_fine=[int(v) for v in plan_f[:7]], plan_pow2=[int(v) for v in plan_p[:7]],
                   rounded_fine=cache.plan_rounded(plan_f), rounded_pow2=cache.plan_rounded(plan_p))
        pre = f"fine bucket {meta} B {B} L {L}"
        check(fine < pow2, f"{pre}: plans for fewer tokens than the power of two",
              (fine, pow2))
        for tag, plan, o, lse in (("fine", plan_f, o_fine, lse_fine), ("pow2", plan_p, o_pow, lse_pow)):
            o_ref, l_ref = reference(cache.plan_rounded(plan))
            nmse = float(((o[:, 0].double() - o_ref) ** 2).sum() / (o_ref ** 2).sum())
            o_alt, _ = reference(not cache.plan_rounded(plan))
            res[f"nmse_{tag}_other_rounding"] = float(((o[:, 0].double() - o_alt) ** 2).sum()
                                                      / (o_alt ** 2).sum())
            lerr = float((lse[:, 0].double() - l_ref).abs().max())
            res[f"nmse_{tag}"], res[f"lse_err_{tag}"] = nmse, lerr
            check(nmse <= 1e-5 and lerr <= 1e-4, f"{pre}: decode with the "
                  f"{tag} plan ({fine if tag == 'fine' else pow2}) vs float64 attention",
                  "nmse %.3e lse err %.3e" % (nmse, lerr))
        for tag, plan, ws, o, lse in (("fine", plan_f, cache._dws, o_fine, lse_fine),
                                      ("pow2", plan_p, dws, o_pow, lse_pow)):
            ts = []
            for r in range(55):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                run(plan, ws, o, lse)
                e1.record()
                torch.cuda.synchronize(dev)
                if r >= 5:
                    ts.append(e0.elapsed_time(e1) * 1e3)
            res[f"us_{tag}"] = sorted(ts)[len(ts) // 2]
        print("fine bucket", json.dumps(res), flush=True)
        rows_out.append(res)
        del cache
    out["fine_bucket"] = rows_out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    dev = torch.device("cuda")
    ops = qt.load_ops()
    gen = torch.Generator().manual_seed(21)
    last = None
    runs = {}
    for name in ("C4R4", "C2R4", "C8R8", "BF16", "C4R4q8", "C2R4q8"):
        c = run_config(name, ops, dev, gen, runs.get(P.split_cache_name(name)[0])
                       if name.endswith("q8") else None)
        runs[name] = {k: c[k] for k in ("vals", "rows", "perm")}
        if name == "C4R4":
            last = c
    refusals(ops, last, dev)
    extra = {}
    model = small_model(dev)
    reserve_checks(model, dev, gen)
    rounding_checks(model)
    fine_bucket_checks(model, ops, dev, gen, extra)
    n_ok = sum(ok for _, ok, _ in RES)
    print(f"test_ops: {n_ok}/{len(RES)} checks passed", flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(),
                   "checks": [dict(what=w, ok=o, detail=str(d)) for w, o, d in RES],
                   "decode": DECODE_NMSE,
                   **extra},
                  open(os.path.join(a.out, "test_ops.json"), "w"), indent=1)
    return 0 if n_ok == len(RES) else 1


if __name__ == "__main__":
    sys.exit(main())
