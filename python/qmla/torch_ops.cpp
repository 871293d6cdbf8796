// python/qmla/torch_ops.cpp — PyTorch operators over the CUDA launchers of
// the paged low-bit MLA cache (issue 21 item 1; docs/serving.md):
//
//   qmla::kv_write(pool, sink, window, ws, kv, slot, seq, pos, seq_len, cfg)
//       the fused cache writer (kernels/kvcache_cuda.h) on the current stream;
//       kv: BF16 or float32 rows (float32 quantized as they are, their BF16
//       copies rounded to nearest even)
//   qmla::kv_write_ws_init(ws)         set a writer workspace up (once)
//   qmla::kv_write_status(ws, cfg)     "" or the first failure since the last
//                                      status (synchronises: not in graphs)
//   qmla::decode_plan(cfg, batch, s_q, heads, max_len, variant) -> int[]
//       the split plan (kernels/decode_cuda.h; host arithmetic only)
//   qmla::decode(q, pool, sink, window, block_table, seq_len, ws, out, lse,
//                scale, cfg, plan)
//       paged MLA decode attention (absorbed form) into out / lse
//
// cfg = [c_bits, r_bits, group, sink, window] or [..., meta] (include/qmla/
// kvcache.h; meta 0 f16, the default, or 2 q8: C4R4 / C2R4 pages that the
// writer writes and decode variants 0, 1, 3, 4, 7 read); an absent sink /
// window buffer (S or W = 0, BF16) is an empty tensor.
// Every shape, dtype, stride, device and alignment the launchers assume is
// checked here (TORCH_CHECK: a RuntimeError naming the argument, expected
// and found); then the C launcher validates the rest. kv_write and decode
// write only into the tensors they are given (out-variants), enqueue on
// at::cuda::getCurrentCUDAStream() and neither allocate nor synchronise, so
// that they can be captured in a CUDA graph. What cannot be checked without
// reading device memory is the caller's: slots inside the pool, every
// seq_len <= the plan's max_len, block tables naming pages of the pool
// (qmla.torch.MLAPagedCache keeps all three on the host).
//
// Built by qmla.torch.load_ops (torch.utils.cpp_extension.load) against
// libqmla.so of a CUDA build (python/meson.build), which holds the launchers.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdint>
#include <string>
#include <vector>

#include "decode_cuda.h"
#include "kvcache_cuda.h"
#include "qmla/decode.h"
#include "qmla/kvcache.h"

namespace {

constexpr int64_t kPlanLen = 11; // n_splits pps row_tiles n_prot ws variant sep batch s_q heads max_len

// Numbers go into messages as strings made here: on the H200 image (extension
// built by /opt/gcc's g++ against torch 2.11) the two refusals whose
// TORCH_CHECK messages streamed integers (strides, a row count) crashed the
// process, while seven whose messages held strings, dtypes and devices
// raised cleanly (docs/serving.md; cause not established, this form not yet
// rerun there).
template <typename T> std::string N(T v) { return std::to_string(v); }


qmla_kv_config cfg_of(const char *op, c10::IntArrayRef cfg)
{
    TORCH_CHECK(cfg.size() == 5 || cfg.size() == 6, op,
                ": cfg: expected [c_bits, r_bits, group, sink, window] or [c_bits, r_bits, group, "
                "sink, window, meta], found ", N(cfg.size()), " values");
    // value-initialised; meta: cfg[5] when given (QMLA_CORE_META_F16 0 or
    // QMLA_CORE_META_Q8 2: qmla.paging.METAS), else f16 (H200 serving run 8:
    // left uninitialised, qmla_kv_check read stack garbage as meta and
    // refused every kv_write / kv_write_status)
    qmla_kv_config c{};
    c.meta = cfg.size() == 6 ? (int)cfg[5] : QMLA_CORE_META_F16;
    c.c_bits = (int)cfg[0];
    c.r_bits = (int)cfg[1];
    c.group = (int)cfg[2];
    c.sink = (int)cfg[3];
    c.window = (int)cfg[4];
    qmla_error e{};
    TORCH_CHECK(qmla_kv_check(&c, &e) == QMLA_OK, op, ": ", e.msg);
    // a BF16 cache has no metadata: q8 there is a caller's mistake, not ignored
    TORCH_CHECK(c.c_bits != QMLA_KV_BF16 || c.meta == QMLA_CORE_META_F16, op,
                ": cfg: a BF16 cache (c_bits 16) stores no metadata: expected meta ",
                N(QMLA_CORE_META_F16), " (f16), found ", N(c.meta));
    return c;
}

std::string shape_str(const at::Tensor &t, bool strides = false)
{
    std::string s = "[";
    for (int64_t i = 0; i < t.dim(); i++)
        s += (i ? ", " : "") + std::to_string(strides ? t.stride(i) : t.size(i));
    return s + "]";
}

// A tensor of `dtype` (or `alt`, when given), on `dev`, C-contiguous, with
// the given sizes (-1: any).
void check_tensor(const char *op, const char *name, const at::Tensor &t, at::ScalarType dtype,
                  std::vector<int64_t> sizes, const c10::Device &dev, int align,
                  at::ScalarType alt = at::ScalarType::Undefined)
{
    TORCH_CHECK(t.defined(), op, ": ", name, ": undefined tensor");
    TORCH_CHECK(t.is_cuda(), op, ": ", name, ": expected a CUDA tensor, found one on ", t.device());
    TORCH_CHECK(t.device() == dev, op, ": ", name, ": on ", t.device(), ", expected ", dev,
                " (every tensor on one device)");
    if (alt == at::ScalarType::Undefined) {
        TORCH_CHECK(t.scalar_type() == dtype, op, ": ", name, ": expected dtype ", dtype,
                    ", found ", t.scalar_type());
    } else {
        TORCH_CHECK(t.scalar_type() == dtype || t.scalar_type() == alt, op, ": ", name,
                    ": expected dtype ", dtype, " or ", alt, ", found ", t.scalar_type());
    }
    bool ok = t.dim() == (int64_t)sizes.size();
    for (size_t i = 0; ok && i < sizes.size(); i++)
        ok = sizes[i] < 0 || t.size((int64_t)i) == sizes[i];
    std::string want = "[";
    for (size_t i = 0; i < sizes.size(); i++)
        want += (i ? ", " : "") + (sizes[i] < 0 ? std::string("*") : std::to_string(sizes[i]));
    want += "]";
    TORCH_CHECK(ok, op, ": ", name, ": expected shape ", want, ", found ", shape_str(t));
    TORCH_CHECK(t.is_contiguous(), op, ": ", name, ": expected a contiguous tensor, found strides ",
                shape_str(t, true));
    TORCH_CHECK(align <= 1 || t.numel() == 0 || ((uintptr_t)t.data_ptr() % (uintptr_t)align) == 0,
                op, ": ", name, ": data must be ", N(align), "-byte aligned");
}

// The protection buffers of cfg for a batch (nullptr when absent: an empty
// tensor; optional tensors are avoided, see docs/serving.md).
uint16_t *prot_ptr(const char *op, const char *name, const at::Tensor &t, int rows, int64_t batch,
                   const c10::Device &dev)
{
    if (rows == 0) {
        TORCH_CHECK(!t.defined() || t.numel() == 0, op, ": ", name,
                    ": the configuration has no ", name, " rows, found a tensor ", shape_str(t));
        return nullptr;
    }
    TORCH_CHECK(t.defined() && t.numel() > 0, op, ": ", name, ": the configuration keeps ", N(rows),
                " BF16 rows per sequence: expected a tensor [", N(batch), ", ", N(rows),
                ", 576], found an empty one");
    check_tensor(op, name, t, at::kBFloat16, {batch, rows, QMLA_KV_D}, dev, 16);
    return (uint16_t *)t.data_ptr();
}

qmla_kv_cache cache_of(const char *op, const qmla_kv_config &c, const at::Tensor &pool,
                       const at::Tensor &sink, const at::Tensor &window, int64_t batch)
{
    const qmla_kv_layout L = qmla_kv_layout_of(&c);
    check_tensor(op, "pool", pool, at::kByte, {-1, (int64_t)L.page_bytes}, pool.device(), 16);
    TORCH_CHECK(pool.size(0) > 0, op, ": pool: no pages");
    qmla_kv_cache kc{};
    kc.cfg = c;
    kc.pool = (uint8_t *)pool.data_ptr();
    kc.n_pages = (size_t)pool.size(0);
    kc.batch = (int)batch;
    kc.sink = prot_ptr(op, "sink", sink, L.bf16 ? 0 : c.sink, batch, pool.device());
    kc.window = prot_ptr(op, "window", window, L.bf16 ? 0 : c.window, batch, pool.device());
    return kc;
}

void kv_write(at::Tensor pool, at::Tensor sink, at::Tensor window,
              at::Tensor ws, const at::Tensor &kv, const at::Tensor &slot, const at::Tensor &seq,
              const at::Tensor &pos, const at::Tensor &seq_len, c10::IntArrayRef cfg)
{
    const char *op = "qmla::kv_write";
    const qmla_kv_config c = cfg_of(op, cfg);
    const c10::Device dev = pool.device();
    TORCH_CHECK(pool.is_cuda(), op, ": pool: expected a CUDA tensor, found one on ", pool.device());
    c10::cuda::CUDAGuard guard(dev);
    check_tensor(op, "seq_len", seq_len, at::kInt, {-1}, dev, 4);
    const int64_t batch = seq_len.size(0);
    TORCH_CHECK(batch >= 1, op, ": seq_len: expected at least one sequence");
    qmla_kv_cache kc = cache_of(op, c, pool, sink, window, batch);
    check_tensor(op, "kv", kv, at::kBFloat16, {-1, QMLA_KV_D}, dev, 16, at::kFloat);
    const bool f32 = kv.scalar_type() == at::kFloat;
    const int64_t n = kv.size(0);
    check_tensor(op, "slot", slot, at::kLong, {n}, dev, 8);
    check_tensor(op, "seq", seq, at::kInt, {n}, dev, 4);
    check_tensor(op, "pos", pos, at::kInt, {n}, dev, 4);
    check_tensor(op, "ws", ws, at::kByte, {-1}, dev, 8);
    TORCH_CHECK(ws.numel() >= QMLA_KV_WRITE_WS_BYTES, op, ": ws: expected at least ",
                N(QMLA_KV_WRITE_WS_BYTES), " bytes, found ", N(ws.numel()));
    qmla_kv_write w{};
    w.kv = f32 ? nullptr : (const uint16_t *)kv.data_ptr();
    w.kv_f32 = f32 ? (const float *)kv.data_ptr() : nullptr;
    w.n = (size_t)n;
    w.slot = (const int64_t *)slot.data_ptr();
    w.seq = (const int32_t *)seq.data_ptr();
    w.pos = (const int32_t *)pos.data_ptr();
    w.seq_len = (const int32_t *)seq_len.data_ptr();
    qmla_error e{};
    const int st = qmla_kv_write_cuda_launch(&kc, &w, ws.data_ptr(),
                                             at::cuda::getCurrentCUDAStream(dev.index()).stream(), &e);
    TORCH_CHECK(st == QMLA_OK, op, ": ", e.msg);
}

void kv_write_ws_init(at::Tensor ws)
{
    const char *op = "qmla::kv_write_ws_init";
    TORCH_CHECK(ws.is_cuda(), op, ": ws: expected a CUDA tensor, found one on ", ws.device());
    c10::cuda::CUDAGuard guard(ws.device());
    check_tensor(op, "ws", ws, at::kByte, {-1}, ws.device(), 8);
    TORCH_CHECK(ws.numel() >= QMLA_KV_WRITE_WS_BYTES, op, ": ws: expected at least ",
                N(QMLA_KV_WRITE_WS_BYTES), " bytes, found ", N(ws.numel()));
    qmla_error e{};
    TORCH_CHECK(qmla_kv_write_cuda_ws_init(ws.data_ptr(),
                                           at::cuda::getCurrentCUDAStream(ws.device().index()).stream(),
                                           &e) == QMLA_OK,
                op, ": ", e.msg);
}

std::string kv_write_status(at::Tensor ws, c10::IntArrayRef cfg)
{
    const char *op = "qmla::kv_write_status";
    const qmla_kv_config c = cfg_of(op, cfg);
    TORCH_CHECK(ws.is_cuda(), op, ": ws: expected a CUDA tensor, found one on ", ws.device());
    c10::cuda::CUDAGuard guard(ws.device());
    check_tensor(op, "ws", ws, at::kByte, {-1}, ws.device(), 8);
    TORCH_CHECK(ws.numel() >= QMLA_KV_WRITE_WS_BYTES, op, ": ws: expected at least ",
                N(QMLA_KV_WRITE_WS_BYTES), " bytes, found ", N(ws.numel()));
    qmla_kv_cache kc{};
    kc.cfg = c;
    qmla_error e{};
    const int st = qmla_kv_write_cuda_status(
        &kc, ws.data_ptr(), at::cuda::getCurrentCUDAStream(ws.device().index()).stream(), &e);
    return st == QMLA_OK ? std::string() : std::string(e.msg);
}

std::vector<int64_t> decode_plan(c10::IntArrayRef cfg, int64_t batch, int64_t s_q, int64_t heads,
                                 int64_t max_len, int64_t variant)
{
    const char *op = "qmla::decode_plan";
    const qmla_kv_config c = cfg_of(op, cfg);
    TORCH_CHECK(batch >= 1 && s_q >= 1 && heads >= 1 && max_len >= 0, op,
                ": expected batch, s_q, heads >= 1 and max_len >= 0, found ", N(batch), ", ", N(s_q), ", ",
                N(heads), ", ", N(max_len));
    TORCH_CHECK(batch <= INT32_MAX && s_q <= INT32_MAX && heads <= INT32_MAX, op, ": too large");
    qmla_decode_args a{};
    a.batch = (int)batch;
    a.s_q = (int)s_q;
    a.heads = (int)heads;
    qmla_decode_plan p{};
    qmla_error e{};
    TORCH_CHECK(qmla_decode_cuda_plan_variant(&c, &a, (long)max_len, 0, (int)variant, &p, &e) ==
                    QMLA_OK,
                op, ": ", e.msg);
    return {p.n_splits, p.pages_per_split, p.row_tiles, p.n_prot, (int64_t)p.ws_bytes, p.variant,
            p.sep,      batch,             s_q,         heads,    max_len};
}

void decode(const at::Tensor &q, const at::Tensor &pool, const at::Tensor &sink,
            const at::Tensor &window, const at::Tensor &block_table,
            const at::Tensor &seq_len, at::Tensor ws, at::Tensor out, at::Tensor lse, double scale,
            c10::IntArrayRef cfg, c10::IntArrayRef plan)
{
    const char *op = "qmla::decode";
    const qmla_kv_config c = cfg_of(op, cfg);
    TORCH_CHECK(plan.size() == kPlanLen, op, ": plan: expected the ", N(kPlanLen),
                " values of qmla::decode_plan, found ", N(plan.size()));
    TORCH_CHECK(pool.is_cuda(), op, ": pool: expected a CUDA tensor, found one on ", pool.device());
    const c10::Device dev = pool.device();
    c10::cuda::CUDAGuard guard(dev);
    check_tensor(op, "q", q, at::kBFloat16, {-1, -1, -1, QMLA_KV_D}, dev, 16);
    const int64_t batch = q.size(0), s_q = q.size(1), heads = q.size(2);
    TORCH_CHECK(batch == plan[7] && s_q == plan[8] && heads == plan[9], op,
                ": q has batch ", N(batch), ", s_q ", N(s_q), ", heads ", N(heads),
                "; the plan was made for ", N(plan[7]), ", ", N(plan[8]), ", ", N(plan[9]));
    qmla_kv_cache kc = cache_of(op, c, pool, sink, window, batch);
    check_tensor(op, "block_table", block_table, at::kInt, {batch, -1}, dev, 4);
    const int64_t max_pages = block_table.size(1);
    TORCH_CHECK(max_pages * QMLA_KV_PAGE >= plan[10], op, ": block_table: ", N(max_pages),
                " pages per sequence do not cover the plan's max_len ", N(plan[10]));
    TORCH_CHECK(max_pages <= INT32_MAX, op, ": block_table: too many pages");
    check_tensor(op, "seq_len", seq_len, at::kInt, {batch}, dev, 4);
    check_tensor(op, "ws", ws, at::kByte, {-1}, dev, 16);
    TORCH_CHECK(ws.numel() >= plan[4], op, ": ws: the plan needs ", N(plan[4]), " bytes, found ",
                N(ws.numel()));
    check_tensor(op, "out", out, at::kBFloat16, {batch, s_q, heads, QMLA_KV_DC}, dev, 16);
    check_tensor(op, "lse", lse, at::kFloat, {batch, s_q, heads}, dev, 4);
    qmla_decode_plan p{};
    p.n_splits = (int)plan[0];
    p.pages_per_split = (int)plan[1];
    p.row_tiles = (int)plan[2];
    p.n_prot = (int)plan[3];
    p.ws_bytes = (size_t)plan[4];
    p.variant = (int)plan[5];
    p.sep = (int)plan[6];
    qmla_decode_args a{};
    a.batch = (int)batch;
    a.s_q = (int)s_q;
    a.heads = (int)heads;
    a.scale = (float)scale;
    a.q = (const uint16_t *)q.data_ptr();
    a.block_table = (const int32_t *)block_table.data_ptr();
    a.max_pages = (int)max_pages;
    a.seq_len = (const int32_t *)seq_len.data_ptr();
    qmla_error e{};
    const int st = qmla_decode_cuda(&kc, &a, &p, ws.data_ptr(), (uint16_t *)out.data_ptr(),
                                    (float *)lse.data_ptr(),
                                    at::cuda::getCurrentCUDAStream(dev.index()).stream(), &e);
    TORCH_CHECK(st == QMLA_OK, op, ": ", e.msg);
}

} // namespace

TORCH_LIBRARY(qmla, m)
{
    m.def("kv_write(Tensor(a!) pool, Tensor(b!) sink, Tensor(c!) window, Tensor(d!) ws, "
          "Tensor kv, Tensor slot, Tensor seq, Tensor pos, Tensor seq_len, int[] cfg) -> ()");
    m.def("kv_write_ws_init(Tensor(a!) ws) -> ()");
    m.def("kv_write_status(Tensor(a!) ws, int[] cfg) -> str");
    m.def("decode_plan(int[] cfg, int batch, int s_q, int heads, int max_len, int variant=0) -> int[]",
          &decode_plan);
    m.def("decode(Tensor q, Tensor pool, Tensor sink, Tensor window, Tensor block_table, "
          "Tensor seq_len, Tensor(a!) ws, Tensor(b!) out, Tensor(c!) lse, float scale, int[] cfg, "
          "int[] plan) -> ()");
}

TORCH_LIBRARY_IMPL(qmla, CUDA, m)
{
    m.impl("kv_write", &kv_write);
    m.impl("kv_write_ws_init", &kv_write_ws_init);
    m.impl("kv_write_status", &kv_write_status);
    m.impl("decode", &decode);
}
