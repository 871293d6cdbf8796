/* engine_cuda.cu — the CUDA engine's operations (lib/driver/engine_cuda.h,
 * docs/cuda-engine.md): one sequence of the matched-NMSE sweep on the GPU
 * and QDQ through the project's kernel. Its C reference twin is the CPU
 * engine (qmla_sweep_sequence, lib/sweep/sweep.c; qmla_quant_qdq); the test
 * is tests/sweep/test_engine_cuda.c (suite cuda, SKIP without a device).
 *
 * The sweep of one sequence, all tensors head-major [H, T, ...] on the
 * device, query tokens in tiles of B (keys 0 .. t1-1 for the tile t0..t1-1,
 * so only the causal part is computed and memory is O(H B T), never
 * O(H T^2) beyond one tile):
 *   ql = q_nope W_UK                                  (strided-batched SGEMM)
 *   per tile:
 *     Z  = tau (ql C^T + q_rope K^T)                  (two SGEMMs)
 *     P1 = Z + tau ql E_C^T,  P2 = Z + tau q_rope E_R^T (copy + SGEMM)
 *     A = softmax(Z); P1 <- softmax(P1) - A; P2 <- softmax(P2) - A  (fused)
 *     U = A C, P1 C, A E_C, P1 E_C, P2 C  -> O = U W_UV^T -> Y = O W_O^T
 *     sums of squares of the five Y tiles (and of the content route sum)
 *     in double, one partial per thread block, no atomics
 *   the partials summed on the host in a fixed order.
 * The error directions E (QDQ, rescaling to the target NMSE) are the CPU
 * engine's own (qmla_sweep_error_direction), so E is bit for bit the CPU's;
 * the response arithmetic after the sums is the CPU's line for line.
 * cuBLAS runs with CUBLAS_DEFAULT_MATH set explicitly (float32, no TF32)
 * on one stream: the same inputs give bit-identical results run after run.
 * --verify items run on the CPU engine (the workspace keeps a CPU one). */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>

#include "core/alloc.h"
#include "driver/engine_cuda.h"
#include "qdq_cuda.h"
#include "qmla/norms.h"

/* ---- the device probe and the device of this process ------------------- */
/* The device (docs/cuda-engine.md, "Several GPUs"), chosen once per process
 * before any allocation, in this order:
 *   1. qmla_cuda_engine_select (the CLI's --device N or --engine cuda:N);
 *   2. the environment variable QMLA_CUDA_DEVICE=N;
 *   3. under a launcher, the node-local rank mod the device count: the
 *      first set of OMPI_COMM_WORLD_LOCAL_RANK (Open MPI), MV2_COMM_WORLD_
 *      LOCAL_RANK (MVAPICH2), MPI_LOCALRANKID (MPICH/Intel MPI),
 *      PALS_LOCAL_RANKID, SLURM_LOCALID (srun);
 *   4. device 0.
 * An index asked for by 1 or 2 outside 0 .. count-1 makes the engine
 * unusable with a message naming the index, where it came from and the
 * count found. Indices are CUDA runtime ordinals, so they count only the
 * devices CUDA_VISIBLE_DEVICES leaves visible. Every entry point makes the
 * device current in its calling thread (device_enter: the runtime's current
 * device is per host thread), so a thread that launches always launches on
 * it. The name in provenance (qmla_cuda_engine_device) carries the index,
 * the count and the rule that chose it. */

static int probed;   /* the light probe ran (count, rule, index, properties) */
static int verified; /* the full probe ran on dev_index (a context, the kernels) */
static int want_device = -1; /* qmla_cuda_engine_select; -1: none */
static int dev_index = -1;   /* the device chosen (probed and usable) */
static int dev_explicit;     /* dev_why is about a device asked for explicitly */
static char dev_name[320];
static char dev_why[640];
/* probe, probe_full and select run under probe_mu (two threads' first
 * calls would both write dev_name) */
static pthread_mutex_t probe_mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- the provenance strings (review12: a static buffer rebuilt on every
 * call raced between threads) ------------------------------------------
 * Every string the engine hands out for provenance or as a message
 * (device, switches, mode, the switches' errors) is interned: built in the
 * caller's stack, then looked up in (or added to) a list under intern_mu,
 * and the list's copy returned. A returned string never changes and stays
 * valid for the process; the list holds one copy per distinct value (a
 * process sees a handful: the settings it runs with). NULL when out of
 * memory. */
typedef struct interned_str {
    struct interned_str *next;
    char s[1];
} interned_str;
static interned_str *intern_list;
static pthread_mutex_t intern_mu = PTHREAD_MUTEX_INITIALIZER;

static const char *intern(const char *s)
{
    pthread_mutex_lock(&intern_mu);
    interned_str *e = intern_list;
    while (e && strcmp(e->s, s) != 0)
        e = e->next;
    if (!e) {
        const size_t n = strlen(s);
        if ((e = (interned_str *)malloc(sizeof *e + n))) {
            memcpy(e->s, s, n + 1);
            e->next = intern_list;
            intern_list = e;
        }
    }
    pthread_mutex_unlock(&intern_mu);
    return e ? e->s : NULL;
}

static __global__ void probe_kernel(int *x)
{
    if (x)
        *x = 1;
}

static const char *const local_rank_vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK",
                                              "MV2_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                              "PALS_LOCAL_RANKID", "SLURM_LOCALID", NULL};

/* A non-negative decimal integer (at most 7 digits) or -1. */
static long parse_index(const char *v)
{
    if (!v || !*v || strlen(v) > 7)
        return -1;
    long x = 0;
    for (const char *c = v; *c; c++) {
        if (*c < '0' || *c > '9')
            return -1;
        x = x * 10 + (*c - '0');
    }
    return x;
}

/* The light probe (since run 11): which device and its properties, with
 * calls that make no context (cudaGetDeviceCount, cudaGetDeviceProperties),
 * so `--engine cuda --device N` no longer holds a context on the default
 * device (review10). The full probe (probe_full) makes the chosen device
 * current and checks that it runs this build's kernels. */
static void probe_locked(void)
{
    if (probed)
        return;
    probed = 1;
    verified = 0;
    dev_index = -1;
    dev_explicit = 0;
    dev_name[0] = '\0';
    dev_why[0] = '\0';
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1) {
        snprintf(dev_why, sizeof dev_why, "no CUDA device: %s",
                 e != cudaSuccess ? cudaGetErrorString(e) : "none present");
        cudaGetLastError();
        return;
    }
    /* which device: explicit, QMLA_CUDA_DEVICE, local rank mod n, 0 */
    long idx = 0;
    char rule[160];
    snprintf(rule, sizeof rule, "default");
    const char *env = getenv("QMLA_CUDA_DEVICE");
    if (want_device >= 0) {
        idx = want_device;
        snprintf(rule, sizeof rule, "--device");
    } else if (env && *env) {
        idx = parse_index(env);
        if (idx < 0) {
            char v[48];
            snprintf(v, sizeof v, "%s", env);
            snprintf(dev_why, sizeof dev_why, "QMLA_CUDA_DEVICE=\"%s\": expected a CUDA "
                     "device index 0..%d (this machine has %d CUDA device%s)", v, n - 1, n,
                     n == 1 ? "" : "s");
            dev_explicit = 1;
            return;
        }
        snprintf(rule, sizeof rule, "QMLA_CUDA_DEVICE");
    } else {
        for (size_t k = 0; local_rank_vars[k]; k++) {
            const long r = parse_index(getenv(local_rank_vars[k]));
            if (r >= 0) {
                idx = r % n;
                snprintf(rule, sizeof rule, "%s %ld mod %d", local_rank_vars[k], r, n);
                break;
            }
        }
    }
    if (idx >= n) {
        snprintf(dev_why, sizeof dev_why, "CUDA device %ld asked for (%s) but this machine "
                 "has %d CUDA device%s (indices 0..%d; CUDA_VISIBLE_DEVICES counts)", idx,
                 rule, n, n == 1 ? "" : "s", n - 1);
        dev_explicit = 1;
        return;
    }
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, (int)idx)) != cudaSuccess) {
        snprintf(dev_why, sizeof dev_why, "CUDA device %ld: %s", idx, cudaGetErrorString(e));
        cudaGetLastError();
        return;
    }
    dev_index = (int)idx;
    snprintf(dev_name, sizeof dev_name, "%s (sm_%d%d, %.1f GiB), device %ld of %d (%s)", p.name,
             p.major, p.minor, (double)p.totalGlobalMem / 1073741824.0, idx, n, rule);
}

/* The full probe: the light one, then the chosen device made current (its
 * primary context) and this build's kernels checked on it. */
static void probe_full_locked(void)
{
    probe_locked();
    if (verified || dev_index < 0)
        return;
    verified = 1;
    cudaError_t e;
    if ((e = cudaSetDevice(dev_index)) != cudaSuccess) {
        snprintf(dev_why, sizeof dev_why, "CUDA device %d (%s): cudaSetDevice: %s", dev_index,
                 dev_name, cudaGetErrorString(e));
        cudaGetLastError();
        dev_index = -1;
        dev_name[0] = '\0';
        return;
    }
    /* the build's kernels must run on it (a binary for its architecture) */
    cudaFuncAttributes fa;
    if ((e = cudaFuncGetAttributes(&fa, probe_kernel)) != cudaSuccess) {
        snprintf(dev_why, sizeof dev_why, "CUDA device %s cannot run this build's kernels "
                 "(meson option gpu_arch): %s", dev_name, cudaGetErrorString(e));
        cudaGetLastError();
        dev_index = -1;
        dev_name[0] = '\0';
        return;
    }
}

static void probe(void)
{
    pthread_mutex_lock(&probe_mu);
    probe_locked();
    pthread_mutex_unlock(&probe_mu);
}

static void probe_full(void)
{
    pthread_mutex_lock(&probe_mu);
    probe_full_locked();
    pthread_mutex_unlock(&probe_mu);
}

/* the device's name and the switches: at most sizeof dev_name - 1 +
 * SWITCHES_MAX - 1 bytes (qmla/engine.h's QMLA_ENGINE_DEVICE_MAX holds it) */
#define SWITCHES_MAX 160
static_assert(sizeof dev_name + SWITCHES_MAX - 1 <= QMLA_ENGINE_DEVICE_MAX,
              "the device string fits QMLA_ENGINE_DEVICE_MAX");

extern "C" const char *qmla_cuda_engine_device(void)
{
    probe_full();
    char name[sizeof dev_name];
    pthread_mutex_lock(&probe_mu);
    snprintf(name, sizeof name, "%s", dev_name);
    pthread_mutex_unlock(&probe_mu);
    if (!name[0])
        return NULL;
    char full[sizeof dev_name + SWITCHES_MAX];
    snprintf(full, sizeof full, "%s%s", name, qmla_cuda_engine_switches());
    return intern(full);
}

extern "C" const char *qmla_cuda_engine_device_light(void)
{
    probe();
    char name[sizeof dev_name];
    pthread_mutex_lock(&probe_mu);
    snprintf(name, sizeof name, "%s", dev_name);
    pthread_mutex_unlock(&probe_mu);
    return name[0] ? intern(name) : NULL;
}

extern "C" const char *qmla_cuda_engine_unusable(void)
{
    probe();
    char why[sizeof dev_why];
    pthread_mutex_lock(&probe_mu);
    snprintf(why, sizeof why, "%s", dev_name[0] ? "" : dev_why);
    pthread_mutex_unlock(&probe_mu);
    const char *r = intern(why);
    return r ? r : "the CUDA device's state (out of memory for the message)";
}

extern "C" int qmla_cuda_engine_unusable_explicit(void)
{
    probe();
    pthread_mutex_lock(&probe_mu);
    const int r = !dev_name[0] && dev_explicit;
    pthread_mutex_unlock(&probe_mu);
    return r;
}

/* dev_index read under probe_mu (a re-probe after qmla_cuda_engine_select
 * sets it to -1 for a while) */
static int dev_index_now(void)
{
    pthread_mutex_lock(&probe_mu);
    const int r = dev_index;
    pthread_mutex_unlock(&probe_mu);
    return r;
}

extern "C" int qmla_cuda_engine_device_index(void)
{
    probe_full();
    return dev_index_now();
}

extern "C" void qmla_cuda_engine_select(int device)
{
    pthread_mutex_lock(&probe_mu);
    want_device = device < 0 ? -1 : device;
    probed = 0; /* probed again, with this choice, at the next use */
    pthread_mutex_unlock(&probe_mu);
}

/* cuDevicePrimaryCtxGetState through the runtime's driver entry point (no
 * link against libcuda): 1 when device `device` has an active primary
 * context in this process, 0 when not, -1 when it cannot be told. */
extern "C" int qmla_cuda_engine_context_active(int device)
{
    typedef int (*get_state_fn)(int, unsigned int *, int *);
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &fn, 12000,
                                         cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || !fn) {
        cudaGetLastError();
        return -1;
    }
    unsigned int flags = 0;
    int active = 0;
    if (((get_state_fn)fn)(device, &flags, &active) != 0)
        return -1;
    return active ? 1 : 0;
}

/* The engine's device made current in the calling thread; QMLA_EINVAL when
 * it is not usable (why), QMLA_EIO when cudaSetDevice fails. */
static int device_enter(qmla_error *err)
{
    {
        const char *ge = qmla_cuda_engine_gemm_error();
        if (ge)
            return qmla_error_set(err, QMLA_EINVAL, "cuda engine: %s", ge);
    }
    {
        const char *te = qmla_cuda_engine_switch_error();
        if (te)
            return qmla_error_set(err, QMLA_EINVAL, "cuda engine: %s", te);
    }
    if (!qmla_cuda_engine_device())
        return qmla_error_set(err, QMLA_EINVAL, "cuda engine: %s", qmla_cuda_engine_unusable());
    const int idx = dev_index_now();
    if (idx < 0) /* another thread's qmla_cuda_engine_select made it unusable since */
        return qmla_error_set(err, QMLA_EINVAL, "cuda engine: %s", qmla_cuda_engine_unusable());
    const cudaError_t e = cudaSetDevice(idx);
    if (e != cudaSuccess)
        return qmla_error_set(err, QMLA_EIO, "cuda engine: cudaSetDevice(%d): %s", idx,
                              cudaGetErrorString(e));
    return QMLA_OK;
}

/* As device_enter for the release functions (no status to return). */
static void device_enter_quiet(void)
{
    const int idx = dev_index_now();
    if (idx >= 0)
        cudaSetDevice(idx);
}

/* the tile set by qmla_cuda_engine_set_tile (0: none), read and written
 * atomically (a test may set it while another thread's engine runs) */
static size_t tile_override;
extern "C" void qmla_cuda_engine_set_tile(size_t tokens)
{
    __atomic_store_n(&tile_override, tokens, __ATOMIC_RELAXED);
}
static size_t tile_set(void) { return __atomic_load_n(&tile_override, __ATOMIC_RELAXED); }

/* QMLA_CUDA_ENGINE_TILE: unset or "" none, else a positive token count
 * (0 when malformed: qmla_cuda_engine_switch_error refuses it) */
static size_t env_tile(void)
{
    const long v = parse_index(getenv("QMLA_CUDA_ENGINE_TILE"));
    return v > 0 ? (size_t)v : 0;
}

/* NULL when QMLA_CUDA_ENGINE_TILE and QMLA_CUDA_EVAL_SOLVER_AFTER are unset
 * or well formed, else the message naming the variable (run 12: a
 * malformed value was silently ignored) */
extern "C" const char *qmla_cuda_engine_switch_error(void)
{
    char msg[200];
    const char *t = getenv("QMLA_CUDA_ENGINE_TILE");
    if (t && *t && parse_index(t) < 0) {
        char v[48];
        snprintf(v, sizeof v, "%s", t);
        snprintf(msg, sizeof msg, "QMLA_CUDA_ENGINE_TILE=\"%s\": expected a number "
                 "of query tokens (at most 7 digits; 0: automatic), or unset", v);
        return intern(msg);
    }
    const char *a = getenv("QMLA_CUDA_EVAL_SOLVER_AFTER");
    if (a && *a && strcmp(a, "0") != 0 && strcmp(a, "1") != 0) {
        char v[48];
        snprintf(v, sizeof v, "%s", a);
        snprintf(msg, sizeof msg, "QMLA_CUDA_EVAL_SOLVER_AFTER=\"%s\": expected 0 or 1, "
                 "or unset", v);
        return intern(msg);
    }
    return NULL;
}

/* The provenance of the engine's switches that change results in their
 * last digits (run 12): "" with every default, else "; GEMMs 3xtf32",
 * "; query tile <= N", "; eval solver after the passes" as set. */
extern "C" const char *qmla_cuda_engine_switches(void)
{
    char buf[SWITCHES_MAX];
    buf[0] = '\0';
    const char *g = qmla_cuda_engine_gemm_name();
    if (g && strcmp(g, "fp32") != 0)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "; GEMMs %s", g);
    const size_t to = tile_set();
    const size_t t = to ? to : env_tile();
    if (t)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "; query tile <= %zu", t);
    if (qmla_cuda_engine_solver_after())
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "; eval solver after the passes");
    const char *r = intern(buf);
    return r ? r : "";
}

/* The mode (qmla/engine.h's qmla_engine_mode): the switches without their
 * leading "; ", "" with every default. */
extern "C" const char *qmla_cuda_engine_mode(void)
{
    const char *sw = qmla_cuda_engine_switches();
    const char *r = intern(sw[0] == ';' && sw[1] == ' ' ? sw + 2 : sw);
    return r ? r : "";
}

/* QMLA_CUDA_ENGINE_BEFORE (benchmarks' before rows, in the same run as the
 * after rows, and the tests; engine_cuda.h): 1 the sequences of commit
 * e498e58 (2026-12-03 run 8), 2 those of 2026-12-02 (f8d3d79). */
static int before_lvl = -1;
extern "C" int qmla_cuda_engine_before(void)
{
    if (before_lvl < 0) {
        const char *e = getenv("QMLA_CUDA_ENGINE_BEFORE");
        before_lvl = e && *e ? atoi(e) : 0;
        before_lvl = before_lvl < 0 ? 0 : before_lvl > 2 ? 2 : before_lvl;
    }
    return before_lvl;
}
extern "C" int qmla_cuda_engine_set_before(int level)
{
    const int old = qmla_cuda_engine_before();
    before_lvl = level < 0 ? 0 : level > 2 ? 2 : level;
    return old;
}
/* the 2026-12-02 sequences */
static int before_mode(void) { return qmla_cuda_engine_before() >= 2; }
/* the run-8 sequences (or older) */
static int before_r8(void) { return qmla_cuda_engine_before() >= 1; }

/* QMLA_CUDA_ENGINE_R12=1 (the benchmark's before rows of run 13, and the
 * test): the products and kernels of run 12 where run 13 changed them —
 * every query tile's products over its whole key range (no causal row
 * blocks), the sensitivities' row constants and key Grams one thread per
 * value. Results agree within rounding, not bit for bit. */
static int r12_v = -1; /* read and written atomically, as tile_override */
extern "C" int qmla_cuda_engine_r12(void)
{
    int v = __atomic_load_n(&r12_v, __ATOMIC_RELAXED);
    if (v < 0) {
        const char *e = getenv("QMLA_CUDA_ENGINE_R12");
        const int want = e && *e && strcmp(e, "0") != 0;
        int expect = -1;
        __atomic_compare_exchange_n(&r12_v, &expect, want, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
        v = __atomic_load_n(&r12_v, __ATOMIC_RELAXED);
    }
    return v;
}
extern "C" int qmla_cuda_engine_set_r12(int on)
{
    const int old = qmla_cuda_engine_r12();
    __atomic_store_n(&r12_v, on != 0, __ATOMIC_RELAXED);
    return old;
}

/* ---- the phase profile (engine_cuda.h) -------------------------------------- */

static qmla_cuda_profile prof;
static int prof_state = -1;

static int prof_on(void)
{
    if (prof_state < 0) {
        const char *e = getenv("QMLA_CUDA_ENGINE_PROFILE");
        prof_state = e && *e && strcmp(e, "0") != 0;
    }
    return prof_state;
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* t0 of a host phase (0 when the profile is off) and its end. */
static double ph_begin(void) { return prof_on() ? wall_now() : 0.0; }
static void ph_end(int ph, double t0)
{
    if (prof_on())
        prof.s[ph] += wall_now() - t0;
}

extern "C" void qmla_cuda_engine_profile_enable(int on) { prof_state = on != 0; }
extern "C" void qmla_cuda_engine_profile_get(qmla_cuda_profile *p)
{
    *p = prof;
    p->on = prof_on();
}
extern "C" void qmla_cuda_engine_profile_reset(void) { memset(&prof, 0, sizeof prof); }
extern "C" const char *qmla_cuda_engine_profile_name(int phase)
{
    static const char *const names[QMLA_CUDA_PH_N] = {
        "host: error directions", "host: controls drawn", "host: point weights, sums",
        "host: eval cell outside the engine", "host: eval heads' eigensolves",
        "host: eval workspace set-up, release",
        "host: in H2D copy calls",
        "host: waiting on the stream", "GPU: stream time (events)",
        "sensitivities (wall, inside the above)"};
    return phase >= 0 && phase < QMLA_CUDA_PH_N ? names[phase] : "?";
}
extern "C" const char *qmla_cuda_engine_stage_name(int stage)
{
    static const char *const names[QMLA_CUDA_ST_N] = {
        "finite passes (response-only sweeps)", "JVPs (both paths)",
        "sens: values Yc, key Grams yy_t", "sens: chunk attention, head outputs",
        "sens: O K and xq products", "sens: X2 (pointer-batched)", "sens: row constants",
        "sens: pair terms (no GEMM), head sum", "sens: pair products R0, R1",
        "sens: pair GEMM terms, head and row sums"};
    return stage >= 0 && stage < QMLA_CUDA_ST_N ? names[stage] : "?";
}

/* ---- errors ------------------------------------------------------------------ */

static int cuda_fail(qmla_error *err, cudaError_t e, const char *what)
{
    const int st = e == cudaErrorMemoryAllocation ? QMLA_ENOMEM : QMLA_EIO;
    return qmla_error_set(err, st, "cuda engine: %s: %s", what, cudaGetErrorString(e));
}

static const char *cublas_name(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
    }
}

#define CU(call, what)                                                                   \
    do {                                                                                 \
        const cudaError_t e_ = (call);                                                   \
        if (e_ != cudaSuccess) {                                                         \
            st = cuda_fail(err, e_, what);                                               \
            goto out;                                                                    \
        }                                                                                \
    } while (0)
/* Why the last 3xTF32 product of this thread could not run (its split
 * scratch: the size needed and the memory free), "" when it could. */
static thread_local char tf32_why[320];

/* A failed cuBLAS call's message: its status, the 3xTF32 scratch's reason
 * when that failed (QMLA_ENOMEM), and the CUDA error pending from a launch
 * before or inside the call (gemm_3xtf32 leaves it pending, review12:
 * cudaGetLastError there cleared an earlier launch's error and reported it
 * as the GEMM's). */
static int blas_fail(qmla_error *err, cublasStatus_t s, const char *what)
{
    const cudaError_t ce = cudaGetLastError();
    char why[sizeof tf32_why];
    snprintf(why, sizeof why, "%s", tf32_why);
    tf32_why[0] = '\0';
    return qmla_error_set(err, why[0] ? QMLA_ENOMEM : QMLA_EIO, "cuda engine: %s: %s%s%s%s%s",
                          what, cublas_name(s), why[0] ? ": " : "", why,
                          ce != cudaSuccess ? "; pending CUDA error: " : "",
                          ce != cudaSuccess ? cudaGetErrorString(ce) : "");
}

#define CB(call, what)                                                                   \
    do {                                                                                 \
        const cublasStatus_t s_ = (call);                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                               \
            st = blas_fail(err, s_, what);                                               \
            goto out;                                                                    \
        }                                                                                \
    } while (0)

/* ---- kernels ---------------------------------------------------------------- */

#define SM_THREADS 256
#define NORM_BLOCKS 128
#define NORM_SUMS 6

/* Sum of v over the block's threads in double, a fixed tree (the same
 * order every run); the result in every thread. */
static __device__ double block_sum(double v, double *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    const double r = sh[0];
    __syncthreads();
    return r;
}

template <typename R> static __device__ R block_max(R v, R *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            const R o = sh[threadIdx.x + s];
            sh[threadIdx.x] = o > sh[threadIdx.x] ? o : sh[threadIdx.x];
        }
        __syncthreads();
    }
    const R r = sh[0];
    __syncthreads();
    return r;
}

/* Causal softmax of one tile row per block: the tile holds query tokens
 * t0 .. t0+B-1 of every head, [H, B, L] with L = t0 + B keys; row (h, r)
 * is token i = t0 + r and sees keys s <= i. a[s] = softmax(z)[s] (minus
 * ref[s] when ref is not NULL), zeros for i < s < L. Like the CPU
 * (lib/attention/attention.c): the row maximum in float, the exponentials
 * in float, their sum in double, one float reciprocal. z and a may alias. */
static __global__ void softmax_rows_kernel(const float *z, const float *ref, float *a,
                                           size_t B, size_t L, size_t t0)
{
    __shared__ double shd[SM_THREADS];
    __shared__ float shf[SM_THREADS];
    const size_t row = blockIdx.x, r = row % B;
    const size_t n = t0 + r + 1;
    const float *zr = z + row * L;
    float *ar = a + row * L;
    const float *rr = ref ? ref + row * L : NULL;
    float m = zr[0];
    for (size_t s = threadIdx.x; s < n; s += blockDim.x)
        m = zr[s] > m ? zr[s] : m;
    m = block_max(m, shf);
    double part = 0.0;
    for (size_t s = threadIdx.x; s < n; s += blockDim.x) {
        const float e = expf(zr[s] - m);
        ar[s] = e;
        part += (double)e;
    }
    const double sum = block_sum(part, shd);
    const float inv = (float)(1.0 / sum);
    for (size_t s = threadIdx.x; s < n; s += blockDim.x)
        ar[s] = rr ? ar[s] * inv - rr[s] : ar[s] * inv;
    for (size_t s = n + threadIdx.x; s < L; s += blockDim.x)
        ar[s] = 0.0f;
}

/* Partial sums of squares over n elements of the tile's five outputs
 * (clean, content matching, aggregation, interaction, RoPE matching):
 * yy, m, a, i, the content route sum (m + a + i)^2, and the RoPE m, one
 * row of NORM_SUMS doubles per block into part. */
static __global__ void norms_kernel(const float *Y0, const float *Ym, const float *Ya,
                                    const float *Yi, const float *Yr, size_t n,
                                    double *part)
{
    __shared__ double sh[SM_THREADS];
    double s[NORM_SUMS] = {0, 0, 0, 0, 0, 0};
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        const double y = Y0[k], m = Ym[k], a = Ya[k], i = Yi[k], r = Yr[k];
        const double t = m + a + i;
        s[0] += y * y;
        s[1] += m * m;
        s[2] += a * a;
        s[3] += i * i;
        s[4] += t * t;
        s[5] += r * r;
    }
    for (int q = 0; q < NORM_SUMS; q++) {
        const double v = block_sum(s[q], sh);
        if (threadIdx.x == 0)
            part[blockIdx.x * NORM_SUMS + q] = v;
    }
}

/* The response-only pass's partial sums (the same NORM_SUMS layout as
 * norms_kernel): yy of the clean output Y0 (0 when Y0 is NULL) in slot 0,
 * the content route sum's square of Yc in slot 4 (Yc is the projection of
 * the summed latents (A~ - A) C + A E_C + (A~ - A) E_C, the content
 * perturbed output minus the clean one), the RoPE route's of Yr in slot 5,
 * zeros in the per-route slots 1..3. */
static __global__ void totals_kernel(const float *Y0, const float *Yc, const float *Yr,
                                     size_t n, double *part)
{
    __shared__ double sh[SM_THREADS];
    double s[3] = {0, 0, 0};
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        const double c = Yc[k], r = Yr[k];
        if (Y0) {
            const double y = Y0[k];
            s[0] += y * y;
        }
        s[1] += c * c;
        s[2] += r * r;
    }
    const int slot[3] = {0, 4, 5};
    for (int q = 0; q < 3; q++) {
        const double v = block_sum(s[q], sh);
        if (threadIdx.x == 0)
            part[blockIdx.x * NORM_SUMS + slot[q]] = v;
    }
    if (threadIdx.x < 3)
        part[blockIdx.x * NORM_SUMS + 1 + threadIdx.x] = 0.0;
}

/* ---- cuBLAS in row-major terms ---------------------------------------------
 * Row-major X [r, c] with row stride ld is column-major X' [c, r] (ld ld).
 * gemm_rm computes, for each of `batch` heads, C = alpha op(A) op(B) +
 * beta C in row-major terms (C [M, N]) as the column-major C' = op(B)'
 * op(A)'. */
static unsigned grid_for_split(size_t n)
{
    size_t g = (n + 255) / 256;
    return (unsigned)(g > 4096 ? 4096 : g < 1 ? 1 : g);
}

/* ---- the GEMM precision mode (QMLA_CUDA_ENGINE_GEMM, run 12) ----------------
 * fp32 (default): cublasSgemmStridedBatched, CUBLAS_DEFAULT_MATH.
 * 3xtf32: each operand split into a TF32-representable high part (round to
 * nearest, 10 mantissa bits) and its float32 remainder; C = lo_A hi_B +
 * hi_A lo_B + hi_A hi_B (small terms first) by three TF32 tensor-core GEMMs
 * (CUBLAS_COMPUTE_32F_FAST_TF32) accumulating in float32; lo_A lo_B dropped.
 * A malformed value is an error at the engine's first use (device_enter). */
static int gemm_mode_v = -1; /* 0 fp32, 1 3xtf32, 2 malformed */
static char gemm_bad[48];
/* 0 for NULL, "" or "fp32", 1 for "3xtf32", -1 for anything else */
static int gemm_mode_of(const char *name)
{
    if (!name || !*name || strcmp(name, "fp32") == 0)
        return 0;
    return strcmp(name, "3xtf32") == 0 ? 1 : -1;
}
static int gemm_mode(void)
{
    if (gemm_mode_v < 0) {
        const char *e = getenv("QMLA_CUDA_ENGINE_GEMM");
        gemm_mode_v = gemm_mode_of(e);
        if (gemm_mode_v < 0) {
            snprintf(gemm_bad, sizeof gemm_bad, "%s", e);
            gemm_mode_v = 2;
        }
    }
    return gemm_mode_v;
}
extern "C" const char *qmla_cuda_engine_gemm_name(void)
{
    const int m = gemm_mode();
    return m == 0 ? "fp32" : m == 1 ? "3xtf32" : NULL;
}
extern "C" int qmla_cuda_engine_set_gemm(const char *name)
{
    const int old = gemm_mode(), m = gemm_mode_of(name);
    if (m < 0)
        return -1;
    gemm_mode_v = m;
    return old;
}
/* NULL when the mode is valid, else the message */
extern "C" const char *qmla_cuda_engine_gemm_error(void)
{
    char msg[160];
    if (gemm_mode() != 2)
        return NULL;
    snprintf(msg, sizeof msg, "QMLA_CUDA_ENGINE_GEMM=\"%s\": expected fp32 or 3xtf32",
             gemm_bad);
    const char *r = intern(msg);
    return r ? r : "QMLA_CUDA_ENGINE_GEMM: malformed (out of memory for the message)";
}

static __global__ void tf32_split_kernel(const float *x, float *hi, float *lo, size_t n)
{
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        const float v = x[k];
        if (!isfinite(v)) {
            hi[k] = v;
            lo[k] = 0.0f;
            continue;
        }
        /* round to nearest (ties away) at the 13th mantissa bit */
        const unsigned u = (__float_as_uint(v) + 0x1000u) & 0xffffe000u;
        float h = __uint_as_float(u);
        if (!isfinite(h))
            h = __uint_as_float(__float_as_uint(v) & 0xffffe000u);
        hi[k] = h;
        lo[k] = v - h;
    }
}

/* per cuBLAS handle a scratch buffer for the split operands, stream-ordered */
typedef struct {
    cublasHandle_t h;
    float *buf;
    size_t cap;
} tf32_scratch;
#define TF32_SLOTS 32
static tf32_scratch tf32_tab[TF32_SLOTS];
static pthread_mutex_t tf32_mu = PTHREAD_MUTEX_INITIALIZER;

/* The handle's scratch of at least n floats, or NULL with tf32_why set
 * (the product's shape for the message: M, N, K, batch). */
static float *tf32_buf(cublasHandle_t h, cudaStream_t s, size_t n, size_t M, size_t N,
                       size_t K, size_t batch)
{
    float *r = NULL;
    int full = 0;
    pthread_mutex_lock(&tf32_mu);
    tf32_scratch *e = NULL;
    for (int k = 0; k < TF32_SLOTS && !e; k++)
        if (tf32_tab[k].h == h)
            e = &tf32_tab[k];
    for (int k = 0; k < TF32_SLOTS && !e; k++)
        if (!tf32_tab[k].h) {
            e = &tf32_tab[k];
            e->h = h;
        }
    if (e) {
        if (e->cap < n) {
            if (e->buf)
                cudaFreeAsync(e->buf, s);
            e->buf = NULL;
            e->cap = 0;
            if (cudaMallocAsync((void **)&e->buf, n * sizeof(float), s) == cudaSuccess)
                e->cap = n;
            else {
                e->buf = NULL;
                cudaGetLastError(); /* the allocation's own error, reported below */
            }
        }
        r = e->buf;
    } else
        full = 1;
    pthread_mutex_unlock(&tf32_mu);
    if (!r) {
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
            cudaGetLastError();
            fr = 0;
        }
        if (full)
            snprintf(tf32_why, sizeof tf32_why, "3xTF32 split scratch: all %d handle slots "
                     "hold a scratch (more cuBLAS handles at once than the table has)",
                     TF32_SLOTS);
        else
            snprintf(tf32_why, sizeof tf32_why, "3xTF32 split scratch of %.1f MiB needed (the "
                     "hi and lo parts of both operands of a [%zu x %zu] x [%zu x %zu] product, "
                     "batch %zu), %.1f MiB free on the device: use a smaller "
                     "QMLA_CUDA_ENGINE_TILE or QMLA_CUDA_ENGINE_GEMM=fp32",
                     (double)n * sizeof(float) / 1048576.0, M, K, K, N, batch,
                     (double)fr / 1048576.0);
    }
    return r;
}

/* The handle's scratch freed and its slot emptied: called before every
 * cublasDestroy (run 12's table of 32 slots filled up without it: each
 * workspace makes a handle, and the test's later cases failed with
 * CUBLAS_STATUS_ALLOC_FAILED) */
static void tf32_release(cublasHandle_t h)
{
    pthread_mutex_lock(&tf32_mu);
    for (int k = 0; k < TF32_SLOTS; k++)
        if (tf32_tab[k].h == h) {
            if (tf32_tab[k].buf) {
                cudaDeviceSynchronize();
                cudaFree(tf32_tab[k].buf);
            }
            tf32_tab[k].h = NULL;
            tf32_tab[k].buf = NULL;
            tf32_tab[k].cap = 0;
        }
    pthread_mutex_unlock(&tf32_mu);
}

static size_t footprint(size_t rows, size_t cols, size_t ld, long long stride, size_t batch)
{
    return (batch > 1 && stride > 0 ? (batch - 1) * (size_t)stride : 0) + (rows - 1) * ld + cols;
}

static cublasStatus_t gemm_tf32_ex(cublasHandle_t h, int ta, int tb, size_t M, size_t N,
                                   size_t K, float alpha, const float *A, size_t lda,
                                   long long sA, const float *Bm, size_t ldb, long long sB,
                                   float beta, float *C, size_t ldc, long long sC, size_t batch)
{
    return cublasGemmStridedBatchedEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                      ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K,
                                      &alpha, Bm, CUDA_R_32F, (int)ldb, sB, A, CUDA_R_32F,
                                      (int)lda, sA, &beta, C, CUDA_R_32F, (int)ldc, sC,
                                      (int)batch, CUBLAS_COMPUTE_32F_FAST_TF32,
                                      CUBLAS_GEMM_DEFAULT);
}

static cublasStatus_t gemm_3xtf32(cublasHandle_t h, int ta, int tb, size_t M, size_t N,
                                  size_t K, float alpha, const float *A, size_t lda,
                                  long long sA, const float *Bm, size_t ldb, long long sB,
                                  float beta, float *C, size_t ldc, long long sC, size_t batch)
{
    if (M == 0 || N == 0 || batch == 0)
        return CUBLAS_STATUS_SUCCESS;
    if (K == 0)
        return gemm_tf32_ex(h, ta, tb, M, N, K, alpha, A, lda, sA, Bm, ldb, sB, beta, C, ldc,
                            sC, batch);
    const size_t fa = footprint(ta ? K : M, ta ? M : K, lda, sA, batch);
    const size_t fb = footprint(tb ? N : K, tb ? K : N, ldb, sB, batch);
    cudaStream_t s = 0;
    cublasGetStream(h, &s);
    /* a launch error pending from before this call: not cleared here, so
     * the caller's message (blas_fail) names it */
    if (cudaPeekAtLastError() != cudaSuccess)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    float *buf = tf32_buf(h, s, 2 * (fa + fb), M, N, K, batch);
    if (!buf)
        return CUBLAS_STATUS_ALLOC_FAILED;
    float *ah = buf, *al = buf + fa, *bh = buf + 2 * fa, *bl = buf + 2 * fa + fb;
    tf32_split_kernel<<<grid_for_split(fa), 256, 0, s>>>(A, ah, al, fa);
    tf32_split_kernel<<<grid_for_split(fb), 256, 0, s>>>(Bm, bh, bl, fb);
    if (cudaPeekAtLastError() != cudaSuccess) /* the split's launch: left pending, as above */
        return CUBLAS_STATUS_EXECUTION_FAILED;
    cublasStatus_t st;
    if ((st = gemm_tf32_ex(h, ta, tb, M, N, K, alpha, al, lda, sA, bh, ldb, sB, beta, C, ldc,
                           sC, batch)))
        return st;
    if ((st = gemm_tf32_ex(h, ta, tb, M, N, K, alpha, ah, lda, sA, bl, ldb, sB, 1.0f, C, ldc,
                           sC, batch)))
        return st;
    return gemm_tf32_ex(h, ta, tb, M, N, K, alpha, ah, lda, sA, bh, ldb, sB, 1.0f, C, ldc, sC,
                        batch);
}

static cublasStatus_t gemm_rm(cublasHandle_t h, int ta, int tb, size_t M, size_t N,
                              size_t K, float alpha, const float *A, size_t lda,
                              long long sA, const float *Bm, size_t ldb, long long sB,
                              float beta, float *C, size_t ldc, long long sC, size_t batch)
{
    if (gemm_mode() == 1)
        return gemm_3xtf32(h, ta, tb, M, N, K, alpha, A, lda, sA, Bm, ldb, sB, beta, C, ldc,
                           sC, batch);
    return cublasSgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K,
                                     &alpha, Bm, (int)ldb, sB, A, (int)lda, sA, &beta, C,
                                     (int)ldc, sC, (int)batch);
}

/* ---- the sweep workspace ------------------------------------------------------ */

typedef struct cuda_sweep_ws {
    qmla_mla_dims d;
    size_t T_max, B; /* B: query tokens per tile */
    qmla_sweep_ws *cpu; /* --verify items */
    cudaStream_t stream;
    cublasHandle_t blas;
    /* inputs */
    float *qn, *qr, *C, *K, *Ec, *Er, *wuk, *wuv, *wo;
    /* absorbed queries, tiles */
    float *ql, *Z, *P1, *P2, *U, *O, *Y[5];
    double *part, *hpart; /* [n_tiles * NORM_BLOCKS * NORM_SUMS] */
    /* the weights on the device: those of these host arrays, until the
     * driver's layer_begin (or other pointers) says otherwise */
    const float *w_host[3];
    int w_valid;
    float *hE;            /* host [T_max, d_c + d_r]: the error directions (run 8) */
    float *hEp[2];        /* pinned [T_max, d_c + d_r] each: the error directions of
                             two configurations (one drawn while the GPU runs the
                             other) */
    /* the profile's GPU time: an event at the first work queued after a
     * synchronisation, one at the synchronisation */
    cudaEvent_t ev0, ev1;
    int seg_open;
    /* the error directions' thread count, chosen by timing: [0] the serial
     * form, [1] ex's threads (the two give the same bits; H200 run 10 found
     * the parallel form faster at V2-Lite and slower at V3, cause not
     * established) */
    double dir_s[2];
    unsigned long dir_n[2], dir_calls;
    /* since run 10 the inputs (and weights) go to the device through two
     * pinned staging slots, filled by a parallel memcpy on `threads` host
     * threads while the slot before is copied (stage_ev: its copy done) */
    char *stage[2];
    cudaEvent_t stage_ev[2];
    int stage_busy[2], stage_next, threads;
    /* after a sequence: ||Y||^2 of its clean pass, and whether Z still
     * holds its whole attention A and Y[0] its clean output (one tile):
     * the JVPs and the joint pass of the same sequence reuse them */
    double yy;
    int a_valid;
} cuda_sweep_ws;

static void sweep_ws_free(void *p)
{
    device_enter_quiet();
    cuda_sweep_ws *w = (cuda_sweep_ws *)p;
    if (!w)
        return;
    float **f[] = {&w->qn, &w->qr, &w->C,  &w->K,  &w->Ec, &w->Er, &w->wuk, &w->wuv,
                   &w->wo, &w->ql, &w->Z,  &w->P1, &w->P2, &w->U,  &w->O};
    for (size_t k = 0; k < sizeof f / sizeof *f; k++)
        if (*f[k])
            cudaFree(*f[k]);
    for (int k = 0; k < 5; k++)
        if (w->Y[k])
            cudaFree(w->Y[k]);
    if (w->part)
        cudaFree(w->part);
    if (w->hpart)
        cudaFreeHost(w->hpart);
    free(w->hE);
    for (int k = 0; k < 2; k++)
        if (w->hEp[k])
            cudaFreeHost(w->hEp[k]);
    for (int k = 0; k < 2; k++) {
        if (w->stage[k])
            cudaFreeHost(w->stage[k]);
        if (w->stage_ev[k])
            cudaEventDestroy(w->stage_ev[k]);
    }
    if (w->ev0)
        cudaEventDestroy(w->ev0);
    if (w->ev1)
        cudaEventDestroy(w->ev1);
    if (w->blas) {
        tf32_release(w->blas);
        cublasDestroy(w->blas);
    }
    if (w->stream)
        cudaStreamDestroy(w->stream);
    if (w->cpu) {
        qmla_sweep_ws_free(w->cpu);
        free(w->cpu);
    }
    free(w);
}

static size_t ntiles(size_t T, size_t B) { return (T + B - 1) / B; }

#define STAGE_BYTES ((size_t)16 << 20)

/* Work is about to be queued on w's stream: the profile's GPU segment
 * starts here unless it has already. */
static void prof_mark(cuda_sweep_ws *w)
{
    if (prof_on() && !w->seg_open && cudaEventRecord(w->ev0, w->stream) == cudaSuccess)
        w->seg_open = 1;
}

/* cudaStreamSynchronize of w's stream, its wait and the segment's GPU time
 * in the profile. */
static cudaError_t ws_sync(cuda_sweep_ws *w)
{
    if (!prof_on())
        return cudaStreamSynchronize(w->stream);
    const int seg = w->seg_open && cudaEventRecord(w->ev1, w->stream) == cudaSuccess;
    const double t0 = wall_now();
    const cudaError_t e = cudaStreamSynchronize(w->stream);
    prof.s[QMLA_CUDA_PH_WAIT] += wall_now() - t0;
    prof.syncs++;
    if (seg && e == cudaSuccess) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, w->ev0, w->ev1) == cudaSuccess)
            prof.s[QMLA_CUDA_PH_GPU] += 1e-3 * (double)ms;
    }
    w->seg_open = 0;
    return e;
}

/* h2d through the pinned staging slots (since run 10; the run-8
 * sequences and copies under 1 MiB as plain h2d): chunks of at most
 * STAGE_BYTES memcpy'd on w->threads threads into a slot whose last copy
 * has run, then copied from it asynchronously. */
static cudaError_t h2d(cuda_sweep_ws *w, void *dst, const void *src, size_t bytes);
static cudaError_t h2d_staged(cuda_sweep_ws *w, void *dst, const void *src, size_t bytes)
{
    if (before_r8() || bytes < ((size_t)1 << 20))
        return h2d(w, dst, src, bytes);
    prof_mark(w);
    for (size_t off = 0; off < bytes; off += STAGE_BYTES) {
        const size_t n = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
        const int k = w->stage_next;
        w->stage_next ^= 1;
        cudaError_t e;
        if (w->stage_busy[k]) {
            const double t0 = ph_begin();
            e = cudaEventSynchronize(w->stage_ev[k]);
            ph_end(QMLA_CUDA_PH_WAIT, t0);
            if (e != cudaSuccess)
                return e;
        }
        const double t0 = ph_begin();
        qmla_memcpy_par(w->stage[k], (const char *)src + off, n, w->threads);
        e = cudaMemcpyAsync((char *)dst + off, w->stage[k], n, cudaMemcpyHostToDevice, w->stream);
        ph_end(QMLA_CUDA_PH_H2D, t0);
        if (prof_on()) {
            prof.h2d_calls++;
            prof.h2d_bytes += (double)n;
        }
        if (e != cudaSuccess || (e = cudaEventRecord(w->stage_ev[k], w->stream)) != cudaSuccess)
            return e;
        w->stage_busy[k] = 1;
    }
    return cudaSuccess;
}

/* A host-to-device copy on w's stream, timed in the profile. */
static cudaError_t h2d(cuda_sweep_ws *w, void *dst, const void *src, size_t bytes)
{
    if (!prof_on())
        return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, w->stream);
    prof_mark(w);
    const double t0 = wall_now();
    const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, w->stream);
    prof.s[QMLA_CUDA_PH_H2D] += wall_now() - t0;
    prof.h2d_calls++;
    prof.h2d_bytes += (double)bytes;
    return e;
}

static int sweep_ws_alloc(const qmla_mla_dims *d, size_t T_max, int verify, void **out,
                          qmla_error *err)
{
    *out = NULL;
    {
        const int ds_ = device_enter(err);
        if (ds_)
            return ds_;
    }
    if (T_max == 0)
        return qmla_error_set(err, QMLA_EINVAL, "cuda engine: T_max = 0");
    int st = QMLA_OK;
    cuda_sweep_ws *w = (cuda_sweep_ws *)calloc(1, sizeof *w);
    if (!w)
        return qmla_error_set(err, QMLA_ENOMEM, "cuda engine: out of memory");
    const size_t H = d->H, dc = d->d_c, dr = d->d_r, dn = d->d_n, dv = d->d_v, D = d->D;
    const size_t T = T_max, HV = H * dv;
    size_t free_b = 0, total_b = 0;
    w->d = *d;
    w->T_max = T;
    if (verify) {
        if (!(w->cpu = (qmla_sweep_ws *)calloc(1, sizeof *w->cpu))) {
            st = qmla_error_set(err, QMLA_ENOMEM, "cuda engine: out of memory");
            goto out;
        }
        if ((st = qmla_sweep_ws_alloc(d, T, 1, w->cpu, err))) {
            free(w->cpu);
            w->cpu = NULL;
            goto out;
        }
    }
    CU(cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking), "stream");
    CB(cublasCreate(&w->blas), "cublasCreate");
    CB(cublasSetStream(w->blas, w->stream), "cublasSetStream");
    /* float32 products, no TF32 (matched-NMSE responses difference nearby
     * outputs; docs/cuda-engine.md) */
    CB(cublasSetMathMode(w->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    CU(cudaMalloc((void **)&w->qn, H * T * dn * sizeof(float)), "q_nope");
    CU(cudaMalloc((void **)&w->qr, H * T * dr * sizeof(float)), "q_rope");
    CU(cudaMalloc((void **)&w->C, T * dc * sizeof(float)), "c_kv");
    CU(cudaMalloc((void **)&w->K, T * dr * sizeof(float)), "k_rope");
    CU(cudaMalloc((void **)&w->Ec, T * dc * sizeof(float)), "content error");
    CU(cudaMalloc((void **)&w->Er, T * dr * sizeof(float)), "RoPE error");
    CU(cudaMalloc((void **)&w->wuk, H * dn * dc * sizeof(float)), "w_uk");
    CU(cudaMalloc((void **)&w->wuv, H * dv * dc * sizeof(float)), "w_uv");
    CU(cudaMalloc((void **)&w->wo, D * HV * sizeof(float)), "w_o");
    CU(cudaMalloc((void **)&w->ql, H * T * dc * sizeof(float)), "absorbed queries");
    /* the tile: three [H, B, T] arrays dominate; a quarter of the free
     * device memory (at most 8 GiB) for them */
    CU(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    {
        double budget = (double)free_b / 4.0;
        if (budget > 8.0 * 1073741824.0)
            budget = 8.0 * 1073741824.0;
        double row = 3.0 * (double)H * (double)T * 4.0 +
                     4.0 * ((double)H * dc + (double)HV + 5.0 * D);
        if (gemm_mode() == 1) {
            /* 3xTF32 (review12): the split scratch of the largest product, hi and lo of
             * both operands, counted: at most (D + B) HV for the projection, H B T + T d_c
             * for the aggregations, H T d + H d d_c for the logits and absorbed queries */
            const double dm = (double)(dc > dn ? dc : dn);
            const double fixed = 8.0 * ((double)D * HV + (double)H * T * dm +
                                        (double)H * dn * dc + (double)T * dc);
            budget -= fixed;
            row += 8.0 * ((double)HV + (double)H * T);
        }
        size_t B = budget > 0.0 ? (size_t)(budget / row) : 0;
        if (B > T)
            B = T;
        /* QMLA_CUDA_ENGINE_TILE=N (run 11's benchmark of causal tiles: the
         * products of query tile k span only keys < (k+1) B) caps it like
         * the test hook; results agree within rounding, not bit for bit */
        size_t cap = tile_set();
        if (!cap)
            cap = env_tile();
        if (cap && B > cap)
            B = cap;
        if (B < 1)
            B = 1;
        w->B = B;
    }
    {
        const size_t B = w->B, nt = ntiles(T, B);
        CU(cudaMalloc((void **)&w->Z, H * B * T * sizeof(float)), "logits tile");
        CU(cudaMalloc((void **)&w->P1, H * B * T * sizeof(float)), "content tile");
        CU(cudaMalloc((void **)&w->P2, H * B * T * sizeof(float)), "RoPE tile");
        CU(cudaMalloc((void **)&w->U, H * B * dc * sizeof(float)), "latent tile");
        CU(cudaMalloc((void **)&w->O, B * HV * sizeof(float)), "head-output tile");
        for (int k = 0; k < 5; k++)
            CU(cudaMalloc((void **)&w->Y[k], B * D * sizeof(float)), "output tile");
        CU(cudaMalloc((void **)&w->part, nt * NORM_BLOCKS * NORM_SUMS * sizeof(double)),
           "partial sums");
        CU(cudaMallocHost((void **)&w->hpart, nt * NORM_BLOCKS * NORM_SUMS * sizeof(double)),
           "host partial sums");
    }
    if (!(w->hE = (float *)malloc(T * (dc + dr) * sizeof(float)))) {
        st = qmla_error_set(err, QMLA_ENOMEM, "cuda engine: out of memory");
        goto out;
    }
    for (int k = 0; k < 2; k++)
        CU(cudaMallocHost((void **)&w->hEp[k], T * (dc + dr) * sizeof(float)),
           "host error directions");
    CU(cudaEventCreate(&w->ev0), "event");
    CU(cudaEventCreate(&w->ev1), "event");
    for (int k = 0; k < 2; k++) {
        CU(cudaMallocHost((void **)&w->stage[k], STAGE_BYTES), "input staging");
        CU(cudaEventCreateWithFlags(&w->stage_ev[k], cudaEventDisableTiming), "event");
    }
    w->threads = 1;
out:
    if (st) {
        sweep_ws_free(w);
        return st;
    }
    *out = w;
    return QMLA_OK;
}

/* Host memory the workspace takes (the device memory is checked by
 * cudaMalloc): the error directions (three buffers), the two pinned input
 * staging slots, and the CPU workspace of --verify. */
static double sweep_ws_bytes(const qmla_mla_dims *d, size_t T_max, int verify)
{
    const double host = 3.0 * 4.0 * (double)T_max * (double)(d->d_c + d->d_r) +
                        2.0 * (double)STAGE_BYTES;
    return host + (verify ? qmla_sweep_ws_bytes(d, T_max, 1) : 0.0);
}

static void zero_response(qmla_response *r)
{
    r->nmse_cache = r->nmse_out = r->response = 0.0;
    r->nmse_out_matching = r->nmse_out_aggregation = 0.0;
    r->nmse_out_interaction = r->nmse_qdq = r->route_residual = 0.0;
    r->verified = 0;
}

/* U (the latent tile) -> O -> Y for one tile of Bt tokens. */
static cublasStatus_t project_tile(cuda_sweep_ws *w, size_t Bt, float *Y)
{
    const qmla_mla_dims *d = &w->d;
    const size_t H = d->H, dc = d->d_c, dv = d->d_v, HV = H * dv;
    /* O[t, h dv + v] = sum_c U[h, t, c] w_uv[h, v, c] */
    cublasStatus_t s = gemm_rm(w->blas, 0, 1, Bt, dv, dc, 1.0f, w->U, dc,
                               (long long)(Bt * dc), w->wuv, dc, (long long)(dv * dc), 0.0f,
                               w->O, HV, (long long)dv, H);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    /* Y = O w_o^T */
    return gemm_rm(w->blas, 0, 1, Bt, d->D, HV, 1.0f, w->O, HV, 0, w->wo, HV, 0, 0.0f, Y,
                   d->D, 0, 1);
}

/* ---- causal row blocks (run 13) -------------------------------------------
 * The rows of a query tile (tokens t0 .. t0 + Bt - 1, keys 0 .. L - 1,
 * L = t0 + Bt) in blocks of causal_block(Bt) rows: the rows [r0, r1) see
 * only the keys < t0 + r1, so their logit products are formed for those
 * keys alone and their aggregations sum over those keys alone. What is
 * left out is masked: the softmax kernels read the keys <= the row's token
 * and write zeros after it, so no value read changes; the sums are the
 * same terms (cuBLAS may order them otherwise: agreement within rounding).
 * A one-tile V3 sequence of 512 tokens: 4 blocks of 128 rows, 62.5 % of
 * the square's products. Tiles of at most 128 rows are one block, the
 * products as before. QMLA_CUDA_ENGINE_R12=1: one block. */
static size_t causal_block(size_t Bt)
{
    if (qmla_cuda_engine_r12())
        return Bt > 0 ? Bt : 1;
    size_t R = (Bt + 7) / 8;
    return R < 128 ? 128 : R;
}

static size_t causal_keys(size_t t0, size_t r1, size_t L) { return t0 + r1 < L ? t0 + r1 : L; }

/* C[h][r, s] = alpha Q[h][r, :] . Kt[s, :] + beta C[h][r, s] for the tile's
 * rows r < Bt and the keys s their block sees: Q [H][Bt, K] (row stride K,
 * head stride T K: rows of the sequence's [H, T, K] queries from t0), Kt
 * [L, K] shared by the heads, C [H][Bt, L]. */
static cublasStatus_t logits_tile(cuda_sweep_ws *w, size_t T, size_t Bt, size_t L, size_t t0,
                                  size_t K, float alpha, const float *Q, const float *Kt,
                                  float beta, float *C)
{
    const size_t R = causal_block(Bt);
    const long long sC = (long long)(Bt * L);
    for (size_t r0 = 0; r0 < Bt; r0 += R) {
        const size_t r1 = r0 + R < Bt ? r0 + R : Bt;
        const cublasStatus_t s = gemm_rm(w->blas, 0, 1, r1 - r0, causal_keys(t0, r1, L), K,
                                         alpha, Q + r0 * K, K, (long long)(T * K), Kt, K, 0,
                                         beta, C + r0 * L, L, sC, w->d.H);
        if (s != CUBLAS_STATUS_SUCCESS)
            return s;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* U (+)= X_tile-weights (Bt x L per head, masked after each row's token)
 * times V [L, dc] (shared by heads), over the keys each row block sees;
 * beta 0 overwrites U, 1 adds to it. */
static cublasStatus_t aggregate_tile_beta(cuda_sweep_ws *w, size_t Bt, size_t L, size_t t0,
                                          const float *A, const float *V, float beta)
{
    const size_t H = w->d.H, dc = w->d.d_c, R = causal_block(Bt);
    for (size_t r0 = 0; r0 < Bt; r0 += R) {
        const size_t r1 = r0 + R < Bt ? r0 + R : Bt;
        const cublasStatus_t s = gemm_rm(w->blas, 0, 0, r1 - r0, dc, causal_keys(t0, r1, L),
                                         1.0f, A + r0 * L, L, (long long)(Bt * L), V, dc, 0,
                                         beta, w->U + r0 * dc, dc, (long long)(Bt * dc), H);
        if (s != CUBLAS_STATUS_SUCCESS)
            return s;
    }
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t aggregate_tile(cuda_sweep_ws *w, size_t Bt, size_t L, size_t t0,
                                     const float *A, const float *V)
{
    return aggregate_tile_beta(w, Bt, L, t0, A, V, 0.0f);
}

/* One sequence's inputs to the device (q_nope, q_rope, c_kv, k_rope; the
 * layer's weights unless the device copies are those of these host
 * arrays), then the absorbed queries ql[h] = q_nope[h] w_uk[h]. On the
 * workspace's stream, not synchronised. */
static int seq_upload(cuda_sweep_ws *w, const qmla_mla_weights *wt, const float *q_nope,
                      const float *q_rope, const float *C, const float *K, size_t T,
                      qmla_error *err)
{
    const qmla_mla_dims *d = &w->d;
    const size_t H = d->H, dc = d->d_c, dr = d->d_r, dn = d->d_n, dv = d->d_v, D = d->D;
    const size_t HV = H * dv;
    int st = QMLA_OK;
    prof_mark(w);
    CU(h2d_staged(w, w->qn, q_nope, H * T * dn * sizeof(float)), "copy q_nope");
    CU(h2d_staged(w, w->qr, q_rope, H * T * dr * sizeof(float)), "copy q_rope");
    CU(h2d_staged(w, w->C, C, T * dc * sizeof(float)), "copy c_kv");
    CU(h2d_staged(w, w->K, K, T * dr * sizeof(float)), "copy k_rope");
    if (!(w->w_valid && w->w_host[0] == wt->w_uk && w->w_host[1] == wt->w_uv &&
          w->w_host[2] == wt->w_o)) {
        w->w_valid = 0;
        CU(h2d_staged(w, w->wuk, wt->w_uk, H * dn * dc * sizeof(float)), "copy w_uk");
        CU(h2d_staged(w, w->wuv, wt->w_uv, H * dv * dc * sizeof(float)), "copy w_uv");
        CU(h2d_staged(w, w->wo, wt->w_o, D * HV * sizeof(float)), "copy w_o");
        w->w_host[0] = wt->w_uk;
        w->w_host[1] = wt->w_uv;
        w->w_host[2] = wt->w_o;
        w->w_valid = 1;
    }
    /* absorption: ql[h] = q_nope[h] w_uk[h]  ([T, dn] x [dn, dc]) */
    CB(gemm_rm(w->blas, 0, 0, T, dc, dn, 1.0f, w->qn, dn, (long long)(T * dn), w->wuk, dc,
               (long long)(dn * dc), 0.0f, w->ql, dc, (long long)(T * dc), H),
       "absorption");
out:
    return st;
}

/* The error directions of one sequence's two paths under p, on the host:
 * the CPU's own (qmla_sweep_error_direction; since run 10 its parallel
 * form on ex's threads, the same bits) into E (T (d_c + d_r) floats:
 * content, then RoPE), with their norms and flags. */
typedef struct sweep_dirs {
    float *E[2];
    double xx[2], nmse_qdq[2], nmse_cache[2];
    int degenerate[2];
} sweep_dirs;

static int sweep_prep(cuda_sweep_ws *w, const qmla_exec *ex, const qmla_sweep_params *p,
                      const qmla_mla_dims *d, size_t T, const float *C, const float *K, float *E,
                      sweep_dirs *r, qmla_error *err)
{
    const size_t dc = d->d_c, dr = d->d_r;
    const double t0 = ph_begin();
    r->E[0] = E;
    r->E[1] = E + T * dc;
    int st = QMLA_OK;
    /* serial or parallel: each form twice, then the faster one, the other
     * again every 64th call */
    const int nth = qmla_exec_threads(ex);
    w->threads = nth;
    int par = 0;
    if (nth > 1 && !before_r8()) {
        const unsigned long k = w->dir_calls++;
        if (k < 4)
            par = (int)(k & 1);
        else {
            const int best = w->dir_s[1] / (double)w->dir_n[1] < w->dir_s[0] / (double)w->dir_n[0];
            par = k % 64 == 0 ? !best : best;
        }
    }
    const qmla_exec ex1 = qmla_exec_cpu(1), *exd = par ? ex : &ex1;
    const double td = wall_now();
    for (int path = 0; path < 2 && !st; path++) {
        const int content = path == QMLA_PATH_CONTENT;
        st = before_r8()
                 ? qmla_sweep_error_direction(p, content ? C : K, T, content ? dc : dr,
                                              r->E[path], &r->xx[path], &r->nmse_qdq[path],
                                              &r->nmse_cache[path], &r->degenerate[path], err)
                 : qmla_sweep_error_direction_par(exd, p, content ? C : K, T, content ? dc : dr,
                                                  r->E[path], &r->xx[path], &r->nmse_qdq[path],
                                                  &r->nmse_cache[path], &r->degenerate[path],
                                                  err);
        if (st)
            qmla_error_prefix(err, "%s cache: ", qmla_path_name(path));
    }
    if (nth > 1 && !before_r8()) {
        w->dir_s[par] += wall_now() - td;
        w->dir_n[par]++;
    }
    ph_end(QMLA_CUDA_PH_DIR, t0);
    return st;
}

/* The sweep of one sequence (the table's `sequence`: totals 0, clean 1,
 * upload 1), or its response-only form for the operator's finite gains
 * (totals 1): only the two perturbed totals ||Y(C + E_C) - Y||^2 (one
 * projection of the summed content latents) and ||Y(K + E_R) - Y||^2, not
 * the three content routes apart; out[] then has nmse_cache, nmse_qdq,
 * nmse_out, response and degenerate, the per-route NMSEs 0. clean 0 (only
 * with totals) leaves out the clean output and takes ||Y||^2 from the
 * workspace (w->yy of the same sequence's earlier pass); upload 0 keeps the
 * inputs and absorbed queries of that earlier pass on the device (the same
 * q_nope, q_rope, C, K and weights: the caller's promise).
 * sweep_enqueue queues it on the stream with the directions r (sweep_prep)
 * and the sums' copy to the host, without waiting; sweep_finish waits and
 * forms out[]. Between the two the caller may queue more work (the JVPs of
 * the directions, which stay in w->Ec, w->Er) and draw the next
 * directions. */
static int sweep_enqueue(const qmla_mla_dims *d, size_t T, const qmla_mla_weights *wt,
                         const float *q_nope, const float *q_rope, const float *C,
                         const float *K, cuda_sweep_ws *w, const sweep_dirs *r, int totals,
                         int clean, int upload, qmla_error *err)
{
    const size_t H = d->H, dc = d->d_c, dr = d->d_r, D = d->D;
    const size_t B = w->B, nt = ntiles(T, B);
    const float tau = (float)d->tau;
    int st = QMLA_OK;
    w->a_valid = 0;
    const int run[2] = {!r->degenerate[0], !r->degenerate[1]};
    if (!totals)
        clean = upload = 1;
    cudaStream_t s = w->stream;
    prof_mark(w);
    if (upload && (st = seq_upload(w, wt, q_nope, q_rope, C, K, T, err)))
        goto out;
    CU(h2d(w, w->Ec, r->E[0], T * dc * sizeof(float)), "copy content error");
    CU(h2d(w, w->Er, r->E[1], T * dr * sizeof(float)), "copy RoPE error");
    for (size_t k = 0; k < nt; k++) {
        const size_t t0 = k * B, t1 = t0 + B < T ? t0 + B : T, Bt = t1 - t0, L = t1;
        const size_t nZ = H * Bt * L;
        const float *qlt = w->ql + t0 * dc, *qrt = w->qr + t0 * dr;
        /* Z = tau ql C^T, += tau q_rope K^T (keys 0..L-1, causal row blocks) */
        CB(logits_tile(w, T, Bt, L, t0, dc, tau, qlt, w->C, 0.0f, w->Z), "content logits");
        CB(logits_tile(w, T, Bt, L, t0, dr, tau, qrt, w->K, 1.0f, w->Z), "RoPE logits");
        /* perturbed logits */
        if (run[0]) {
            CU(cudaMemcpyAsync(w->P1, w->Z, nZ * sizeof(float), cudaMemcpyDeviceToDevice, s),
               "copy logits");
            CB(logits_tile(w, T, Bt, L, t0, dc, tau, qlt, w->Ec, 1.0f, w->P1),
               "content perturbed logits");
        }
        if (run[1]) {
            CU(cudaMemcpyAsync(w->P2, w->Z, nZ * sizeof(float), cudaMemcpyDeviceToDevice, s),
               "copy logits");
            CB(logits_tile(w, T, Bt, L, t0, dr, tau, qrt, w->Er, 1.0f, w->P2),
               "RoPE perturbed logits");
        }
        const unsigned rows = (unsigned)(H * Bt);
        softmax_rows_kernel<<<rows, SM_THREADS, 0, s>>>(w->Z, NULL, w->Z, Bt, L, t0);
        CU(cudaGetLastError(), "softmax");
        if (run[0]) {
            softmax_rows_kernel<<<rows, SM_THREADS, 0, s>>>(w->P1, w->Z, w->P1, Bt, L, t0);
            CU(cudaGetLastError(), "content softmax delta");
        }
        if (run[1]) {
            softmax_rows_kernel<<<rows, SM_THREADS, 0, s>>>(w->P2, w->Z, w->P2, Bt, L, t0);
            CU(cudaGetLastError(), "RoPE softmax delta");
        }
        if (totals) {
            /* response only: the clean output (when asked), the content
             * total from U = P1 C + A E_C + P1 E_C (one projection), the
             * RoPE route; Y[0] is not touched without clean */
            if (clean) {
                CB(aggregate_tile(w, Bt, L, t0, w->Z, w->C), "aggregation");
                CB(project_tile(w, Bt, w->Y[0]), "projection");
            }
            if (run[0]) {
                CB(aggregate_tile_beta(w, Bt, L, t0, w->P1, w->C, 0.0f), "content total");
                CB(aggregate_tile_beta(w, Bt, L, t0, w->Z, w->Ec, 1.0f), "content total");
                CB(aggregate_tile_beta(w, Bt, L, t0, w->P1, w->Ec, 1.0f), "content total");
                CB(project_tile(w, Bt, w->Y[1]), "projection");
            } else
                CU(cudaMemsetAsync(w->Y[1], 0, Bt * D * sizeof(float), s), "memset");
            if (run[1]) {
                CB(aggregate_tile(w, Bt, L, t0, w->P2, w->C), "RoPE matching route");
                CB(project_tile(w, Bt, w->Y[4]), "projection");
            } else
                CU(cudaMemsetAsync(w->Y[4], 0, Bt * D * sizeof(float), s), "memset");
            totals_kernel<<<NORM_BLOCKS, SM_THREADS, 0, s>>>(
                clean ? w->Y[0] : NULL, w->Y[1], w->Y[4], Bt * D,
                w->part + k * NORM_BLOCKS * NORM_SUMS);
            CU(cudaGetLastError(), "totals");
            continue;
        }
        /* the five outputs: clean; content matching, aggregation,
         * interaction; RoPE matching */
        CB(aggregate_tile(w, Bt, L, t0, w->Z, w->C), "aggregation");
        CB(project_tile(w, Bt, w->Y[0]), "projection");
        if (run[0]) {
            CB(aggregate_tile(w, Bt, L, t0, w->P1, w->C), "matching route");
            CB(project_tile(w, Bt, w->Y[1]), "projection");
            CB(aggregate_tile(w, Bt, L, t0, w->Z, w->Ec), "aggregation route");
            CB(project_tile(w, Bt, w->Y[2]), "projection");
            CB(aggregate_tile(w, Bt, L, t0, w->P1, w->Ec), "interaction route");
            CB(project_tile(w, Bt, w->Y[3]), "projection");
        } else
            for (int r = 1; r < 4; r++)
                CU(cudaMemsetAsync(w->Y[r], 0, Bt * D * sizeof(float), s), "memset");
        if (run[1]) {
            CB(aggregate_tile(w, Bt, L, t0, w->P2, w->C), "RoPE matching route");
            CB(project_tile(w, Bt, w->Y[4]), "projection");
        } else
            CU(cudaMemsetAsync(w->Y[4], 0, Bt * D * sizeof(float), s), "memset");
        norms_kernel<<<NORM_BLOCKS, SM_THREADS, 0, s>>>(
            w->Y[0], w->Y[1], w->Y[2], w->Y[3], w->Y[4], Bt * D,
            w->part + k * NORM_BLOCKS * NORM_SUMS);
        CU(cudaGetLastError(), "norms");
    }
    CU(cudaMemcpyAsync(w->hpart, w->part, nt * NORM_BLOCKS * NORM_SUMS * sizeof(double),
                       cudaMemcpyDeviceToHost, s),
       "copy sums");
    /* one tile: Z holds the sequence's whole attention (and Y[0] its clean
     * output when clean) for the JVPs and the joint pass queued after */
    w->a_valid = nt == 1;
out:
    return st;
}

static int sweep_finish(const qmla_mla_dims *d, size_t T, cuda_sweep_ws *w,
                        const sweep_dirs *r, int totals, int clean, qmla_response out[2],
                        qmla_error *err)
{
    const size_t nt = ntiles(T, w->B);
    int st = QMLA_OK;
    const int a_valid = w->a_valid;
    (void)d;
    if (!totals)
        clean = 1;
    out[0].path = QMLA_PATH_CONTENT;
    out[1].path = QMLA_PATH_ROPE;
    CU(ws_sync(w), "sweep sequence");
    {
        const double *nmse_qdq = r->nmse_qdq, *nmse_cache = r->nmse_cache;
        const int *degenerate = r->degenerate;
        double sum[NORM_SUMS] = {0, 0, 0, 0, 0, 0};
        for (size_t k = 0; k < nt * NORM_BLOCKS; k++)
            for (int q = 0; q < NORM_SUMS; q++)
                sum[q] += w->hpart[k * NORM_SUMS + q];
        const double yy = clean ? sum[0] : w->yy;
        w->yy = yy;
        w->a_valid = a_valid;
        if (!isfinite(yy))
            return qmla_error_set(err, QMLA_ENONFINITE,
                                  "clean attention pass: expected finite values, found %g as "
                                  "the sum of squares of the attention output Y = O W_O "
                                  "(float32 overflow; `qmla check` locates it)",
                                  yy);
        for (int path = 0; path < 2; path++) {
            qmla_response *r = &out[path];
            const int content = path == QMLA_PATH_CONTENT;
            zero_response(r);
            r->degenerate = degenerate[path] || yy == 0.0;
            if (r->degenerate)
                continue;
            const double m = content ? sum[1] : sum[5];
            const double a = content ? sum[2] : 0.0, i = content ? sum[3] : 0.0;
            const double tot = content ? sum[4] : m;
            r->nmse_cache = nmse_cache[path];
            r->nmse_qdq = nmse_qdq[path];
            r->nmse_out = tot / yy;
            r->response = r->nmse_out / nmse_cache[path];
            r->nmse_out_matching = m / yy;
            r->nmse_out_aggregation = a / yy;
            r->nmse_out_interaction = i / yy;
            if (!isfinite(r->response) || !isfinite(r->nmse_out))
                return qmla_error_set(err, QMLA_ENONFINITE,
                                      "%s path: non-finite output NMSE (%g)",
                                      qmla_path_name(path), r->nmse_out);
        }
    }
out:
    if (st)
        cudaStreamSynchronize(w->stream);
    return st;
}

static int sweep_run(const qmla_exec *ex, const qmla_sweep_params *p, const qmla_mla_dims *d,
                     size_t T, const qmla_mla_weights *wt, const float *q_nope,
                     const float *q_rope, const float *C, const float *K, int verify,
                     void *ws, qmla_response out[2], int totals, int clean, int upload,
                     qmla_error *err)
{
    cuda_sweep_ws *w = (cuda_sweep_ws *)ws;
    if (T == 0 || T > w->T_max)
        return qmla_error_set(err, QMLA_EINVAL, "sweep: T = %zu outside [1, %zu]", T,
                              w->T_max);
    if (verify) {
        if (!w->cpu)
            return qmla_error_set(err, QMLA_EINVAL,
                                  "sweep: workspace allocated without verify");
        /* the route identity's full perturbed forward runs on the CPU */
        return qmla_sweep_sequence(ex, p, d, T, wt, q_nope, q_rope, C, K, 1, w->cpu, out,
                                   err);
    }
    w->a_valid = 0;
    out[0].path = QMLA_PATH_CONTENT;
    out[1].path = QMLA_PATH_ROPE;
    sweep_dirs r;
    /* run 8: the directions in pageable memory */
    int st = sweep_prep(w, ex, p, d, T, C, K, before_r8() ? w->hE : w->hEp[0], &r, err);
    if (st)
        return st;
    if ((st = sweep_enqueue(d, T, wt, q_nope, q_rope, C, K, w, &r, totals, clean, upload, err))) {
        cudaStreamSynchronize(w->stream);
        return st;
    }
    return sweep_finish(d, T, w, &r, totals, clean, out, err);
}

static int sweep_sequence(const qmla_exec *ex, const qmla_sweep_params *p,
                          const qmla_mla_dims *d, size_t T, const qmla_mla_weights *wt,
                          const float *q_nope, const float *q_rope, const float *C,
                          const float *K, int verify, void *ws, qmla_response out[2],
                          qmla_error *err)
{
    {
        const int ds_ = device_enter(err);
        if (ds_)
            return ds_;
    }
    return sweep_run(ex, p, d, T, wt, q_nope, q_rope, C, K, verify, ws, out, 0, 1, 1, err);
}

/* Another layer: its weights are copied with its first sequence. */
static void sweep_layer_begin(void *ws) { ((cuda_sweep_ws *)ws)->w_valid = 0; }

extern "C" const qmla_sweep_ops qmla_cuda_sweep_ops = {sweep_ws_alloc, sweep_ws_bytes,
                                                      sweep_ws_free, sweep_sequence,
                                                      sweep_layer_begin};

/* ---- QDQ ----------------------------------------------------------------------- */

/* Host arrays in and out through device copies and the project's kernel
 * (kernels/qdq.cu), bit for bit the CPU's qmla_quant_qdq. */
static int cuda_qdq(const qmla_quant_params *p, const float *x, size_t T, size_t width,
                    uint8_t *codes, float *scale, float *lo, float *xhat, qmla_error *err)
{
    {
        const int ds_ = device_enter(err);
        if (ds_)
            return ds_;
    }
    int st = qmla_quant_check(p, width, err);
    if (st)
        return st;
    if (T == 0)
        return QMLA_OK;
    const size_t ng = width / (size_t)p->group, cb = qmla_quant_code_bytes(p, width);
    float *dx = NULL, *ds = NULL, *dl = NULL;
    uint8_t *dc = NULL;
    void *dws = NULL;
    cudaStream_t s = 0;
    CU(cudaMalloc((void **)&dx, T * width * sizeof(float)), "QDQ input");
    CU(cudaMalloc(&dws, QMLA_QDQ_CUDA_WS_BYTES), "QDQ workspace");
    if (codes)
        CU(cudaMalloc((void **)&dc, T * cb), "QDQ codes");
    if (scale)
        CU(cudaMalloc((void **)&ds, T * ng * sizeof(float)), "QDQ scales");
    if (lo)
        CU(cudaMalloc((void **)&dl, T * ng * sizeof(float)), "QDQ minima");
    CU(cudaMemcpy(dx, x, T * width * sizeof(float), cudaMemcpyHostToDevice), "QDQ copy in");
    if ((st = qmla_qdq_cuda_ws_init(dws, s, err)) ||
        (st = qmla_qdq_cuda(p, dx, T, width, dc, ds, dl, xhat ? dx : NULL, dws, s, err)))
        goto out;
    if (xhat)
        CU(cudaMemcpy(xhat, dx, T * width * sizeof(float), cudaMemcpyDeviceToHost), "QDQ out");
    if (codes)
        CU(cudaMemcpy(codes, dc, T * cb, cudaMemcpyDeviceToHost), "QDQ codes out");
    if (scale)
        CU(cudaMemcpy(scale, ds, T * ng * sizeof(float), cudaMemcpyDeviceToHost), "QDQ out");
    if (lo)
        CU(cudaMemcpy(lo, dl, T * ng * sizeof(float), cudaMemcpyDeviceToHost), "QDQ out");
out:
    cudaFree(dx);
    cudaFree(dc);
    cudaFree(ds);
    cudaFree(dl);
    cudaFree(dws);
    return st;
}

extern "C" const qmla_quant_ops qmla_cuda_quant_ops = {cuda_qdq};

/* ==== the operator model and the interventions ================================
 * (qmla_op_ops, qmla_iv_ops; C reference twins qmla_op_sequence and
 * qmla_intervene_sequence, lib/operator/predict.c and intervene.c, whose
 * JVPs are qmla_jvp_apply and whose sensitivities are qmla_sens_exact,
 * lib/operator/jvp.c.) Every pass reuses the sweep's workspace above: its
 * absorbed queries, caches and weights on the device, its tiles.
 *
 * JVP of one direction E on one path, per query tile (math.md §5):
 *   dZ = tau Q E^T                       (SGEMM; Q = ql or q_rope)
 *   dA = A ⊙ (dZ − rowsum(A ⊙ dZ))       (fused row kernel, sum in double)
 *   dU = dA C (+ A E, content)           (SGEMMs)  -> dO -> dY
 *   ||dY||^2 in double, one partial per block, summed on the host in order.
 * A is the sweep's (its Z tile) when the sequence is one tile, else
 * recomputed per tile.
 *
 * Exact sensitivities, the CPU's algebra (jvp.c's header) with the same
 * intermediate quantities, arranged for the GPU: per sequence Yc = C W_UV^T
 * and the key-token Grams yy_t[g,k] (per head g one SGEMM against K =
 * W_O^T W_O, then dot products in double); then chunks of ni query rows:
 * their attention (SGEMMs + softmax), head outputs O, OKb = O_k K_kg, xq =
 * q W_UV^T, X2 = xq_gk K_kg (one batched SGEMM of H^2 blocks), the
 * per-row constants Cc, Cr in double; the pair terms that need no GEMM
 * (one thread per (row, key token, head g), double); the pairwise terms
 * R1 = y_tg . X2_gk and R0 = y_tg . OKb_kg as SGEMMs with the key token
 * fastest (coalesced), reduced over k per (g, row, key token) in double;
 * the per-g partials then summed over g in order, and the rows summed per
 * key token in order. No atomics: bit-identical run after run. */

#include "qmla/intervene.h"
#include "qmla/predict.h"
#include "operator/op_shared.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

/* a[s] <- a[s] (dz[s] - sum_s' a[s'] dz[s']) over the causal keys of each
 * row of a [H, B, L] tile (rows as softmax_rows_kernel), zeros after; the
 * sum in double, rounded to float once, like qmla_attn_softmax_jvp. dz and
 * out may alias. */
static __global__ void softmax_jvp_kernel(const float *a, const float *dz, float *out,
                                          size_t B, size_t L, size_t t0)
{
    __shared__ double shd[SM_THREADS];
    const size_t row = blockIdx.x, r = row % B;
    const size_t n = t0 + r + 1;
    const float *ar = a + row * L, *zr = dz + row * L;
    float *o = out + row * L;
    double part = 0.0;
    for (size_t s = threadIdx.x; s < n; s += blockDim.x)
        part += (double)ar[s] * (double)zr[s];
    const float mf = (float)block_sum(part, shd);
    for (size_t s = threadIdx.x; s < n; s += blockDim.x)
        o[s] = ar[s] * (zr[s] - mf);
    for (size_t s = n + threadIdx.x; s < L; s += blockDim.x)
        o[s] = 0.0f;
}

/* Partial sums over n elements of x^2, or of (x - y)^2 when y is not NULL,
 * in double: one per block into part. */
static __global__ void sumsq_kernel(const float *x, const float *y, size_t n, double *part)
{
    __shared__ double sh[SM_THREADS];
    double s = 0.0;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        const double v = y ? (double)x[k] - (double)y[k] : (double)x[k];
        s += v * v;
    }
    const double v = block_sum(s, sh);
    if (threadIdx.x == 0)
        part[blockIdx.x] = v;
}

static __global__ void add_kernel(const float *a, const float *b, float *c, size_t n)
{
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x)
        c[k] = a[k] + b[k];
}

/* G[h, h2] = <M block (h, h2), K block (h, h2)> (dv x dv blocks of [HV, HV]
 * arrays), one block per (h, h2), in double. */
static __global__ void layer_gram_kernel(const float *M, const float *K, size_t H, size_t dv,
                                         double *G)
{
    __shared__ double sh[SM_THREADS];
    const size_t h = blockIdx.x / H, h2 = blockIdx.x % H, HV = H * dv;
    double s = 0.0;
    for (size_t q = threadIdx.x; q < dv * dv; q += blockDim.x) {
        const size_t a = q / dv, b = q % dv, o = (h * dv + a) * HV + h2 * dv + b;
        s += (double)M[o] * (double)K[o];
    }
    const double v = block_sum(s, sh);
    if (threadIdx.x == 0)
        G[blockIdx.x] = v;
}

/* out[(g H + k) T + t] = S[gl][t, k dv + j] . X[t, k dv + j] (double), for
 * the heads g = g0 + gl < g0 + gn; S [gn, T, HV], X [T, HV]. */
static __global__ void gram_rows_kernel(const float *S, const float *X, size_t T, size_t H,
                                        size_t dv, size_t g0, size_t gn, double *out)
{
    const size_t HV = H * dv, n = gn * H * T;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < n;
         q += (size_t)gridDim.x * blockDim.x) {
        const size_t t = q % T, k = (q / T) % H, gl = q / (T * H);
        const float *s = S + (gl * T + t) * HV + k * dv, *x = X + t * HV + k * dv;
        double v = 0.0;
        for (size_t j = 0; j < dv; j++)
            v += (double)s[j] * (double)x[j];
        out[((g0 + gl) * H + k) * T + t] = v;
    }
}

/* Per-row constants of a chunk of nc query rows i = i0 + il, index
 * (il H + g) H + k (as jvp.c's sens_block_rows):
 *   qc = q_gi . q_ki (content), qr (RoPE), oo = (O_gi K_gk) . O_ki,
 *   xo = X2_{g,k,i} . O_gi,
 *   Cc = tau^2 qc oo - 2 tau xo + G[g,k],  Cr = tau^2 qr oo. */
static __global__ void row_consts_kernel(const float *ql, const float *qr, const float *OKb,
                                         const float *Oc, const float *X2, const double *G,
                                         size_t T, size_t H, size_t dc, size_t dr, size_t dv,
                                         size_t i0, size_t nc, size_t ni, double tau,
                                         double *qcc, double *qrc, double *Cc, double *Cr)
{
    const size_t HV = H * dv, n = nc * H * H;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < n;
         q += (size_t)gridDim.x * blockDim.x) {
        const size_t k = q % H, g = (q / H) % H, il = q / (H * H), i = i0 + il;
        const float *a = ql + (g * T + i) * dc, *b = ql + (k * T + i) * dc;
        double c = 0.0, r = 0.0, oo = 0.0, xo = 0.0;
        for (size_t j = 0; j < dc; j++)
            c += (double)a[j] * (double)b[j];
        a = qr + (g * T + i) * dr;
        b = qr + (k * T + i) * dr;
        for (size_t j = 0; j < dr; j++)
            r += (double)a[j] * (double)b[j];
        const float *ok = OKb + (g * nc + il) * HV + k * dv, *ok2 = Oc + il * HV + k * dv;
        for (size_t j = 0; j < dv; j++)
            oo += (double)ok[j] * (double)ok2[j];
        const float *x2 = X2 + (g * ni + il) * HV + k * dv, *og = Oc + il * HV + g * dv;
        for (size_t j = 0; j < dv; j++)
            xo += (double)x2[j] * (double)og[j];
        qcc[q] = c;
        qrc[q] = r;
        Cc[q] = tau * tau * c * oo - 2.0 * tau * xo + G[g * H + k];
        Cr[q] = tau * tau * r * oo;
    }
}

/* A warp's sum of v over its lanes in double, a fixed butterfly (the same
 * order every run); the result in every lane. */
static __device__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* gram_rows_kernel's values (run 13), one warp per value: the lanes read
 * the d_v-long rows S[gl][t, k dv ..] and X[t, k dv ..] coalesced (the
 * thread-per-value form read 32 rows H d_v apart per load), each lane sums
 * its strided part in double, warp_sum the lanes. */
static __global__ void gram_rows_warp_kernel(const float *S, const float *X, size_t T, size_t H,
                                             size_t dv, size_t g0, size_t gn, double *out)
{
    const size_t HV = H * dv, n = gn * H * T, lane = threadIdx.x & 31u;
    for (size_t q = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5; q < n;
         q += ((size_t)gridDim.x * blockDim.x) >> 5) {
        const size_t t = q % T, k = (q / T) % H, gl = q / (T * H);
        const float *sr = S + (gl * T + t) * HV + k * dv, *x = X + t * HV + k * dv;
        double v = 0.0;
        for (size_t j = lane; j < dv; j += 32)
            v += (double)sr[j] * (double)x[j];
        v = warp_sum(v);
        if (lane == 0)
            out[((g0 + gl) * H + k) * T + t] = v;
    }
}

/* row_consts_kernel's values (run 13), one warp per (il, g, k): the lanes
 * read the rows of q, q_rope, O K, O and X2 coalesced (the thread-per-value
 * form read 32 rows a T d_c apart per load, each from its own cache line),
 * each lane sums its strided part in double, warp_sum the lanes. The same
 * values as row_consts_kernel up to the order of the double sums. */
static __global__ void row_consts_warp_kernel(const float *ql, const float *qr, const float *OKb,
                                              const float *Oc, const float *X2, const double *G,
                                              size_t T, size_t H, size_t dc, size_t dr,
                                              size_t dv, size_t i0, size_t nc, size_t ni,
                                              double tau, double *qcc, double *qrc, double *Cc,
                                              double *Cr)
{
    const size_t HV = H * dv, n = nc * H * H, lane = threadIdx.x & 31u;
    for (size_t q = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5; q < n;
         q += ((size_t)gridDim.x * blockDim.x) >> 5) {
        const size_t k = q % H, g = (q / H) % H, il = q / (H * H), i = i0 + il;
        const float *a = ql + (g * T + i) * dc, *b = ql + (k * T + i) * dc;
        double c = 0.0, r = 0.0, oo = 0.0, xo = 0.0;
        for (size_t j = lane; j < dc; j += 32)
            c += (double)a[j] * (double)b[j];
        a = qr + (g * T + i) * dr;
        b = qr + (k * T + i) * dr;
        for (size_t j = lane; j < dr; j += 32)
            r += (double)a[j] * (double)b[j];
        const float *ok = OKb + (g * nc + il) * HV + k * dv, *ok2 = Oc + il * HV + k * dv;
        for (size_t j = lane; j < dv; j += 32)
            oo += (double)ok[j] * (double)ok2[j];
        const float *x2 = X2 + (g * ni + il) * HV + k * dv, *og = Oc + il * HV + g * dv;
        for (size_t j = lane; j < dv; j += 32)
            xo += (double)x2[j] * (double)og[j];
        c = warp_sum(c);
        r = warp_sum(r);
        oo = warp_sum(oo);
        xo = warp_sum(xo);
        if (lane == 0) {
            qcc[q] = c;
            qrc[q] = r;
            Cc[q] = tau * tau * c * oo - 2.0 * tau * xo + G[g * H + k];
            Cr[q] = tau * tau * r * oo;
        }
    }
}

/* The pair terms without a GEMM, per (g, row il, key token t <= i):
 *   pg[g][il][t] = a_g sum_k a_k (Cc[g,k] + tau^2 qc[g,k] yy_t[g,k]) (content)
 * and likewise with Cr, qr (RoPE, into pgr); a_h = A[h, il, t] of the
 * chunk's attention [H, nc, L]. */
static __global__ void pair_terms_kernel(const float *A, const double *yyT, const double *qcc,
                                         const double *qrc, const double *Cc, const double *Cr,
                                         size_t T, size_t H, size_t i0, size_t nc, size_t L,
                                         double tau, double *pg, double *pgr)
{
    const size_t n = H * nc * L, HH = H * H;
    const double tau2 = tau * tau;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < n;
         q += (size_t)gridDim.x * blockDim.x) {
        const size_t t = q % L, il = (q / L) % nc, g = q / (L * nc);
        double sc = 0.0, sr = 0.0;
        if (t <= i0 + il) {
            const float ag = A[(g * nc + il) * L + t];
            const double *cc = Cc + il * HH + g * H, *cr = Cr + il * HH + g * H;
            const double *qc = qcc + il * HH + g * H, *qr = qrc + il * HH + g * H;
            double rc = 0.0, rr = 0.0;
            for (size_t k = 0; k < H; k++) {
                const double ak = A[(k * nc + il) * L + t], y = yyT[(g * H + k) * T + t];
                rc += ak * (cc[k] + tau2 * qc[k] * y);
                rr += ak * (cr[k] + tau2 * qr[k] * y);
            }
            sc = ag * rc;
            sr = ag * rr;
        }
        pg[(g * nc + il) * L + t] = sc;
        pgr[(g * nc + il) * L + t] = sr;
    }
}

/* The pairwise GEMM terms of the heads g = g0 + gl, gl < gn, per (gl, il,
 * t <= i): with r0 = R0[gl][(k nc + il) L + t] = y_tg . (O_ki K_kg) and
 * r1 = R1[gl][(il H + k) L + t] = y_tg . X2_{g,k,i},
 *   pg[gl][il][t]  = a_g (2 tau sum_k a_k r1 - 2 tau^2 sum_k a_k qc[g,k] r0)
 *   pgr[gl][il][t] = a_g (-2 tau^2 sum_k a_k qr[g,k] r0). */
static __global__ void pair_gemm_terms_kernel(const float *A, const float *R0, const float *R1,
                                              const double *qcc, const double *qrc, size_t H,
                                              size_t i0, size_t nc, size_t L, size_t g0,
                                              size_t gn, double tau, double *pg, double *pgr)
{
    const size_t n = gn * nc * L, HH = H * H, RS = H * nc * L;
    const double tau2 = tau * tau;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < n;
         q += (size_t)gridDim.x * blockDim.x) {
        const size_t t = q % L, il = (q / L) % nc, gl = q / (L * nc), g = g0 + gl;
        double vc = 0.0, vr = 0.0;
        const float ag = t <= i0 + il ? A[(g * nc + il) * L + t] : 0.0f;
        if (ag != 0.0f) {
            const double *qc = qcc + il * HH + g * H, *qr = qrc + il * HH + g * H;
            const float *r0 = R0 + gl * RS, *r1 = R1 + gl * RS;
            double s0 = 0.0, s1 = 0.0, sr0 = 0.0;
            for (size_t k = 0; k < H; k++) {
                const double ak = A[(k * nc + il) * L + t];
                const double v0 = r0[(k * nc + il) * L + t], v1 = r1[(il * H + k) * L + t];
                s0 += ak * qc[k] * v0;
                sr0 += ak * qr[k] * v0;
                s1 += ak * v1;
            }
            vc = ag * (2.0 * tau * s1 - 2.0 * tau2 * s0);
            vr = ag * (-2.0 * tau2 * sr0);
        }
        pg[(gl * nc + il) * L + t] = vc;
        pgr[(gl * nc + il) * L + t] = vr;
    }
}

/* acc[il][t] (+)= sum over gl < gn of pg[gl][il][t], in order of gl. */
static __global__ void reduce_heads_kernel(const double *pg, const double *pgr, size_t gn,
                                           size_t nc, size_t L, int add, double *acc,
                                           double *accr)
{
    const size_t n = nc * L;
    for (size_t q = blockIdx.x * (size_t)blockDim.x + threadIdx.x; q < n;
         q += (size_t)gridDim.x * blockDim.x) {
        double c = add ? acc[q] : 0.0, r = add ? accr[q] : 0.0;
        for (size_t gl = 0; gl < gn; gl++) {
            c += pg[gl * n + q];
            r += pgr[gl * n + q];
        }
        acc[q] = c;
        accr[q] = r;
    }
}

/* tr[t] += sum over rows il of the chunk of part[il][t] (il in order). */
static __global__ void reduce_rows_kernel(const double *pc, const double *pr, size_t nc,
                                          size_t L, double *trc, double *trr)
{
    for (size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x; t < L;
         t += (size_t)gridDim.x * blockDim.x) {
        double c = trc[t], r = trr[t];
        for (size_t il = 0; il < nc; il++) {
            c += pc[il * L + t];
            r += pr[il * L + t];
        }
        trc[t] = c;
        trr[t] = r;
    }
}

static unsigned grid_for(size_t n)
{
    size_t b = (n + SM_THREADS - 1) / SM_THREADS;
    if (b > 65535u * 8u)
        b = 65535u * 8u;
    return (unsigned)(b ? b : 1);
}

/* The grid of a warp-per-value kernel over n values. */
static unsigned grid_for_warps(size_t n) { return grid_for(n * 32); }

/* ---- the layer constants of the exact sensitivities ------------------------- */

typedef struct cuda_sens_layer {
    size_t H, d_v;
    float *K;  /* [HV, HV] W_O^T W_O, device */
    double *G; /* [H, H] <P_h, P_h'>, device */
} cuda_sens_layer;

static void op_layer_free(void *p)
{
    device_enter_quiet();
    cuda_sens_layer *L = (cuda_sens_layer *)p;
    if (!L)
        return;
    if (L->K)
        cudaFree(L->K);
    if (L->G)
        cudaFree(L->G);
    free(L);
}

static int op_layer_alloc(const qmla_exec *ex, const qmla_mla_dims *d,
                          const qmla_mla_weights *wt, void **out, qmla_error *err)
{
    (void)ex;
    *out = NULL;
    {
        const int ds_ = device_enter(err);
        if (ds_)
            return ds_;
    }
    int st = QMLA_OK;
    const size_t H = d->H, dv = d->d_v, dc = d->d_c, D = d->D, HV = H * dv;
    cuda_sens_layer *L = (cuda_sens_layer *)calloc(1, sizeof *L);
    float *wo = NULL, *wuv = NULL, *M = NULL;
    cublasHandle_t blas = NULL;
    if (!L)
        return qmla_error_set(err, QMLA_ENOMEM, "cuda engine: out of memory");
    L->H = H;
    L->d_v = dv;
    CB(cublasCreate(&blas), "cublasCreate");
    CB(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    CU(cudaMalloc((void **)&L->K, HV * HV * sizeof(float)), "W_O^T W_O");
    CU(cudaMalloc((void **)&L->G, H * H * sizeof(double)), "head Gram G");
    CU(cudaMalloc((void **)&M, HV * HV * sizeof(float)), "W_UV Gram");
    CU(cudaMalloc((void **)&wo, D * HV * sizeof(float)), "w_o");
    CU(cudaMalloc((void **)&wuv, HV * dc * sizeof(float)), "w_uv");
    CU(cudaMemcpy(wo, wt->w_o, D * HV * sizeof(float), cudaMemcpyHostToDevice), "copy w_o");
    CU(cudaMemcpy(wuv, wt->w_uv, HV * dc * sizeof(float), cudaMemcpyHostToDevice),
       "copy w_uv");
    /* K = w_o^T w_o, M = w_uv w_uv^T (row-major [HV, HV]) */
    CB(gemm_rm(blas, 1, 0, HV, HV, D, 1.0f, wo, HV, 0, wo, HV, 0, 0.0f, L->K, HV, 0, 1),
       "W_O^T W_O");
    CB(gemm_rm(blas, 0, 1, HV, HV, dc, 1.0f, wuv, dc, 0, wuv, dc, 0, 0.0f, M, HV, 0, 1),
       "W_UV W_UV^T");
    layer_gram_kernel<<<(unsigned)(H * H), SM_THREADS>>>(M, L->K, H, dv, L->G);
    CU(cudaGetLastError(), "head Gram");
    CU(cudaDeviceSynchronize(), "layer constants");
out:
    if (M)
        cudaFree(M);
    if (wo)
        cudaFree(wo);
    if (wuv)
        cudaFree(wuv);
    if (blas) {
        tf32_release(blas);
        cublasDestroy(blas);
    }
    if (st) {
        op_layer_free(L);
        return st;
    }
    *out = L;
    return QMLA_OK;
}

/* ---- the operator workspace ---------------------------------------------------- */

#define IV_SLOTS 4
#define SEV_N 24

typedef struct cuda_op_ws {
    cuda_sweep_ws *sw;
    size_t T_max;
    int with_sens;
    /* JVPs and the joint pass */
    float *Ed;             /* [T, max(d_c, d_r)] a direction on the device */
    float *Cp, *Kp;        /* joint-path perturbed caches */
    double *jpart, *hjpart; /* [nslots][n_tiles * NORM_BLOCKS]: one slot per JVP queued
                               before a synchronisation */
    size_t nslots;
    float *hE;             /* host [T, max(d_c, d_r)] */
    /* the interventions' pipeline: controls drawn on the host into pinned
     * slots while the GPU runs the JVPs of the ones before */
    float *hc[IV_SLOTS], *dc_[IV_SLOTS];
    cudaEvent_t evc[IV_SLOTS];
    double *ee;            /* [nslots] ||E||^2 of each queued direction */
    /* sensitivities (with_sens) */
    size_t ni, gc, gs;     /* rows per chunk, heads per R chunk, per Gram chunk */
    float *Yc, *S, *Ac, *Uc, *Oc, *OKb, *xq, *X2, *R0, *R1;
    double *yyT, *qcc, *qrc, *Cc, *Cr, *pg, *pgr, *pc, *pr, *trc, *trr, *htr;
    const float **pA, **pB;
    float **pC;
    const float **hpA, **hpB; /* host pointer arrays */
    float **hpC;
    /* the profile's stage events (run 13; made at the first use) */
    cudaEvent_t sev[SEV_N];
    int sev_tag[SEV_N], sev_n, sev_made;
} cuda_op_ws;

/* Stage marks of the profile (QMLA_CUDA_ST_*; nothing when it is off): an
 * event after each stage's work on the stream, the time since the mark
 * before added to the stage at the next flush, which waits for the last
 * event. Event errors are cleared (the profile never fails a call). */
static void stage_flush(cuda_op_ws *W)
{
    if (!W->sev_n)
        return;
    int bad = cudaEventSynchronize(W->sev[W->sev_n - 1]) != cudaSuccess;
    for (int k = 1; k < W->sev_n && !bad; k++) {
        float ms = 0.0f;
        if (W->sev_tag[k] < 0)
            continue;
        if (cudaEventElapsedTime(&ms, W->sev[k - 1], W->sev[k]) == cudaSuccess)
            prof.st[W->sev_tag[k]] += 1e-3 * (double)ms;
        else
            bad = 1;
    }
    if (bad) /* the profile's own error only: the calls before were checked */
        cudaGetLastError();
    const cudaEvent_t last = W->sev[W->sev_n - 1];
    W->sev[W->sev_n - 1] = W->sev[0];
    W->sev[0] = last;
    W->sev_tag[0] = -1;
    W->sev_n = 1;
}

static void stage_mark(cuda_op_ws *W, int tag)
{
    if (!prof_on())
        return;
    if (!W->sev_made) {
        for (int k = 0; k < SEV_N; k++)
            if (cudaEventCreate(&W->sev[k]) != cudaSuccess) {
                cudaGetLastError();
                return;
            }
        W->sev_made = 1;
    }
    if (W->sev_n == SEV_N)
        stage_flush(W);
    if (cudaEventRecord(W->sev[W->sev_n], W->sw->stream) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    W->sev_tag[W->sev_n++] = tag;
}

/* the stage marks' end: flushed, the next call starts afresh */
static void stage_end(cuda_op_ws *W)
{
    if (!prof_on() || !W->sev_made)
        return;
    stage_flush(W);
    W->sev_n = 0;
}

static void op_ws_free(void *p)
{
    device_enter_quiet();
    cuda_op_ws *w = (cuda_op_ws *)p;
    if (!w)
        return;
    sweep_ws_free(w->sw);
    void *dev[] = {w->Ed,  w->Cp,  w->Kp,  w->jpart, w->Yc,  w->S,   w->Ac,  w->Uc,
                   w->Oc,  w->OKb, w->xq,  w->X2,    w->R0,  w->R1,  w->yyT, w->qcc,
                   w->qrc, w->Cc,  w->Cr,  w->pg,    w->pgr, w->pc,  w->pr,  w->trc,
                   w->trr, (void *)w->pA, (void *)w->pB, (void *)w->pC};
    for (size_t k = 0; k < sizeof dev / sizeof *dev; k++)
        if (dev[k])
            cudaFree(dev[k]);
    if (w->hjpart)
        cudaFreeHost(w->hjpart);
    for (int k = 0; k < IV_SLOTS; k++) {
        if (w->hc[k])
            cudaFreeHost(w->hc[k]);
        if (w->dc_[k])
            cudaFree(w->dc_[k]);
        if (w->evc[k])
            cudaEventDestroy(w->evc[k]);
    }
    free(w->ee);
    if (w->htr)
        cudaFreeHost(w->htr);
    free(w->hE);
    free(w->hpA);
    free(w->hpB);
    free(w->hpC);
    if (w->sev_made)
        for (int k = 0; k < SEV_N; k++)
            cudaEventDestroy(w->sev[k]);
    free(w);
}

static int op_ws_alloc_common(const qmla_mla_dims *d, size_t T_max, int with_sens, void **out,
                              qmla_error *err)
{
    *out = NULL;
    cuda_op_ws *w = (cuda_op_ws *)calloc(1, sizeof *w);
    if (!w)
        return qmla_error_set(err, QMLA_ENOMEM, "cuda engine: out of memory");
    void *sw = NULL;
    int st = sweep_ws_alloc(d, T_max, 0, &sw, err);
    if (st) {
        free(w);
        return st;
    }
    w->sw = (cuda_sweep_ws *)sw;
    w->T_max = T_max;
    w->with_sens = with_sens;
    const size_t H = d->H, dc = d->d_c, dr = d->d_r, dv = d->d_v, HV = H * dv, T = T_max;
    const size_t wmax = dc > dr ? dc : dr, nt = ntiles(T, w->sw->B);
    CU(cudaMalloc((void **)&w->Ed, T * wmax * sizeof(float)), "direction");
    CU(cudaMalloc((void **)&w->Cp, T * dc * sizeof(float)), "joint c_kv");
    CU(cudaMalloc((void **)&w->Kp, T * dr * sizeof(float)), "joint k_rope");
    w->nslots = 2; /* the operator's two paths; the interventions grow it */
    CU(cudaMalloc((void **)&w->jpart, w->nslots * nt * NORM_BLOCKS * sizeof(double)),
       "JVP sums");
    CU(cudaMallocHost((void **)&w->hjpart, w->nslots * nt * NORM_BLOCKS * sizeof(double)),
       "JVP sums");
    if (!(w->ee = (double *)malloc(w->nslots * sizeof(double)))) {
        st = qmla_error_set(err, QMLA_ENOMEM, "cuda engine: out of memory");
        goto out;
    }
    if (!(w->hE = (float *)malloc(T * wmax * sizeof(float)))) {
        st = qmla_error_set(err, QMLA_ENOMEM, "cuda engine: out of memory");
        goto out;
    }
    if (with_sens) {
        /* 4096 / H rows (V3: 32; before 2026-12-03 1024 / H, 8 at V3, whose
         * per-chunk GEMMs of 8 rows per head ran at a fraction of SGEMM's
         * rate); the row and head sums are in the same order whatever ni */
        size_t ni = (before_mode() ? 1024 : 4096) / H;
        ni = ni < 2 ? 2 : ni > 64 ? 64 : ni;
        if (ni > T)
            ni = T;
        w->ni = ni;
        /* the R chunk (two [gc, ni H, T] float arrays) and the Gram chunk
         * ([gs, T, HV]) within 2 GiB each */
        const double budget = 2.0 * 1073741824.0;
        size_t gc = (size_t)(budget / (2.0 * 4.0 * (double)ni * (double)H * (double)T));
        gc = gc < 1 ? 1 : gc > H ? H : gc;
        size_t gs = (size_t)(budget / (4.0 * (double)T * (double)HV));
        gs = gs < 1 ? 1 : gs > H ? H : gs;
        w->gc = gc;
        w->gs = gs;
        const size_t pgn = H; /* the per-head partials: pair terms (H), R terms (gc <= H) */
        CU(cudaMalloc((void **)&w->Yc, T * HV * sizeof(float)), "values Yc");
        CU(cudaMalloc((void **)&w->S, gs * T * HV * sizeof(float)), "Gram scratch");
        CU(cudaMalloc((void **)&w->yyT, H * H * T * sizeof(double)), "Gram yy");
        CU(cudaMalloc((void **)&w->Ac, H * ni * T * sizeof(float)), "chunk attention");
        CU(cudaMalloc((void **)&w->Uc, H * ni * dc * sizeof(float)), "chunk latents");
        CU(cudaMalloc((void **)&w->Oc, ni * HV * sizeof(float)), "chunk head outputs");
        CU(cudaMalloc((void **)&w->OKb, H * ni * HV * sizeof(float)), "chunk O K");
        CU(cudaMalloc((void **)&w->xq, H * ni * HV * sizeof(float)), "chunk xq");
        CU(cudaMalloc((void **)&w->X2, H * ni * HV * sizeof(float)), "chunk X2");
        CU(cudaMalloc((void **)&w->R0, gc * ni * H * T * sizeof(float)), "pair products R0");
        CU(cudaMalloc((void **)&w->R1, gc * ni * H * T * sizeof(float)), "pair products R1");
        CU(cudaMalloc((void **)&w->qcc, ni * H * H * sizeof(double)), "row constants");
        CU(cudaMalloc((void **)&w->qrc, ni * H * H * sizeof(double)), "row constants");
        CU(cudaMalloc((void **)&w->Cc, ni * H * H * sizeof(double)), "row constants");
        CU(cudaMalloc((void **)&w->Cr, ni * H * H * sizeof(double)), "row constants");
        CU(cudaMalloc((void **)&w->pg, pgn * ni * T * sizeof(double)), "head partials");
        CU(cudaMalloc((void **)&w->pgr, pgn * ni * T * sizeof(double)), "head partials");
        CU(cudaMalloc((void **)&w->pc, ni * T * sizeof(double)), "row partials");
        CU(cudaMalloc((void **)&w->pr, ni * T * sizeof(double)), "row partials");
        CU(cudaMalloc((void **)&w->trc, T * sizeof(double)), "traces");
        CU(cudaMalloc((void **)&w->trr, T * sizeof(double)), "traces");
        CU(cudaMallocHost((void **)&w->htr, 2 * T * sizeof(double)), "host traces");
        CU(cudaMalloc((void **)&w->pA, H * H * sizeof(float *)), "pointers");
        CU(cudaMalloc((void **)&w->pB, H * H * sizeof(float *)), "pointers");
        CU(cudaMalloc((void **)&w->pC, H * H * sizeof(float *)), "pointers");
        w->hpA = (const float **)malloc(H * H * sizeof(float *));
        w->hpB = (const float **)malloc(H * H * sizeof(float *));
        w->hpC = (float **)malloc(H * H * sizeof(float *));
        if (!w->hpA || !w->hpB || !w->hpC) {
            st = qmla_error_set(err, QMLA_ENOMEM, "cuda engine: out of memory");
            goto out;
        }
    }
out:
    if (st) {
        op_ws_free(w);
        return st;
    }
    *out = w;
    return QMLA_OK;
}

static int op_ws_alloc(const qmla_mla_dims *d, size_t T_max, int with_sens, int threads,
                       void **out, qmla_error *err)
{
    (void)threads;
    return op_ws_alloc_common(d, T_max, with_sens, out, err);
}

static int iv_ws_alloc(const qmla_mla_dims *d, size_t T_max, int threads, void **out,
                       qmla_error *err)
{
    (void)threads;
    return op_ws_alloc_common(d, T_max, 0, out, err);
}

/* The clean attention of tile k into sw->Z (unless the sweep left the whole
 * sequence's there). */
static int attention_tile(cuda_sweep_ws *w, size_t T, size_t k, qmla_error *err)
{
    int st = QMLA_OK;
    if (w->a_valid)
        return QMLA_OK;
    const qmla_mla_dims *d = &w->d;
    const size_t H = d->H, dc = d->d_c, dr = d->d_r, B = w->B;
    const size_t t0 = k * B, t1 = t0 + B < T ? t0 + B : T, Bt = t1 - t0, L = t1;
    const float tau = (float)d->tau;
    CB(logits_tile(w, T, Bt, L, t0, dc, tau, w->ql + t0 * dc, w->C, 0.0f, w->Z),
       "content logits");
    CB(logits_tile(w, T, Bt, L, t0, dr, tau, w->qr + t0 * dr, w->K, 1.0f, w->Z), "RoPE logits");
    softmax_rows_kernel<<<(unsigned)(H * Bt), SM_THREADS, 0, w->stream>>>(w->Z, NULL, w->Z, Bt,
                                                                        L, t0);
    CU(cudaGetLastError(), "softmax");
out:
    return st;
}

/* The nt * NORM_BLOCKS partial sums of jpart, copied to the host once the
 * stream has run, summed in order into *v. */
static int sum_partials(cuda_op_ws *W, size_t nt, const char *what, double *v, qmla_error *err)
{
    int st = QMLA_OK;
    cudaStream_t s = W->sw->stream;
    CU(cudaMemcpyAsync(W->hjpart, W->jpart, nt * NORM_BLOCKS * sizeof(double),
                       cudaMemcpyDeviceToHost, s),
       "copy sums");
    CU(ws_sync(W->sw), what);
    {
        double sum = 0.0;
        for (size_t k = 0; k < nt * NORM_BLOCKS; k++)
            sum += W->hjpart[k];
        *v = sum;
    }
out:
    return st;
}

/* ||J_b E||^2 for the direction E [T, width] already on the device (dir),
 * at the clean pass of the sequence the sweep workspace last ran: queued,
 * its nt * NORM_BLOCKS partial sums into dpart (device), not waited for. */
static int jvp_enqueue(cuda_op_ws *W, size_t T, int path, const float *dir, double *dpart,
                       qmla_error *err)
{
    cuda_sweep_ws *w = W->sw;
    const qmla_mla_dims *d = &w->d;
    const size_t H = d->H, dc = d->d_c, dr = d->d_r, D = d->D, B = w->B, nt = ntiles(T, B);
    const int content = path == QMLA_PATH_CONTENT;
    const size_t wd = content ? dc : dr;
    const float tau = (float)d->tau;
    cudaStream_t s = w->stream;
    int st = QMLA_OK;
    prof_mark(w);
    for (size_t k = 0; k < nt; k++) {
        const size_t t0 = k * B, t1 = t0 + B < T ? t0 + B : T, Bt = t1 - t0, L = t1;
        if ((st = attention_tile(w, T, k, err)))
            goto out;
        const float *Q = content ? w->ql + t0 * dc : w->qr + t0 * dr;
        CB(logits_tile(w, T, Bt, L, t0, wd, tau, Q, dir, 0.0f, w->P1), "JVP logits");
        softmax_jvp_kernel<<<(unsigned)(H * Bt), SM_THREADS, 0, s>>>(w->Z, w->P1, w->P1, Bt, L,
                                                                   t0);
        CU(cudaGetLastError(), "softmax JVP");
        CB(aggregate_tile_beta(w, Bt, L, t0, w->P1, w->C, 0.0f), "JVP latents");
        if (content)
            CB(aggregate_tile_beta(w, Bt, L, t0, w->Z, dir, 1.0f), "JVP latents");
        CB(project_tile(w, Bt, w->Y[1]), "JVP projection");
        sumsq_kernel<<<NORM_BLOCKS, SM_THREADS, 0, s>>>(w->Y[1], NULL, Bt * D,
                                                        dpart + k * NORM_BLOCKS);
        CU(cudaGetLastError(), "JVP norm");
    }
out:
    return st;
}

/* The same, waited for: *jj (the run-8 sequences). */
static int jvp_norm(cuda_op_ws *W, size_t T, int path, const float *dir, double *jj,
                    qmla_error *err)
{
    int st = jvp_enqueue(W, T, path, dir, W->jpart, err);
    if (!st)
        st = sum_partials(W, ntiles(T, W->sw->B), "JVP", jj, err);
    if (st)
        cudaStreamSynchronize(W->sw->stream);
    return st;
}

/* The nt * NORM_BLOCKS partials of a slot, summed in order. */
static double slot_sum(const double *h, size_t nt)
{
    double sum = 0.0;
    for (size_t k = 0; k < nt * NORM_BLOCKS; k++)
        sum += h[k];
    return sum;
}

/* At least n slots of JVP partial sums (and of their ||E||^2). */
static int ensure_slots(cuda_op_ws *W, size_t n, qmla_error *err)
{
    if (n <= W->nslots)
        return QMLA_OK;
    int st = QMLA_OK;
    const size_t np = ntiles(W->T_max, W->sw->B) * NORM_BLOCKS;
    cudaFree(W->jpart);
    cudaFreeHost(W->hjpart);
    W->jpart = W->hjpart = NULL;
    free(W->ee);
    W->nslots = 0;
    if (!(W->ee = (double *)malloc(n * sizeof(double))))
        return qmla_error_set(err, QMLA_ENOMEM, "cuda engine: out of memory");
    CU(cudaMalloc((void **)&W->jpart, n * np * sizeof(double)), "JVP sums");
    CU(cudaMallocHost((void **)&W->hjpart, n * np * sizeof(double)), "JVP sums");
    W->nslots = n;
out:
    return st;
}

static double sens_seconds; /* the benchmark's hook */
extern "C" double qmla_cuda_engine_sens_seconds(void) { return sens_seconds; }

static int sens_exact_run(cuda_op_ws *W, const cuda_sens_layer *Ly, size_t T, double *trc,
                          double *trr, qmla_error *err);

/* Raw sensitivities of every token (qmla_sens_exact's trc, trr) at the
 * clean pass of the sequence the sweep workspace last ran; the wall time
 * (it ends synchronised) added to sens_seconds. */
static int sens_exact(cuda_op_ws *W, const cuda_sens_layer *Ly, size_t T, double *trc,
                      double *trr, qmla_error *err)
{
    const double t0 = wall_now();
    const int st = sens_exact_run(W, Ly, T, trc, trr, err);
    sens_seconds += wall_now() - t0;
    if (prof_on())
        prof.s[QMLA_CUDA_PH_SENS] += wall_now() - t0;
    return st;
}

static int sens_exact_run(cuda_op_ws *W, const cuda_sens_layer *Ly, size_t T, double *trc,
                      double *trr, qmla_error *err)
{
    cuda_sweep_ws *w = W->sw;
    const qmla_mla_dims *d = &w->d;
    const size_t H = d->H, dc = d->d_c, dr = d->d_r, dv = d->d_v, HV = H * dv;
    const size_t ni = W->ni, gc = W->gc, gs = W->gs;
    const double tau = d->tau;
    const float tauf = (float)d->tau;
    cudaStream_t s = w->stream;
    cublasHandle_t hb = w->blas;
    int st = QMLA_OK;
    if (Ly->H != H || Ly->d_v != dv)
        return qmla_error_set(err, QMLA_EINVAL,
                              "sensitivities: layer constants for H = %zu, d_v = %zu, "
                              "found H = %zu, d_v = %zu", H, dv, Ly->H, Ly->d_v);
    prof_mark(w);
    W->sev_n = 0; /* a call that failed left its marks */
    stage_mark(W, -1);
    /* Yc = C W_UV^T [T, HV] */
    CB(gemm_rm(hb, 0, 1, T, HV, dc, 1.0f, w->C, dc, 0, w->wuv, dc, 0, 0.0f, W->Yc, HV, 0, 1),
       "values Yc");
    /* yy_t[g, k] = (y_tg K_gk) . y_tk, heads in chunks of gs */
    for (size_t g0 = 0; g0 < H; g0 += gs) {
        const size_t gn = g0 + gs <= H ? gs : H - g0;
        CB(gemm_rm(hb, 0, 0, T, HV, dv, 1.0f, W->Yc + g0 * dv, HV, (long long)dv,
                   Ly->K + g0 * dv * HV, HV, (long long)(dv * HV), 0.0f, W->S, HV,
                   (long long)(T * HV), gn),
           "Gram yy");
        if (qmla_cuda_engine_r12())
            gram_rows_kernel<<<grid_for(gn * H * T), SM_THREADS, 0, s>>>(W->S, W->Yc, T, H, dv,
                                                                         g0, gn, W->yyT);
        else
            gram_rows_warp_kernel<<<grid_for_warps(gn * H * T), SM_THREADS, 0, s>>>(
                W->S, W->Yc, T, H, dv, g0, gn, W->yyT);
        CU(cudaGetLastError(), "Gram yy");
    }
    CU(cudaMemsetAsync(W->trc, 0, T * sizeof(double), s), "memset");
    CU(cudaMemsetAsync(W->trr, 0, T * sizeof(double), s), "memset");
    stage_mark(W, QMLA_CUDA_ST_SENS_GRAM);
    /* X2_{g,k} = xq_{g,k} K_kg: H^2 blocks [rows, dv] x [dv, dv] */
    for (size_t g = 0; g < H; g++)
        for (size_t k = 0; k < H; k++) {
            W->hpA[g * H + k] = W->xq + g * ni * HV + k * dv;
            W->hpB[g * H + k] = Ly->K + k * dv * HV + g * dv;
            W->hpC[g * H + k] = W->X2 + g * ni * HV + k * dv;
        }
    CU(cudaMemcpyAsync(W->pA, W->hpA, H * H * sizeof(float *), cudaMemcpyHostToDevice, s),
       "pointers");
    CU(cudaMemcpyAsync(W->pB, W->hpB, H * H * sizeof(float *), cudaMemcpyHostToDevice, s),
       "pointers");
    CU(cudaMemcpyAsync(W->pC, W->hpC, H * H * sizeof(float *), cudaMemcpyHostToDevice, s),
       "pointers");
    for (size_t i0 = 0; i0 < T; i0 += ni) {
        const size_t nc = i0 + ni <= T ? ni : T - i0, L = i0 + nc;
        const long long sA = (long long)(nc * L);
        /* the chunk's attention [H, nc, L] */
        CB(gemm_rm(hb, 0, 1, nc, L, dc, tauf, w->ql + i0 * dc, dc, (long long)(T * dc), w->C, dc,
                   0, 0.0f, W->Ac, L, sA, H),
           "chunk logits");
        CB(gemm_rm(hb, 0, 1, nc, L, dr, tauf, w->qr + i0 * dr, dr, (long long)(T * dr), w->K, dr,
                   0, 1.0f, W->Ac, L, sA, H),
           "chunk logits");
        softmax_rows_kernel<<<(unsigned)(H * nc), SM_THREADS, 0, s>>>(W->Ac, NULL, W->Ac, nc, L,
                                                                    i0);
        CU(cudaGetLastError(), "chunk softmax");
        /* head outputs O [nc, HV] */
        CB(gemm_rm(hb, 0, 0, nc, dc, L, 1.0f, W->Ac, L, sA, w->C, dc, 0, 0.0f, W->Uc, dc,
                   (long long)(nc * dc), H),
           "chunk latents");
        CB(gemm_rm(hb, 0, 1, nc, dv, dc, 1.0f, W->Uc, dc, (long long)(nc * dc), w->wuv, dc,
                   (long long)(dv * dc), 0.0f, W->Oc, HV, (long long)dv, H),
           "chunk head outputs");
        stage_mark(W, QMLA_CUDA_ST_SENS_ATTN);
        /* OKb[k][il][g dv + j] = (O_ki K_kg)_j */
        CB(gemm_rm(hb, 0, 0, nc, HV, dv, 1.0f, W->Oc, HV, (long long)dv, Ly->K, HV,
                   (long long)(dv * HV), 0.0f, W->OKb, HV, (long long)(nc * HV), H),
           "O K");
        /* xq[g][il][k dv + j] = q_gi . w_uv[k][j] */
        CB(gemm_rm(hb, 0, 1, nc, HV, dc, 1.0f, w->ql + i0 * dc, dc, (long long)(T * dc), w->wuv,
                   dc, 0, 0.0f, W->xq, HV, (long long)(ni * HV), H),
           "xq");
        stage_mark(W, QMLA_CUDA_ST_SENS_OKXQ);
        {
            const float one = 1.0f, zero = 0.0f;
            CB(cublasSgemmBatched(hb, CUBLAS_OP_N, CUBLAS_OP_N, (int)dv, (int)nc, (int)dv, &one,
                                  W->pB, (int)HV, W->pA, (int)HV, &zero, W->pC, (int)HV,
                                  (int)(H * H)),
               "X2");
        }
        stage_mark(W, QMLA_CUDA_ST_SENS_X2);
        if (qmla_cuda_engine_r12())
            row_consts_kernel<<<grid_for(nc * H * H), SM_THREADS, 0, s>>>(
                w->ql, w->qr, W->OKb, W->Oc, W->X2, Ly->G, T, H, dc, dr, dv, i0, nc, ni, tau,
                W->qcc, W->qrc, W->Cc, W->Cr);
        else
            row_consts_warp_kernel<<<grid_for_warps(nc * H * H), SM_THREADS, 0, s>>>(
                w->ql, w->qr, W->OKb, W->Oc, W->X2, Ly->G, T, H, dc, dr, dv, i0, nc, ni, tau,
                W->qcc, W->qrc, W->Cc, W->Cr);
        CU(cudaGetLastError(), "row constants");
        stage_mark(W, QMLA_CUDA_ST_SENS_CONST);
        pair_terms_kernel<<<grid_for(H * nc * L), SM_THREADS, 0, s>>>(
            W->Ac, W->yyT, W->qcc, W->qrc, W->Cc, W->Cr, T, H, i0, nc, L, tau, W->pg, W->pgr);
        CU(cudaGetLastError(), "pair terms");
        reduce_heads_kernel<<<grid_for(nc * L), SM_THREADS, 0, s>>>(W->pg, W->pgr, H, nc, L, 0,
                                                                   W->pc, W->pr);
        CU(cudaGetLastError(), "pair terms sum");
        stage_mark(W, QMLA_CUDA_ST_SENS_PAIR);
        for (size_t g0 = 0; g0 < H; g0 += gc) {
            const size_t gn = g0 + gc <= H ? gc : H - g0;
            const long long sR = (long long)(H * nc * L);
            /* R1[gl][(il H + k) L + t] = X2_{g,k,i} . y_tg */
            CB(gemm_rm(hb, 0, 1, nc * H, L, dv, 1.0f, W->X2 + g0 * ni * HV, dv,
                       (long long)(ni * HV), W->Yc + g0 * dv, HV, (long long)dv, 0.0f, W->R1, L,
                       sR, gn),
               "pair products R1");
            /* R0[gl][(k nc + il) L + t] = (O_ki K_kg) . y_tg */
            CB(gemm_rm(hb, 0, 1, H * nc, L, dv, 1.0f, W->OKb + g0 * dv, HV, (long long)dv,
                       W->Yc + g0 * dv, HV, (long long)dv, 0.0f, W->R0, L, sR, gn),
               "pair products R0");
            stage_mark(W, QMLA_CUDA_ST_SENS_R);
            pair_gemm_terms_kernel<<<grid_for(gn * nc * L), SM_THREADS, 0, s>>>(
                W->Ac, W->R0, W->R1, W->qcc, W->qrc, H, i0, nc, L, g0, gn, tau, W->pg, W->pgr);
            CU(cudaGetLastError(), "pair GEMM terms");
            reduce_heads_kernel<<<grid_for(nc * L), SM_THREADS, 0, s>>>(W->pg, W->pgr, gn, nc,
                                                                       L, 1, W->pc, W->pr);
            CU(cudaGetLastError(), "pair GEMM terms sum");
            stage_mark(W, QMLA_CUDA_ST_SENS_RTERM);
        }
        reduce_rows_kernel<<<grid_for(L), SM_THREADS, 0, s>>>(W->pc, W->pr, nc, L, W->trc,
                                                              W->trr);
        CU(cudaGetLastError(), "row sums");
        stage_mark(W, QMLA_CUDA_ST_SENS_RTERM);
    }
    CU(cudaMemcpyAsync(W->htr, W->trc, T * sizeof(double), cudaMemcpyDeviceToHost, s), "copy");
    CU(cudaMemcpyAsync(W->htr + T, W->trr, T * sizeof(double), cudaMemcpyDeviceToHost, s),
       "copy");
    CU(ws_sync(w), "sensitivities");
    stage_end(W);
    for (size_t t = 0; t < T; t++) {
        trc[t] = W->htr[t] / (double)dc;
        trr[t] = W->htr[T + t] / (double)dr;
    }
out:
    if (st)
        cudaStreamSynchronize(s);
    return st;
}

/* qmla_op_sequence on the GPU: the same steps and host arithmetic, with the
 * sweep, the JVPs and the sensitivities on the device. */
static int op_sequence_r8(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                       const qmla_mla_weights *wt, const void *layer, const float *q_nope,
                       const float *q_rope, const float *C, const float *K,
                       const qmla_op_config *conf, size_t nconf, void *ws, qmla_op_point *pts,
                       double *alloc, double *sigma, qmla_error *err)
{
    {
        const int ds_ = device_enter(err);
        if (ds_)
            return ds_;
    }
    cuda_op_ws *W = (cuda_op_ws *)ws;
    const cuda_sens_layer *Ly = (const cuda_sens_layer *)layer;
    if (Ly && !W->with_sens)
        return qmla_error_set(err, QMLA_EINVAL,
                              "operator: sensitivities asked, workspace without them");
    if (T == 0 || T > W->T_max)
        return qmla_error_set(err, QMLA_EINVAL, "operator: T = %zu outside [1, %zu]", T,
                              W->T_max);
    const size_t dc = d->d_c, dr = d->d_r;
    const double cc = qmla_sumsq(C, T * dc), kk = qmla_sumsq(K, T * dr);
    double yy = 0.0;
    /* the layer's weights stay on the device until the driver's layer_begin
     * (op_layer_begin) or other weight pointers; the finite gains need only
     * the two perturbed totals: the response-only sweep, the first with the
     * sequence's inputs and its clean output, the others on the inputs and
     * ||Y||^2 the first left on the device */
    const int before = before_mode();
    if (before) /* as 2026-12-02: the weights with every sequence, full sweeps */
        sweep_layer_begin(W->sw);
    for (size_t k = 0; k < nconf; k++) {
        qmla_sweep_params sp = qmla_op_config_sweep(&conf[k]);
        qmla_response fin[2];
        int st = sweep_run(ex, &sp, d, T, wt, q_nope, q_rope, C, K, 0, W->sw, fin, !before,
                           k == 0, k == 0, err);
        if (st)
            return qmla_error_prefix(err, "INT%d G%d nu %g: ", conf[k].bits, conf[k].group,
                                     conf[k].nmse);
        if (k == 0) {
            yy = W->sw->yy;
            if (Ly) {
                if ((st = sens_exact(W, Ly, T, sigma, sigma + T, err)))
                    return st;
                qmla_op_sigma_scale(sigma, sigma, T, cc, kk, yy);
            }
        }
        for (int path = 0; path < 2; path++) {
            qmla_op_point *p = &pts[2 * k + (size_t)path];
            double *wtk = alloc + (2 * k + (size_t)path) * T;
            const int content = path == QMLA_PATH_CONTENT;
            double xx, ee;
            int skip;
            const double tp = ph_begin();
            st = qmla_op_point_begin(p, path, &conf[k], &sp, C, K, T, dc, dr, &fin[path], yy,
                                     W->hE, wtk, &xx, &ee, &skip, err);
            ph_end(QMLA_CUDA_PH_DIR, tp);
            if (st)
                return st;
            if (skip)
                continue;
            /* the sweep left this direction on the device (Ec / Er) */
            double jj = 0.0;
            if ((st = jvp_norm(W, T, path, content ? W->sw->Ec : W->sw->Er, &jj, err)))
                return st;
            p->g_jvp = (jj / yy) / (ee / xx);
            p->g_finite = fin[path].response;
            if (Ly)
                qmla_op_point_pred(p, sigma + (size_t)path * T, wtk, T);
        }
    }
    return QMLA_OK;
}

/* local_gain of intervene.c on the GPU: the direction E (host) copied in. */
static int iv_gain(cuda_op_ws *W, size_t T, int path, const float *E, double xx, double yy,
                   double *g, qmla_error *err)
{
    const qmla_mla_dims *d = &W->sw->d;
    const size_t width = path == QMLA_PATH_CONTENT ? d->d_c : d->d_r;
    int st = QMLA_OK;
    double jj = 0.0;
    CU(h2d(W->sw, W->Ed, E, T * width * sizeof(float)), "copy direction");
    if ((st = jvp_norm(W, T, path, W->Ed, &jj, err)))
        return st;
    {
        const double ee = qmla_sumsq(E, T * width);
        *g = (jj / yy) / (ee / xx);
    }
out:
    return st;
}

/* ||Y(C + E_C, K + E_K) - Y||^2: the joint path's full forward on the
 * perturbed caches (Ec, Er of the sweep) against the clean output; queued,
 * its partials into dpart. */
static int joint_enqueue(cuda_op_ws *W, size_t T, double *dpart, qmla_error *err)
{
    cuda_sweep_ws *w = W->sw;
    const qmla_mla_dims *d = &w->d;
    const size_t H = d->H, dc = d->d_c, dr = d->d_r, D = d->D, B = w->B, nt = ntiles(T, B);
    const float tau = (float)d->tau;
    cudaStream_t s = w->stream;
    int st = QMLA_OK;
    prof_mark(w);
    add_kernel<<<grid_for(T * dc), SM_THREADS, 0, s>>>(w->C, w->Ec, W->Cp, T * dc);
    CU(cudaGetLastError(), "joint c_kv");
    add_kernel<<<grid_for(T * dr), SM_THREADS, 0, s>>>(w->K, w->Er, W->Kp, T * dr);
    CU(cudaGetLastError(), "joint k_rope");
    for (size_t k = 0; k < nt; k++) {
        const size_t t0 = k * B, t1 = t0 + B < T ? t0 + B : T, Bt = t1 - t0, L = t1;
        if (!w->a_valid) { /* the clean output of the tile into Y[0] */
            if ((st = attention_tile(w, T, k, err)))
                goto out;
            CB(aggregate_tile(w, Bt, L, t0, w->Z, w->C), "aggregation");
            CB(project_tile(w, Bt, w->Y[0]), "projection");
        }
        CB(logits_tile(w, T, Bt, L, t0, dc, tau, w->ql + t0 * dc, W->Cp, 0.0f, w->P2),
           "joint logits");
        CB(logits_tile(w, T, Bt, L, t0, dr, tau, w->qr + t0 * dr, W->Kp, 1.0f, w->P2),
           "joint logits");
        softmax_rows_kernel<<<(unsigned)(H * Bt), SM_THREADS, 0, s>>>(w->P2, NULL, w->P2, Bt, L,
                                                                    t0);
        CU(cudaGetLastError(), "joint softmax");
        CB(aggregate_tile(w, Bt, L, t0, w->P2, W->Cp), "joint aggregation");
        CB(project_tile(w, Bt, w->Y[2]), "joint projection");
        sumsq_kernel<<<NORM_BLOCKS, SM_THREADS, 0, s>>>(w->Y[2], w->Y[0], Bt * D,
                                                        dpart + k * NORM_BLOCKS);
        CU(cudaGetLastError(), "joint norm");
    }
out:
    return st;
}

/* The same, waited for (the run-8 sequences). */
static int joint_norm(cuda_op_ws *W, size_t T, double *out_ss, qmla_error *err)
{
    int st = joint_enqueue(W, T, W->jpart, err);
    if (!st)
        st = sum_partials(W, ntiles(T, W->sw->B), "joint pass", out_ss, err);
    if (st)
        cudaStreamSynchronize(W->sw->stream);
    return st;
}

/* qmla_intervene_sequence on the GPU: the same random draws on the host in
 * the same order (GSL mt19937), every JVP and the joint pass on the device. */
static int iv_sequence_r8(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                       const qmla_mla_weights *wt, const float *q_nope, const float *q_rope,
                       const float *C, const float *K, const qmla_sweep_params *p, size_t reps,
                       uint64_t seed, void *ws, qmla_iv_item *out, double *ratio,
                       qmla_error *err)
{
    {
        const int ds_ = device_enter(err);
        if (ds_)
            return ds_;
    }
    cuda_op_ws *W = (cuda_op_ws *)ws;
    const size_t dc = d->d_c, dr = d->d_r;
    memset(out, 0, sizeof *out);
    out->seed = seed;
    if (T == 0 || T > W->T_max)
        return qmla_error_set(err, QMLA_EINVAL, "interventions: T = %zu outside [1, %zu]", T,
                              W->T_max);
    qmla_response fin[2];
    /* the weights as op_sequence's; the response-only sweep with the clean
     * output (the joint pass reuses it when the sequence is one tile) */
    if (before_mode())
        sweep_layer_begin(W->sw);
    int st = sweep_run(ex, p, d, T, wt, q_nope, q_rope, C, K, 0, W->sw, fin, !before_mode(), 1,
                       1, err);
    if (st)
        return st;
    const double yy = W->sw->yy;
    const size_t wmax = dc > dr ? dc : dr;
    float *E0 = (float *)malloc(T * wmax * sizeof *E0);
    float *E1 = (float *)malloc(T * wmax * sizeof *E1);
    size_t *perm = (size_t *)malloc(T * sizeof *perm);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (!E0 || !E1 || !perm || !rng) {
        st = qmla_error_set(err, QMLA_ENOMEM, "interventions: out of memory");
        goto done;
    }
    if (qmla_iv_begin(rng, seed, reps, fin, yy, out, ratio))
        goto done;
    for (int path = 0; path < 2; path++) {
        size_t width;
        double xx;
        int degen;
        const double tp = ph_begin();
        st = qmla_op_path_direction(p, path, C, K, T, dc, dr, E0, &width, &xx, &degen, err);
        ph_end(QMLA_CUDA_PH_DIR, tp);
        if (st)
            goto done;
        const size_t n = T * width;
        out->r_finite[path] = fin[path].response;
        if ((st = iv_gain(W, T, path, E0, xx, yy, &out->g_jvp[path], err)))
            goto done;
        const double e0 = sqrt(qmla_sumsq(E0, n));
        for (int c = 0; c < QMLA_N_CTRL; c++)
            for (size_t r = 0; r < reps; r++) {
                const double tc = ph_begin();
                qmla_iv_control(rng, c, E0, E1, T, width, e0, perm);
                ph_end(QMLA_CUDA_PH_CTRL, tc);
                double g;
                if ((st = iv_gain(W, T, path, E1, xx, yy, &g, err)))
                    goto done;
                ratio[((size_t)path * QMLA_N_CTRL + (size_t)c) * reps + r] = g / out->g_jvp[path];
            }
    }
    /* joint: both caches perturbed by the sweep's QDQ directions (the
     * same arrays qmla_sweep_error_direction gives the CPU) */
    {
        double ss = 0.0;
        if ((st = joint_norm(W, T, &ss, err)))
            goto done;
        qmla_iv_joint(out, ss / yy, fin, p->nmse);
    }
done:
    if (rng)
        gsl_rng_free(rng);
    free(E0);
    free(E1);
    free(perm);
    return st;
}

/* qmla_op_sequence on the GPU: the same steps and host arithmetic, with the
 * sweep, the JVPs and the sensitivities on the device. Since run 10 per
 * configuration: the response-only sweep and the JVPs of both paths queued
 * together (the JVPs on the sweep's own directions, still on the device),
 * one synchronisation; while the GPU runs them the host draws the next
 * configuration's directions (on ex's threads) into the other pinned
 * buffer; each point's weights come from the direction the sweep drew
 * (qmla_op_point_begin_dir: the function qmla_op_point_begin would call
 * again, of the same arguments), so nothing is drawn twice. */
static int op_sequence(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                       const qmla_mla_weights *wt, const void *layer, const float *q_nope,
                       const float *q_rope, const float *C, const float *K,
                       const qmla_op_config *conf, size_t nconf, void *ws, qmla_op_point *pts,
                       double *alloc, double *sigma, qmla_error *err)
{
    if (before_r8())
        return op_sequence_r8(ex, d, T, wt, layer, q_nope, q_rope, C, K, conf, nconf, ws, pts,
                              alloc, sigma, err);
    cuda_op_ws *W = (cuda_op_ws *)ws;
    cuda_sweep_ws *w = W->sw;
    const cuda_sens_layer *Ly = (const cuda_sens_layer *)layer;
    if (Ly && !W->with_sens)
        return qmla_error_set(err, QMLA_EINVAL,
                              "operator: sensitivities asked, workspace without them");
    if (T == 0 || T > W->T_max)
        return qmla_error_set(err, QMLA_EINVAL, "operator: T = %zu outside [1, %zu]", T,
                              W->T_max);
    if (nconf == 0)
        return QMLA_OK;
    const size_t dc = d->d_c, dr = d->d_r, nt = ntiles(T, w->B), np = nt * NORM_BLOCKS;
    const double cc = qmla_sumsq(C, T * dc), kk = qmla_sumsq(K, T * dr);
    double yy = 0.0;
    sweep_dirs dir[2];
    qmla_sweep_params sp[2];
    qmla_error nerr; /* the next configuration's directions: reported in order */
    qmla_error_clear(&nerr);
    int st = QMLA_OK, nst = QMLA_OK;
    sp[0] = qmla_op_config_sweep(&conf[0]);
    if ((st = sweep_prep(w, ex, &sp[0], d, T, C, K, w->hEp[0], &dir[0], err)))
        return qmla_error_prefix(err, "INT%d G%d nu %g: ", conf[0].bits, conf[0].group,
                                 conf[0].nmse);
    for (size_t k = 0; k < nconf; k++) {
        const int b = (int)(k & 1);
        const sweep_dirs *r = &dir[b];
        qmla_response fin[2];
        W->sev_n = 0;
        stage_mark(W, -1);
        if ((st = sweep_enqueue(d, T, wt, q_nope, q_rope, C, K, w, r, 1, k == 0, k == 0, err)))
            goto fail;
        stage_mark(W, QMLA_CUDA_ST_FINITE);
        for (int path = 0; path < 2; path++)
            if (!r->degenerate[path] &&
                (st = jvp_enqueue(W, T, path, path == QMLA_PATH_CONTENT ? w->Ec : w->Er,
                                  W->jpart + (size_t)path * np, err)))
                goto fail;
        stage_mark(W, QMLA_CUDA_ST_JVP);
        CU(cudaMemcpyAsync(W->hjpart, W->jpart, 2 * np * sizeof(double), cudaMemcpyDeviceToHost,
                           w->stream),
           "copy sums");
        /* the next directions while the GPU runs these */
        if (k + 1 < nconf) {
            sp[!b] = qmla_op_config_sweep(&conf[k + 1]);
            nst = sweep_prep(w, ex, &sp[!b], d, T, C, K, w->hEp[!b], &dir[!b], &nerr);
        }
        if ((st = sweep_finish(d, T, w, r, 1, k == 0, fin, err)))
            return qmla_error_prefix(err, "INT%d G%d nu %g: ", conf[k].bits, conf[k].group,
                                     conf[k].nmse);
        stage_end(W); /* the stream has run: no wait */
        if (k == 0) {
            yy = w->yy;
            if (Ly) {
                if ((st = sens_exact(W, Ly, T, sigma, sigma + T, err)))
                    return st;
                qmla_op_sigma_scale(sigma, sigma, T, cc, kk, yy);
            }
        }
        const double tp = ph_begin();
        for (int path = 0; path < 2; path++) {
            qmla_op_point *p = &pts[2 * k + (size_t)path];
            double *wtk = alloc + (2 * k + (size_t)path) * T;
            const size_t width = path == QMLA_PATH_CONTENT ? dc : dr;
            double ee;
            if (qmla_op_point_begin_dir(p, path, &conf[k], T, width, r->E[path],
                                        r->degenerate[path], &fin[path], yy, wtk, &ee))
                continue;
            const double jj = slot_sum(W->hjpart + (size_t)path * np, nt);
            p->g_jvp = (jj / yy) / (ee / r->xx[path]);
            p->g_finite = fin[path].response;
            if (Ly)
                qmla_op_point_pred(p, sigma + (size_t)path * T, wtk, T);
        }
        ph_end(QMLA_CUDA_PH_POINTS, tp);
        if (nst) {
            *err = nerr;
            return qmla_error_prefix(err, "INT%d G%d nu %g: ", conf[k + 1].bits,
                                     conf[k + 1].group, conf[k + 1].nmse);
        }
    }
    return QMLA_OK;
out:
fail:
    cudaStreamSynchronize(w->stream);
    return st;
}

/* qmla_intervene_sequence on the GPU: the same random draws on the host in
 * the same order (GSL mt19937), every JVP and the joint pass on the device.
 * Since run 10 pipelined: the QDQ directions are the sweep's (on the device
 * already); each control is drawn into one of IV_SLOTS pinned host buffers
 * while the GPU runs the JVPs queued before it (a slot is reused once its
 * copy to the device has run), every JVP and the joint pass queued with
 * their partial sums in their own slots, one synchronisation at the end;
 * then the gains and ratios with the CPU's lines, in the CPU's order. */
static int iv_sequence(const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                       const qmla_mla_weights *wt, const float *q_nope, const float *q_rope,
                       const float *C, const float *K, const qmla_sweep_params *p, size_t reps,
                       uint64_t seed, void *ws, qmla_iv_item *out, double *ratio,
                       qmla_error *err)
{
    if (before_r8())
        return iv_sequence_r8(ex, d, T, wt, q_nope, q_rope, C, K, p, reps, seed, ws, out, ratio,
                              err);
    cuda_op_ws *W = (cuda_op_ws *)ws;
    cuda_sweep_ws *w = W->sw;
    const size_t dc = d->d_c, dr = d->d_r, wmax = dc > dr ? dc : dr;
    memset(out, 0, sizeof *out);
    out->seed = seed;
    if (T == 0 || T > W->T_max)
        return qmla_error_set(err, QMLA_EINVAL, "interventions: T = %zu outside [1, %zu]", T,
                              W->T_max);
    const size_t nt = ntiles(T, w->B), np = nt * NORM_BLOCKS;
    const size_t per_path = 1 + QMLA_N_CTRL * reps, nitems = 2 * per_path + 1;
    qmla_response fin[2];
    sweep_dirs r;
    int st = sweep_prep(w, ex, p, d, T, C, K, w->hEp[0], &r, err);
    if (st)
        return st;
    if ((st = sweep_enqueue(d, T, wt, q_nope, q_rope, C, K, w, &r, 1, 1, 1, err))) {
        cudaStreamSynchronize(w->stream);
        return st;
    }
    if ((st = sweep_finish(d, T, w, &r, 1, 1, fin, err)))
        return st;
    const double yy = w->yy;
    size_t *perm = (size_t *)malloc(T * sizeof *perm);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    size_t j = 0; /* controls drawn */
    if (!perm || !rng) {
        st = qmla_error_set(err, QMLA_ENOMEM, "interventions: out of memory");
        goto done;
    }
    if ((st = ensure_slots(W, nitems, err)))
        goto done;
    for (int k = 0; k < IV_SLOTS; k++) {
        if (!W->hc[k])
            CU(cudaMallocHost((void **)&W->hc[k], W->T_max * wmax * sizeof(float)),
               "control directions");
        if (!W->dc_[k])
            CU(cudaMalloc((void **)&W->dc_[k], W->T_max * wmax * sizeof(float)),
               "control directions");
        if (!W->evc[k])
            CU(cudaEventCreateWithFlags(&W->evc[k], cudaEventDisableTiming), "event");
    }
    if (qmla_iv_begin(rng, seed, reps, fin, yy, out, ratio))
        goto done;
    for (int path = 0; path < 2; path++) {
        const size_t width = path == QMLA_PATH_CONTENT ? dc : dr, n = T * width;
        const float *E0 = r.E[path];
        const size_t base = (size_t)path * per_path;
        out->r_finite[path] = fin[path].response;
        /* the QDQ direction: the sweep's, on the device */
        const double tp = ph_begin();
        W->ee[base] = qmla_sumsq(E0, n);
        const double e0 = sqrt(W->ee[base]);
        ph_end(QMLA_CUDA_PH_POINTS, tp);
        if ((st = jvp_enqueue(W, T, path, path == QMLA_PATH_CONTENT ? w->Ec : w->Er,
                              W->jpart + base * np, err)))
            goto fail;
        for (int c = 0; c < QMLA_N_CTRL; c++)
            for (size_t q = 0; q < reps; q++, j++) {
                const int sl = (int)(j % IV_SLOTS);
                if (j >= IV_SLOTS) { /* the slot's last copy has run */
                    const double tw = ph_begin();
                    CU(cudaEventSynchronize(W->evc[sl]), "control copy");
                    ph_end(QMLA_CUDA_PH_WAIT, tw);
                }
                const double tc = ph_begin();
                qmla_iv_control(rng, c, E0, W->hc[sl], T, width, e0, perm);
                const size_t it = base + 1 + (size_t)c * reps + q;
                W->ee[it] = qmla_sumsq(W->hc[sl], n);
                ph_end(QMLA_CUDA_PH_CTRL, tc);
                CU(h2d(w, W->dc_[sl], W->hc[sl], n * sizeof(float)), "copy control");
                CU(cudaEventRecord(W->evc[sl], w->stream), "event");
                if ((st = jvp_enqueue(W, T, path, W->dc_[sl], W->jpart + it * np, err)))
                    goto fail;
            }
    }
    /* joint: both caches perturbed by the sweep's QDQ directions */
    if ((st = joint_enqueue(W, T, W->jpart + 2 * per_path * np, err)))
        goto fail;
    CU(cudaMemcpyAsync(W->hjpart, W->jpart, nitems * np * sizeof(double),
                       cudaMemcpyDeviceToHost, w->stream),
       "copy sums");
    CU(ws_sync(w), "interventions");
    {
        const double tp = ph_begin();
        for (int path = 0; path < 2; path++) {
            const size_t base = (size_t)path * per_path;
            const double xx = r.xx[path];
            const double jj0 = slot_sum(W->hjpart + base * np, nt);
            out->g_jvp[path] = (jj0 / yy) / (W->ee[base] / xx);
            for (int c = 0; c < QMLA_N_CTRL; c++)
                for (size_t q = 0; q < reps; q++) {
                    const size_t it = base + 1 + (size_t)c * reps + q;
                    const double g = (slot_sum(W->hjpart + it * np, nt) / yy) / (W->ee[it] / xx);
                    ratio[((size_t)path * QMLA_N_CTRL + (size_t)c) * reps + q] =
                        g / out->g_jvp[path];
                }
        }
        const double ss = slot_sum(W->hjpart + 2 * per_path * np, nt);
        qmla_iv_joint(out, ss / yy, fin, p->nmse);
        ph_end(QMLA_CUDA_PH_POINTS, tp);
    }
    goto done;
out:
fail:
    cudaStreamSynchronize(w->stream);
done:
    if (rng)
        gsl_rng_free(rng);
    free(perm);
    return st;
}

/* The driver loaded another layer (perhaps at the same addresses): its
 * weights go to the device with its first sequence. */
static void op_layer_begin(void *ws) { sweep_layer_begin(((cuda_op_ws *)ws)->sw); }

extern "C" const qmla_op_ops qmla_cuda_op_ops = {op_ws_alloc, op_ws_free, op_layer_alloc,
                                                op_layer_free, op_sequence, op_layer_begin};
extern "C" const qmla_iv_ops qmla_cuda_iv_ops = {iv_ws_alloc, op_ws_free, iv_sequence,
                                                op_layer_begin};

/* ---- the effective-cache evaluation (qmla eval) -------------------------------
 * qmla_tf_eval_cell's attention work (transform/tfeval_int.h) on the GPU:
 * per sequence the clean pass and the three quantized passes (both caches,
 * content only, RoPE only) tile by tile on the sweep's workspace, the
 * squared output differences in double (one partial per block), and the
 * masked positional scores Q_P,h K^T and Q_P,h (K~ - K)^T in double (one
 * block per (head, query token), a fixed tree); ||C||_2 from C^T C (DGEMM)
 * and per layer ||P_h||_2 from P_h P_h^T with P_h^T = W_O,h W_UV,h (DGEMM,
 * rounded to float as the CPU stores it), their largest eigenvalues by the
 * CPU's own GSL call on the host. The effective caches C~, K~ are the
 * CPU's (qmla_transform_effective_*), bit for bit. */

#include "transform/learn_int.h"
#include "transform/tfeval_int.h"

#if QMLA_HAVE_CUSOLVER
#include <cusolverDn.h>
#endif

static cublasStatus_t dgemm_rm(cublasHandle_t h, int ta, int tb, size_t M, size_t N, size_t K,
                               const double *A, size_t lda, long long sA, const double *Bm,
                               size_t ldb, long long sB, double beta, double *C, size_t ldc,
                               long long sC, size_t batch)
{
    const double one = 1.0;
    return cublasDgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K,
                                     &one, Bm, (int)ldb, sB, A, (int)lda, sA, &beta, C,
                                     (int)ldc, sC, (int)batch);
}

/* y = (double)x; with round_f, y = (double)(float)x for double x. */
static __global__ void to_double_kernel(const float *x, double *y, size_t n)
{
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x)
        y[k] = (double)x[k];
}

static __global__ void round_float_kernel(double *y, size_t n)
{
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x)
        y[k] = (double)(float)y[k];
}

/* Block (h, i): over the keys s <= i, sum of (q . k_s)^2 and of
 * (q . (k~_s - k_s))^2 in double, q = q_rope[h, i] (head-major [H, T, d_r]);
 * into den[h T + i], num[h T + i]. */
static __global__ void pos_scores_kernel(const float *qr, const float *K, const float *Ke,
                                         size_t T, size_t dr, double *den, double *num)
{
    __shared__ double sh[SM_THREADS];
    extern __shared__ double q[];
    const size_t row = blockIdx.x, i = row % T;
    for (size_t j = threadIdx.x; j < dr; j += blockDim.x)
        q[j] = (double)qr[row * dr + j];
    __syncthreads();
    double z2 = 0.0, d2 = 0.0;
    for (size_t s = threadIdx.x; s <= i; s += blockDim.x) {
        double z = 0.0, dz = 0.0;
        for (size_t j = 0; j < dr; j++) {
            const double k = (double)K[s * dr + j];
            z += q[j] * k;
            dz += q[j] * ((double)Ke[s * dr + j] - k);
        }
        z2 += z * z;
        d2 += dz * dz;
    }
    const double a = block_sum(z2, sh);
    const double b = block_sum(d2, sh);
    if (threadIdx.x == 0) {
        den[row] = a;
        num[row] = b;
    }
}

/* Eval's ||C||_2 eigensolver on its own stream ahead of the passes (run
 * 10's order) or on the passes' stream after them (run 8's, and
 * QMLA_CUDA_EVAL_SOLVER_AFTER=1: the benchmark's comparison of run 11). */
static int solver_after_v = -1;
extern "C" int qmla_cuda_engine_solver_after(void)
{
    if (solver_after_v < 0) {
        const char *v = getenv("QMLA_CUDA_EVAL_SOLVER_AFTER");
        /* unset, "" or "0": 0; "1": 1; anything else is refused by
         * qmla_cuda_engine_switch_error (device_enter) and reads as 0 */
        solver_after_v = v && !strcmp(v, "1");
    }
    return solver_after_v;
}
extern "C" int qmla_cuda_engine_set_solver_after(int on)
{
    const int was = qmla_cuda_engine_solver_after();
    solver_after_v = on ? 1 : 0;
    return was;
}
static int solver_own_stream(void) { return !before_r8() && !qmla_cuda_engine_solver_after(); }

typedef struct cuda_eval_ctx {
    cuda_sweep_ws *sw;
    size_t T;
    int threads;      /* host threads of the eigensolver */
    double *Cd, *G;   /* device: C as double [T, d_c], C^T C [d_c, d_c] */
    double *hG;       /* host [d_c, d_c] */
    double *pos, *hpos; /* [2, H, T]: den, num */
#if QMLA_HAVE_CUSOLVER
    /* ||C||_2 on the device: the eigenvalues of C^T C (cusolverDnDsyevd,
     * values only, double), the largest copied back with the status */
    cusolverDnHandle_t sol;
    double *ev, *work, *hlam; /* device [d_c], [lwork]; host pinned [1] */
    int *info, *hinfo;        /* device [1]; host pinned [1] */
    int lwork;
    /* since run 10 the eigensolver runs on its own stream, concurrently
     * with the sequence's four attention passes: evg (the Gram is ready)
     * and evd (the eigenvalue and status are copied) order the two */
    cudaStream_t s2;
    cudaEvent_t evg, evd;
    /* solver_own_stream() as eval_begin set the solver's stream: read once
     * there, so a QMLA_CUDA_EVAL_SOLVER_AFTER / before-mode switch between
     * begin and a sequence cannot run the solver on s2 unordered with the
     * Gram on the passes' stream (review11) */
    int own;
#endif
} cuda_eval_ctx;

/* cudaFree of the n device pointers of p that are not NULL. */
static void cuda_free_all(void *const *p, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (p[k])
            cudaFree(p[k]);
}

static void eval_end(void *p)
{
    device_enter_quiet();
    cuda_eval_ctx *c = (cuda_eval_ctx *)p;
    if (c->sw)
        sweep_ws_free(c->sw);
    void *const dev[] = {c->Cd, c->G, c->pos};
    cuda_free_all(dev, 3);
    if (c->hpos)
        cudaFreeHost(c->hpos);
    free(c->hG);
#if QMLA_HAVE_CUSOLVER
    void *const sv[] = {c->ev, c->work, c->info};
    cuda_free_all(sv, 3);
    if (c->hlam)
        cudaFreeHost(c->hlam);
    if (c->hinfo)
        cudaFreeHost(c->hinfo);
    if (c->sol)
        cusolverDnDestroy(c->sol);
    if (c->evg)
        cudaEventDestroy(c->evg);
    if (c->evd)
        cudaEventDestroy(c->evd);
    if (c->s2)
        cudaStreamDestroy(c->s2);
#endif
    const int th = c->threads;
    memset(c, 0, sizeof *c);
    c->threads = th;
}

static int eval_begin(void *p, const qmla_mla_dims *d, size_t T, qmla_error *err)
{
    {
        const int ds_ = device_enter(err);
        if (ds_)
            return ds_;
    }
    cuda_eval_ctx *c = (cuda_eval_ctx *)p;
    void *sw = NULL;
    int st = sweep_ws_alloc(d, T, 0, &sw, err);
    if (st)
        return st;
    c->sw = (cuda_sweep_ws *)sw;
    c->T = T;
    const size_t dc = d->d_c, H = d->H;
    CU(cudaMalloc((void **)&c->Cd, T * dc * sizeof(double)), "c_kv (double)");
    CU(cudaMalloc((void **)&c->G, dc * dc * sizeof(double)), "Gram of c_kv");
    CU(cudaMalloc((void **)&c->pos, 2 * H * T * sizeof(double)), "positional sums");
    CU(cudaMallocHost((void **)&c->hpos, 2 * H * T * sizeof(double)), "positional sums");
    if (!(c->hG = (double *)malloc(dc * dc * sizeof(double)))) {
        st = qmla_error_set(err, QMLA_ENOMEM, "cuda engine: out of memory");
        goto out;
    }
#if QMLA_HAVE_CUSOLVER
    CU(cudaStreamCreateWithFlags(&c->s2, cudaStreamNonBlocking), "eigensolver stream");
    CU(cudaEventCreateWithFlags(&c->evg, cudaEventDisableTiming), "event");
    CU(cudaEventCreateWithFlags(&c->evd, cudaEventDisableTiming), "event");
    {
        cusolverStatus_t cs = cusolverDnCreate(&c->sol);
        if (cs == CUSOLVER_STATUS_SUCCESS)
            cs = cusolverDnSetStream(c->sol, (c->own = solver_own_stream()) ? c->s2
                                                                            : c->sw->stream);
        if (cs == CUSOLVER_STATUS_SUCCESS)
            cs = cusolverDnDsyevd_bufferSize(c->sol, CUSOLVER_EIG_MODE_NOVECTOR,
                                             CUBLAS_FILL_MODE_LOWER, (int)dc, c->G, (int)dc,
                                             c->ev, &c->lwork);
        if (cs != CUSOLVER_STATUS_SUCCESS) {
            st = qmla_error_set(err, QMLA_EIO,
                                "cuda engine: cuSOLVER set-up for ||C||_2 (d_c %zu): status %d",
                                dc, (int)cs);
            goto out;
        }
    }
    CU(cudaMalloc((void **)&c->ev, dc * sizeof(double)), "eigenvalues of C^T C");
    CU(cudaMalloc((void **)&c->work, (size_t)(c->lwork > 0 ? c->lwork : 1) * sizeof(double)),
       "eigensolver workspace");
    CU(cudaMalloc((void **)&c->info, sizeof(int)), "eigensolver status");
    CU(cudaMallocHost((void **)&c->hlam, sizeof(double)), "largest eigenvalue");
    CU(cudaMallocHost((void **)&c->hinfo, sizeof(int)), "eigensolver status");
#endif
out:
    if (st)
        eval_end(c);
    return st;
}

/* QMLA_ENONFINITE naming the first head whose d x d Gram (of `what`) has a
 * non-finite entry. */
static int grams_finite(const double *G, size_t H, size_t d, const char *what, qmla_error *err)
{
    for (size_t h = 0; h < H; h++)
        for (size_t i = 0; i < d * d; i++)
            if (!isfinite(G[h * d * d + i]))
                return qmla_error_set(err, QMLA_ENONFINITE,
                                      "eval bound: head %zu of %zu: the Gram %s has %g at "
                                      "entry %zu: the weights of that head are not finite "
                                      "(`qmla check` locates them)",
                                      h, H, what, G[h * d * d + i], i);
    return QMLA_OK;
}

/* pn[h] = sqrt(lambda_max) (a rounding-negative eigenvalue of a PSD
 * product is 0); a non-finite lambda_max (the eigensolver out of memory:
 * GSL's workspace, or non-finite input) is QMLA_ENONFINITE naming the head
 * and the quantity, never a norm of 0 (review10). */
static int head_norms_from(const double *lam, size_t H, double *pn, qmla_error *err)
{
    for (size_t h = 0; h < H; h++) {
        if (!isfinite(lam[h]))
            return qmla_error_set(err, QMLA_ENONFINITE,
                                  "eval bound: head %zu of %zu: ||W_O,h W_UV,h||_2^2 (the "
                                  "largest eigenvalue of its Gram product) is %g: the host "
                                  "eigensolver ran out of memory or its input is not finite",
                                  h, H, lam[h]);
        pn[h] = sqrt(lam[h] > 0 ? lam[h] : 0);
    }
    return QMLA_OK;
}

/* ||P_h||_2 of every head: X_h = W_O,h W_UV,h [D, d_c] in double (DGEMM),
 * rounded to float as the CPU stores it, G_h = X_h^T X_h (DGEMM), the
 * largest eigenvalues on the host (GSL, as the CPU), heads in chunks of at
 * most 1 GiB of X. */
static int eval_head_norms(void *p, const qmla_mla_dims *d, const qmla_mla_weights *wt,
                           double *pn, qmla_error *err)
{
    {
        const int ds_ = device_enter(err);
        if (ds_)
            return ds_;
    }
    cuda_eval_ctx *c = (cuda_eval_ctx *)p;
    cuda_sweep_ws *w = c->sw;
    const size_t H = d->H, D = d->D, dc = d->d_c, dv = d->d_v, HV = H * dv;
    cudaStream_t s = w->stream;
    int st = QMLA_OK;
    float *f = NULL;
    double *wo = NULL, *wuv = NULL, *X = NULL, *G = NULL, *hG = NULL, *lam = NULL;
    size_t hc = (size_t)(1073741824.0 / ((double)D * (double)dc * 8.0));
    hc = hc < 1 ? 1 : hc > H ? H : hc;
    const size_t nf = D * HV > HV * dc ? D * HV : HV * dc;
    /* since run 10: ||P_h||_2^2 = lambda_max(G1_h G2_h), G1_h = W_O,h^T W_O,h,
     * G2_h = W_UV,h W_UV,h^T (d_v x d_v, in double), instead of the d_c x d_c
     * Gram of P_h^T rounded to float (the CPU's; the two differ by that
     * rounding) */
    const int small = !before_r8();
    CU(cudaMalloc((void **)&f, nf * sizeof(float)), "weights staging");
    CU(cudaMalloc((void **)&wo, D * HV * sizeof(double)), "w_o (double)");
    CU(cudaMalloc((void **)&wuv, HV * dc * sizeof(double)), "w_uv (double)");
    if (small) {
        CU(cudaMalloc((void **)&G, 2 * H * dv * dv * sizeof(double)), "head Grams");
        hG = (double *)malloc(2 * H * dv * dv * sizeof(double));
    } else {
        CU(cudaMalloc((void **)&X, hc * D * dc * sizeof(double)), "P_h");
        CU(cudaMalloc((void **)&G, hc * dc * dc * sizeof(double)), "P_h Grams");
        hG = (double *)malloc(H * dc * dc * sizeof(double));
    }
    lam = (double *)malloc(H * sizeof(double));
    if (!hG || !lam) {
        st = qmla_error_set(err, QMLA_ENOMEM, "bound: out of memory");
        goto out;
    }
    prof_mark(w);
    CU(h2d_staged(w, f, wt->w_o, D * HV * sizeof(float)), "copy w_o");
    to_double_kernel<<<grid_for(D * HV), SM_THREADS, 0, s>>>(f, wo, D * HV);
    CU(cudaGetLastError(), "w_o (double)");
    CU(h2d_staged(w, f, wt->w_uv, HV * dc * sizeof(float)), "copy w_uv");
    to_double_kernel<<<grid_for(HV * dc), SM_THREADS, 0, s>>>(f, wuv, HV * dc);
    CU(cudaGetLastError(), "w_uv (double)");
    if (small) {
        /* G1_h = W_O,h^T W_O,h: W_O,h the columns h dv .. h dv + dv of w_o [D, HV] */
        CB(dgemm_rm(w->blas, 1, 0, dv, dv, D, wo, HV, (long long)dv, wo, HV, (long long)dv, 0.0,
                    G, dv, (long long)(dv * dv), H),
           "head Grams W_O");
        /* G2_h = W_UV,h W_UV,h^T: W_UV,h [dv, dc] */
        CB(dgemm_rm(w->blas, 0, 1, dv, dv, dc, wuv, dc, (long long)(dv * dc), wuv, dc,
                    (long long)(dv * dc), 0.0, G + H * dv * dv, dv, (long long)(dv * dv), H),
           "head Grams W_UV");
        CU(cudaMemcpyAsync(hG, G, 2 * H * dv * dv * sizeof(double), cudaMemcpyDeviceToHost, s),
           "copy head Grams");
        CU(ws_sync(c->sw), "head norms");
        /* non-finite weights: named, before any eigensolve (GSL's QR
         * iterations on NaN give NaN at best) */
        if ((st = grams_finite(hG, H, dv, "W_O,h^T W_O,h (from w_o)", err)) ||
            (st = grams_finite(hG + H * dv * dv, H, dv, "W_UV,h W_UV,h^T (from w_uv)", err)))
            goto out;
        {
            const double te = ph_begin(); /* the host's eigensolves */
            qmla_lambda_max_psd_prod_batch(hG, hG + H * dv * dv, H, dv, c->threads, lam);
            ph_end(QMLA_CUDA_PH_EVAL_HEADS, te);
        }
        if ((st = head_norms_from(lam, H, pn, err)))
            goto out;
        goto out;
    }
    for (size_t h0 = 0; h0 < H; h0 += hc) {
        const size_t nh = h0 + hc <= H ? hc : H - h0;
        /* X_h [D, dc] = w_o[:, h dv .. h dv + dv) (row stride HV) w_uv[h] [dv, dc] */
        CB(dgemm_rm(w->blas, 0, 0, D, dc, dv, wo + h0 * dv, HV, (long long)dv,
                    wuv + h0 * dv * dc, dc, (long long)(dv * dc), 0.0, X, dc,
                    (long long)(D * dc), nh),
           "P_h");
        round_float_kernel<<<grid_for(nh * D * dc), SM_THREADS, 0, s>>>(X, nh * D * dc);
        CU(cudaGetLastError(), "P_h as float");
        CB(dgemm_rm(w->blas, 1, 0, dc, dc, D, X, dc, (long long)(D * dc), X, dc,
                    (long long)(D * dc), 0.0, G, dc, (long long)(dc * dc), nh),
           "P_h Gram");
        CU(cudaMemcpyAsync(hG + h0 * dc * dc, G, nh * dc * dc * sizeof(double),
                           cudaMemcpyDeviceToHost, s),
           "copy P_h Grams");
    }
    CU(ws_sync(c->sw), "head norms");
    {
        const double te = ph_begin(); /* the host's eigensolves */
        qmla_lambda_max_sym_batch(hG, H, dc, c->threads, lam);
        ph_end(QMLA_CUDA_PH_EVAL_HEADS, te);
    }
    st = head_norms_from(lam, H, pn, err);
out:
    if (st)
        cudaStreamSynchronize(s);
    void *const dev[] = {f, wo, wuv, X, G};
    cuda_free_all(dev, 5);
    free(hG);
    free(lam);
    return st;
}

/* One query tile's attention of caches (Cs, Ks) into P (softmax in place),
 * then its output into Y. */
static int eval_pass_tile(cuda_sweep_ws *w, size_t T, size_t t0, size_t Bt, const float *Cs,
                          const float *Ks, float *P, float *Y, qmla_error *err)
{
    const qmla_mla_dims *d = &w->d;
    const size_t H = d->H, dc = d->d_c, dr = d->d_r, L = t0 + Bt;
    const long long sZ = (long long)(Bt * L);
    const float tau = (float)d->tau;
    int st = QMLA_OK;
    CB(gemm_rm(w->blas, 0, 1, Bt, L, dc, tau, w->ql + t0 * dc, dc, (long long)(T * dc), Cs, dc,
               0, 0.0f, P, L, sZ, H),
       "content logits");
    CB(gemm_rm(w->blas, 0, 1, Bt, L, dr, tau, w->qr + t0 * dr, dr, (long long)(T * dr), Ks, dr,
               0, 1.0f, P, L, sZ, H),
       "RoPE logits");
    softmax_rows_kernel<<<(unsigned)(H * Bt), SM_THREADS, 0, w->stream>>>(P, NULL, P, Bt, L, t0);
    CU(cudaGetLastError(), "softmax");
    /* eval keeps its products over the whole key range (not causal row
     * blocks: its results stay those of run 12) */
    CB(gemm_rm(w->blas, 0, 0, Bt, dc, L, 1.0f, P, L, sZ, Cs, dc, 0, 0.0f, w->U, dc,
               (long long)(Bt * dc), H),
       "aggregation");
    CB(project_tile(w, Bt, Y), "projection");
out:
    return st;
}

static int eval_sequence(void *p, const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                         const qmla_mla_weights *wt, const float *q_nope, const float *q_rope,
                         const float *C, const float *K, const float *Ce, const float *Ke,
                         qmla_tf_eval_sums *out, qmla_error *err)
{
    {
        const int ds_ = device_enter(err);
        if (ds_)
            return ds_;
    }
    (void)ex;
    cuda_eval_ctx *c = (cuda_eval_ctx *)p;
    cuda_sweep_ws *w = c->sw;
    const size_t H = d->H, dc = d->d_c, dr = d->d_r, D = d->D, B = w->B, nt = ntiles(T, B);
    const size_t np = nt * NORM_BLOCKS;
    cudaStream_t s = w->stream;
    int st = QMLA_OK;
#if QMLA_HAVE_CUSOLVER
    const int own = c->own; /* the stream eval_begin gave the solver */
    const int gram_here = !own; /* else queued before the passes */
#else
    const int gram_here = 1;
#endif
    if (T == 0 || T > c->T)
        return qmla_error_set(err, QMLA_EINVAL, "eval: T = %zu outside [1, %zu]", T, c->T);
    w->threads = qmla_exec_threads(ex);
    if ((st = seq_upload(w, wt, q_nope, q_rope, C, K, T, err)))
        goto out;
    /* C~ and K~ in the error slots */
    CU(h2d_staged(w, w->Ec, Ce, T * dc * sizeof(float)), "copy effective c_kv");
    CU(h2d_staged(w, w->Er, Ke, T * dr * sizeof(float)), "copy effective k_rope");
#if QMLA_HAVE_CUSOLVER
    if (own) {
        /* C^T C first, then its eigenvalues on the solver's stream while
         * the passes below run on this one */
        to_double_kernel<<<grid_for(T * dc), SM_THREADS, 0, s>>>(w->C, c->Cd, T * dc);
        CU(cudaGetLastError(), "c_kv (double)");
        CB(dgemm_rm(w->blas, 1, 0, dc, dc, T, c->Cd, dc, 0, c->Cd, dc, 0, 0.0, c->G, dc, 0, 1),
           "Gram of c_kv");
        CU(cudaEventRecord(c->evg, s), "event");
        CU(cudaStreamWaitEvent(c->s2, c->evg, 0), "event");
        const cusolverStatus_t cs =
            cusolverDnDsyevd(c->sol, CUSOLVER_EIG_MODE_NOVECTOR, CUBLAS_FILL_MODE_LOWER,
                             (int)dc, c->G, (int)dc, c->ev, c->work, c->lwork, c->info);
        if (cs != CUSOLVER_STATUS_SUCCESS) {
            st = qmla_error_set(err, QMLA_EIO,
                                "eval: ||C||_2: cusolverDnDsyevd of C^T C (d_c %zu): status %d",
                                dc, (int)cs);
            goto out;
        }
        CU(cudaMemcpyAsync(c->hlam, c->ev + (dc - 1), sizeof(double), cudaMemcpyDeviceToHost,
                           c->s2),
           "copy largest eigenvalue");
        CU(cudaMemcpyAsync(c->hinfo, c->info, sizeof(int), cudaMemcpyDeviceToHost, c->s2),
           "copy eigensolver status");
        CU(cudaEventRecord(c->evd, c->s2), "event");
    }
#endif
    for (size_t k = 0; k < nt; k++) {
        const size_t t0 = k * B, t1 = t0 + B < T ? t0 + B : T, Bt = t1 - t0;
        if ((st = eval_pass_tile(w, T, t0, Bt, w->C, w->K, w->Z, w->Y[0], err)))
            goto out;
        sumsq_kernel<<<NORM_BLOCKS, SM_THREADS, 0, s>>>(w->Y[0], NULL, Bt * D,
                                                        w->part + k * NORM_BLOCKS);
        CU(cudaGetLastError(), "output norm");
        const float *Cs[3] = {w->Ec, w->Ec, w->C}, *Ks[3] = {w->Er, w->K, w->Er};
        for (int q = 0; q < 3; q++) {
            if ((st = eval_pass_tile(w, T, t0, Bt, Cs[q], Ks[q], w->P1, w->Y[1], err)))
                goto out;
            sumsq_kernel<<<NORM_BLOCKS, SM_THREADS, 0, s>>>(
                w->Y[1], w->Y[0], Bt * D, w->part + (size_t)(q + 1) * np + k * NORM_BLOCKS);
            CU(cudaGetLastError(), "output difference");
        }
    }
    pos_scores_kernel<<<(unsigned)(H * T), SM_THREADS, dr * sizeof(double), s>>>(
        w->qr, w->K, w->Er, T, dr, c->pos, c->pos + H * T);
    CU(cudaGetLastError(), "positional scores");
    if (gram_here) {
        to_double_kernel<<<grid_for(T * dc), SM_THREADS, 0, s>>>(w->C, c->Cd, T * dc);
        CU(cudaGetLastError(), "c_kv (double)");
        CB(dgemm_rm(w->blas, 1, 0, dc, dc, T, c->Cd, dc, 0, c->Cd, dc, 0, 0.0, c->G, dc, 0, 1),
           "Gram of c_kv");
    }
    CU(cudaMemcpyAsync(w->hpart, w->part, 4 * np * sizeof(double), cudaMemcpyDeviceToHost, s),
       "copy sums");
    CU(cudaMemcpyAsync(c->hpos, c->pos, 2 * H * T * sizeof(double), cudaMemcpyDeviceToHost, s),
       "copy positional sums");
#if QMLA_HAVE_CUSOLVER
    /* the eigenvalues of C^T C on the device (ascending: the largest last;
     * the lower triangle, as GSL's symmetric eigensolver reads it) */
    if (before_mode())
        CU(cudaMemcpyAsync(c->hG, c->G, dc * dc * sizeof(double), cudaMemcpyDeviceToHost, s),
           "copy Gram");
    else if (own) /* queued above: this stream waits for it */
        CU(cudaStreamWaitEvent(s, c->evd, 0), "event");
    else {
        const cusolverStatus_t cs =
            cusolverDnDsyevd(c->sol, CUSOLVER_EIG_MODE_NOVECTOR, CUBLAS_FILL_MODE_LOWER,
                             (int)dc, c->G, (int)dc, c->ev, c->work, c->lwork, c->info);
        if (cs != CUSOLVER_STATUS_SUCCESS) {
            st = qmla_error_set(err, QMLA_EIO,
                                "eval: ||C||_2: cusolverDnDsyevd of C^T C (d_c %zu): status %d",
                                dc, (int)cs);
            goto out;
        }
        CU(cudaMemcpyAsync(c->hlam, c->ev + (dc - 1), sizeof(double), cudaMemcpyDeviceToHost,
                           s),
           "copy largest eigenvalue");
        CU(cudaMemcpyAsync(c->hinfo, c->info, sizeof(int), cudaMemcpyDeviceToHost, s),
           "copy eigensolver status");
    }
#else
    CU(cudaMemcpyAsync(c->hG, c->G, dc * dc * sizeof(double), cudaMemcpyDeviceToHost, s),
       "copy Gram");
#endif
    CU(ws_sync(w), "eval sequence");
    {
        double v[4] = {0, 0, 0, 0};
        for (int q = 0; q < 4; q++)
            for (size_t k = 0; k < np; k++)
                v[q] += w->hpart[(size_t)q * np + k];
        if (!isfinite(v[0]))
            return qmla_error_set(err, QMLA_ENONFINITE,
                                  "clean attention pass: expected finite values, found %g as "
                                  "the sum of squares of the attention output Y = O W_O "
                                  "(float32 overflow; `qmla check` locates it)",
                                  v[0]);
        out->yy = v[0];
        for (int q = 0; q < 3; q++)
            out->dd[q] = v[q + 1];
        double den = 0.0;
        for (size_t k = 0; k < H * T; k++)
            den += c->hpos[k];
        out->den = den;
        for (size_t h = 0; h < H; h++) {
            double nh = 0.0;
            for (size_t i = 0; i < T; i++)
                nh += c->hpos[H * T + h * T + i];
            out->nh[h] = nh;
        }
#if QMLA_HAVE_CUSOLVER
        if (!before_mode() && *c->hinfo != 0)
            return qmla_error_set(err, QMLA_EIO,
                                  "eval: ||C||_2: cusolverDnDsyevd of C^T C (d_c %zu): "
                                  "expected info 0, found %d",
                                  dc, *c->hinfo);
        const double l = before_mode() ? qmla_lambda_max_sym(c->hG, dc) : *c->hlam;
#else
        const double l = qmla_lambda_max_sym(c->hG, dc);
#endif
        if (!isfinite(l))
            return qmla_error_set(err, QMLA_ENONFINITE,
                                  "eval: ||C||_2^2 (the largest eigenvalue of C^T C, d_c %zu) "
                                  "is %g: expected a finite value",
                                  dc, l);
        out->cn = sqrt(l > 0 ? l : 0);
    }
out:
    if (st) {
        cudaStreamSynchronize(s);
#if QMLA_HAVE_CUSOLVER
        cudaStreamSynchronize(c->s2);
#endif
    }
    return st;
}

/* The eval callbacks timed (the profile). */
static double eval_inside;
static int eval_head_norms_p(void *p, const qmla_mla_dims *d, const qmla_mla_weights *wt,
                             double *out, qmla_error *err)
{
    const double t0 = wall_now();
    const int st = eval_head_norms(p, d, wt, out, err);
    eval_inside += wall_now() - t0;
    return st;
}
static int eval_begin_p(void *p, const qmla_mla_dims *d, size_t T, qmla_error *err)
{
    const double t0 = wall_now();
    const int st = eval_begin(p, d, T, err);
    eval_inside += wall_now() - t0;
    prof.s[QMLA_CUDA_PH_EVAL_SETUP] += wall_now() - t0;
    return st;
}
static void eval_end_p(void *p)
{
    const double t0 = wall_now();
    eval_end(p);
    eval_inside += wall_now() - t0;
    prof.s[QMLA_CUDA_PH_EVAL_SETUP] += wall_now() - t0;
}
static int eval_sequence_p(void *p, const qmla_exec *ex, const qmla_mla_dims *d, size_t T,
                           const qmla_mla_weights *wt, const float *q_nope, const float *q_rope,
                           const float *C, const float *K, const float *Ce, const float *Ke,
                           qmla_tf_eval_sums *out, qmla_error *err)
{
    const double t0 = wall_now();
    const int st = eval_sequence(p, ex, d, T, wt, q_nope, q_rope, C, K, Ce, Ke, out, err);
    eval_inside += wall_now() - t0;
    return st;
}

extern "C" int qmla_cuda_tf_eval_cell(const qmla_exec *ex, qmla_capture *cap, size_t li,
                                      size_t ci, const qmla_transform *t, const float *gamma,
                                      const qmla_tf_eval_opts *o, qmla_tf_eval_row *row,
                                      qmla_error *err)
{
    {
        const int ds_ = device_enter(err);
        if (ds_)
            return ds_;
    }
    cuda_eval_ctx c;
    memset(&c, 0, sizeof c);
    c.threads = qmla_exec_threads(ex);
    if (!prof_on()) {
        const qmla_tf_eval_impl im = {&c, eval_head_norms, eval_begin, eval_end, eval_sequence};
        return qmla_tf_eval_cell_impl(&im, ex, cap, li, ci, t, gamma, o, row, err);
    }
    /* the profile: the cell's wall time outside the engine's calls is the
     * host's part (loading, effective caches, eigensolves, means) */
    const qmla_tf_eval_impl im = {&c, eval_head_norms_p, eval_begin_p, eval_end_p,
                                  eval_sequence_p};
    eval_inside = 0.0;
    const double t0 = wall_now();
    const int st = qmla_tf_eval_cell_impl(&im, ex, cap, li, ci, t, gamma, o, row, err);
    prof.s[QMLA_CUDA_PH_EVAL_HOST] += wall_now() - t0 - eval_inside;
    return st;
}

extern "C" int qmla_cuda_engine_head_norms(const qmla_mla_dims *d, const qmla_mla_weights *w,
                                           int threads, double *pn, qmla_error *err)
{
    {
        const int ds_ = device_enter(err);
        if (ds_)
            return ds_;
    }
    cuda_eval_ctx c;
    memset(&c, 0, sizeof c);
    c.threads = threads;
    int st = eval_begin(&c, d, 1, err);
    if (!st) {
        st = eval_head_norms(&c, d, w, pn, err);
        eval_end(&c);
    }
    return st;
}

/* ---- learning: the content objective's attention (qmla learn) ------------------
 * The CPU learner (lib/transform/learn.c) with the attention forward and
 * backward of its content objective on the GPU (transform/learn_int.h): the
 * per-head form of learn.c's attn_fast, with every sequence's q_nope,
 * q_rope, k_rope and clean output Y on the device from the learner's
 * allocation on, and per call the effective cache C~ in and G_C~ out:
 *   K_all = C~ W_UK^T, V_all = C~ W_UV^T                  (SGEMM)
 *   Z_h = tau (q_nope,h K_h^T + q_rope,h K^T)             (strided-batched)
 *   A = causal softmax (the sweep's row kernel), O_h = A_h V_h, Y~ = O W_O^T
 *   L_C = ||Y~ - Y||^2 / yden (double, one partial per block), G_Y
 *   G_O = G_Y W_O, G_A,h = G_O,h V_h^T, G_V,h = A_h^T G_O,h,
 *   G_Z = A (.) (G_A - rowsum(A (.) G_A)) (the JVP row kernel),
 *   G_K,h = tau G_Z,h^T q_nope,h, G_C~ = G_K W_UK + G_V W_UV.
 * Full [H, T, T] attention and its gradient (as the CPU learner's
 * workspace): memory O(H T^2). The transform maps, the straight-through
 * quantizer, the Cayley map and AdamW are the CPU learner's, in double
 * where it uses double. */

/* GY = (float)(2 (Yt - Y) / yden); partial sums of (Yt - Y)^2 per block. */
static __global__ void out_loss_kernel(const float *Yt, const float *Y, double yden, size_t n,
                                       float *GY, double *part)
{
    __shared__ double sh[SM_THREADS];
    double s = 0.0;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        const double v = (double)Yt[k] - (double)Y[k];
        s += v * v;
        if (GY)
            GY[k] = (float)(2.0 * v / yden);
    }
    const double v = block_sum(s, sh);
    if (threadIdx.x == 0)
        part[blockIdx.x] = v;
}

typedef struct cuda_learn_seq {
    size_t T;
    double yden;
    float *qn, *qr, *K, *Y; /* device (float32 form) */
    double *qn64, *qr64, *K64, *Y64; /* device (attn_f64: the same values widened) */
} cuda_learn_seq;

typedef struct cuda_learn_ctx {
    qmla_mla_dims d;
    size_t Tmax, nseq[2];
    cuda_learn_seq *seq[2];
    cudaStream_t stream;
    cublasHandle_t blas;
    float *wuk, *wuv, *wo;
    float *Ct, *Kc, *Vc, *Z, *GA, *O, *Yt, *GY, *GO, *GK, *GV, *GC;
    double *part, *hpart;
    int f64; /* attn_f64: the double buffers below instead of the float ones above */
    double *wuk64, *wuv64, *wo64;
    double *Ct64, *Kc64, *Vc64, *Z64, *GA64, *O64, *Yt64, *GY64, *GO64, *GK64, *GV64, *GC64;
} cuda_learn_ctx;

static void learn_ctx_free(void *p)
{
    device_enter_quiet();
    cuda_learn_ctx *c = (cuda_learn_ctx *)p;
    if (!c)
        return;
    for (int b = 0; b < 2; b++) {
        for (size_t k = 0; c->seq[b] && k < c->nseq[b]; k++) {
            const cuda_learn_seq *q = &c->seq[b][k];
            void *const f[] = {q->qn, q->qr, q->K, q->Y, q->qn64, q->qr64, q->K64, q->Y64};
            cuda_free_all(f, 8);
        }
        free(c->seq[b]);
    }
    void *const f[] = {c->wuk, c->wuv, c->wo, c->Ct, c->Kc, c->Vc, c->Z,  c->GA,
                       c->O,   c->Yt,  c->GY, c->GO, c->GK, c->GV, c->GC, c->part};
    cuda_free_all(f, sizeof f / sizeof *f);
    void *const f64[] = {c->wuk64, c->wuv64, c->wo64, c->Ct64, c->Kc64, c->Vc64, c->Z64,
                         c->GA64,  c->O64,   c->Yt64, c->GY64, c->GO64, c->GK64, c->GV64,
                         c->GC64};
    cuda_free_all(f64, sizeof f64 / sizeof *f64);
    if (c->hpart)
        cudaFreeHost(c->hpart);
    if (c->blas) {
        tf32_release(c->blas);
        cublasDestroy(c->blas);
    }
    if (c->stream)
        cudaStreamDestroy(c->stream);
    free(c);
}

/* ---- learning in double (qmla_learn_opts.attn_f64) ----------------------------
 * learn_content's function with every product (cublasDgemmStridedBatched),
 * the softmax, its backward and the objective in double: the CPU learner's
 * attn_fast64 (lib/transform/learn.c) on the device. The effective cache
 * comes in as float and is widened exactly; G_C~ leaves in double (the
 * learner's backward to the parameters goes on in double). */

static cublasStatus_t dgemm_rma(cublasHandle_t h, int ta, int tb, size_t M, size_t N, size_t K,
                                double alpha, const double *A, size_t lda, long long sA,
                                const double *Bm, size_t ldb, long long sB, double beta,
                                double *C, size_t ldc, long long sC, size_t batch)
{
    return cublasDgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)N, (int)M, (int)K,
                                     &alpha, Bm, (int)ldb, sB, A, (int)lda, sA, &beta, C,
                                     (int)ldc, sC, (int)batch);
}

/* Causal softmax in double of the rows of [H, T, T] (row h T + i sees keys
 * s <= i), in place, zeros after. */
static __global__ void softmax_rows64_kernel(double *z, size_t T)
{
    __shared__ double sh[SM_THREADS];
    const size_t row = blockIdx.x, n = row % T + 1;
    double *zr = z + row * T;
    double m = zr[0];
    for (size_t s = threadIdx.x; s < n; s += blockDim.x)
        m = zr[s] > m ? zr[s] : m;
    m = block_max(m, sh);
    double part = 0.0;
    for (size_t s = threadIdx.x; s < n; s += blockDim.x) {
        const double e = exp(zr[s] - m);
        zr[s] = e;
        part += e;
    }
    const double inv = 1.0 / block_sum(part, sh);
    for (size_t s = threadIdx.x; s < n; s += blockDim.x)
        zr[s] *= inv;
    for (size_t s = n + threadIdx.x; s < T; s += blockDim.x)
        zr[s] = 0.0;
}

/* g <- a (.) (g - rowsum(a (.) g)) over the causal keys of each row, in
 * double, zeros after. */
static __global__ void softmax_jvp64_kernel(const double *a, double *g, size_t T)
{
    __shared__ double sh[SM_THREADS];
    const size_t row = blockIdx.x, n = row % T + 1;
    const double *ar = a + row * T;
    double *gr = g + row * T;
    double part = 0.0;
    for (size_t s = threadIdx.x; s < n; s += blockDim.x)
        part += ar[s] * gr[s];
    const double m = block_sum(part, sh);
    for (size_t s = threadIdx.x; s < n; s += blockDim.x)
        gr[s] = ar[s] * (gr[s] - m);
    for (size_t s = n + threadIdx.x; s < T; s += blockDim.x)
        gr[s] = 0.0;
}

/* GY = 2 (Yt - Y) / yden in double; partial sums of (Yt - Y)^2 per block. */
static __global__ void out_loss64_kernel(const double *Yt, const double *Y, double yden, size_t n,
                                         double *GY, double *part)
{
    __shared__ double sh[SM_THREADS];
    double s = 0.0;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < n;
         k += (size_t)gridDim.x * blockDim.x) {
        const double v = Yt[k] - Y[k];
        s += v * v;
        if (GY)
            GY[k] = 2.0 * v / yden;
    }
    const double v = block_sum(s, sh);
    if (threadIdx.x == 0)
        part[blockIdx.x] = v;
}

/* The content attention in either precision (float: learn_content, the
 * default; double: learn_content64, attn_f64): the same products in the same
 * order through these overloads. */
static cublasStatus_t gemm_p(cublasHandle_t h, int ta, int tb, size_t M, size_t N, size_t K,
                             float alpha, const float *A, size_t lda, long long sA,
                             const float *Bm, size_t ldb, long long sB, float beta, float *C,
                             size_t ldc, long long sC, size_t batch)
{
    return gemm_rm(h, ta, tb, M, N, K, alpha, A, lda, sA, Bm, ldb, sB, beta, C, ldc, sC, batch);
}
static cublasStatus_t gemm_p(cublasHandle_t h, int ta, int tb, size_t M, size_t N, size_t K,
                             double alpha, const double *A, size_t lda, long long sA,
                             const double *Bm, size_t ldb, long long sB, double beta, double *C,
                             size_t ldc, long long sC, size_t batch)
{
    return dgemm_rma(h, ta, tb, M, N, K, alpha, A, lda, sA, Bm, ldb, sB, beta, C, ldc, sC, batch);
}
static void widen_p(const float *, float *, size_t, cudaStream_t) {} /* the same buffer */
static void widen_p(const float *x, double *y, size_t n, cudaStream_t s)
{
    to_double_kernel<<<NORM_BLOCKS, SM_THREADS, 0, s>>>(x, y, n);
}
static void softmax_p(float *Z, size_t H, size_t T, cudaStream_t s)
{
    softmax_rows_kernel<<<(unsigned)(H * T), SM_THREADS, 0, s>>>(Z, NULL, Z, T, T, 0);
}
static void softmax_p(double *Z, size_t H, size_t T, cudaStream_t s)
{
    softmax_rows64_kernel<<<(unsigned)(H * T), SM_THREADS, 0, s>>>(Z, T);
}
static void jvp_p(const float *A, float *G, size_t H, size_t T, cudaStream_t s)
{
    softmax_jvp_kernel<<<(unsigned)(H * T), SM_THREADS, 0, s>>>(A, G, G, T, T, 0);
}
static void jvp_p(const double *A, double *G, size_t H, size_t T, cudaStream_t s)
{
    softmax_jvp64_kernel<<<(unsigned)(H * T), SM_THREADS, 0, s>>>(A, G, T);
}
static void loss_p(const float *Yt, const float *Y, double yden, size_t n, float *GY,
                   double *part, cudaStream_t s)
{
    out_loss_kernel<<<NORM_BLOCKS, SM_THREADS, 0, s>>>(Yt, Y, yden, n, GY, part);
}
static void loss_p(const double *Yt, const double *Y, double yden, size_t n, double *GY,
                   double *part, cudaStream_t s)
{
    out_loss64_kernel<<<NORM_BLOCKS, SM_THREADS, 0, s>>>(Yt, Y, yden, n, GY, part);
}

/* A step's name with the precision's tag (evaluated on failure only). */
static const char *lbl(char *buf, size_t n, const char *what, const char *tag)
{
    snprintf(buf, n, "%s%s", what, tag);
    return buf;
}

template <typename R> struct learn_bufs {
    const R *wuk, *wuv, *wo, *qn, *qr, *K, *Y; /* the layer's and the sequence's */
    R *Ct, *Kc, *Vc, *Z, *GA, *O, *Yt, *GY, *GO, *GK, *GV, *GC;
};

template <typename R>
static int learn_attn(cuda_learn_ctx *c, const cuda_learn_seq *q, const learn_bufs<R> &b,
                      const float *Ct, int want_grad, double *f, R *GC, double *tm,
                      const char *tag, qmla_error *err)
{
    const qmla_mla_dims *d = &c->d;
    const size_t T = q->T, H = d->H, dc = d->d_c, dn = d->d_n, dr = d->d_r, dv = d->d_v;
    const size_t D = d->D, HN = H * dn, HV = H * dv;
    const long long sZ = (long long)(T * T);
    const R tau = (R)d->tau, one = (R)1, zero = (R)0;
    cudaStream_t s = c->stream;
    cublasHandle_t h = c->blas;
    char w[96];
    int st = QMLA_OK;
    const double t0 = wall_now();
    double t1 = t0;
    CU(cudaMemcpyAsync(c->Ct, Ct, T * dc * sizeof(float), cudaMemcpyHostToDevice, s),
       "copy effective c_kv");
    widen_p(c->Ct, b.Ct, T * dc, s);
    CU(cudaGetLastError(), "widen c_kv");
    CB(gemm_p(h, 0, 1, T, HN, dc, one, b.Ct, dc, 0, b.wuk, dc, 0, zero, b.Kc, HN, 0, 1),
       lbl(w, sizeof w, "keys K_h", tag));
    CB(gemm_p(h, 0, 1, T, HV, dc, one, b.Ct, dc, 0, b.wuv, dc, 0, zero, b.Vc, HV, 0, 1),
       lbl(w, sizeof w, "values V_h", tag));
    CB(gemm_p(h, 0, 1, T, T, dn, tau, b.qn, dn, (long long)(T * dn), b.Kc, HN, (long long)dn,
              zero, b.Z, T, sZ, H),
       lbl(w, sizeof w, "content logits", tag));
    CB(gemm_p(h, 0, 1, T, T, dr, tau, b.qr, dr, (long long)(T * dr), b.K, dr, 0, one, b.Z, T, sZ,
              H),
       lbl(w, sizeof w, "RoPE logits", tag));
    softmax_p(b.Z, H, T, s);
    CU(cudaGetLastError(), lbl(w, sizeof w, "softmax", tag));
    CB(gemm_p(h, 0, 0, T, dv, T, one, b.Z, T, sZ, b.Vc, HV, (long long)dv, zero, b.O, HV,
              (long long)dv, H),
       lbl(w, sizeof w, "head outputs", tag));
    CB(gemm_p(h, 0, 1, T, D, HV, one, b.O, HV, 0, b.wo, HV, 0, zero, b.Yt, D, 0, 1),
       lbl(w, sizeof w, "projection", tag));
    loss_p(b.Yt, b.Y, q->yden, T * D, want_grad ? b.GY : NULL, c->part, s);
    CU(cudaGetLastError(), lbl(w, sizeof w, "objective", tag));
    CU(cudaMemcpyAsync(c->hpart, c->part, NORM_BLOCKS * sizeof(double), cudaMemcpyDeviceToHost,
                       s),
       "copy objective sums");
    CU(cudaStreamSynchronize(s), lbl(w, sizeof w, "content objective", tag));
    {
        double e = 0.0;
        for (size_t j = 0; j < NORM_BLOCKS; j++)
            e += c->hpart[j];
        if (!isfinite(e))
            return qmla_error_set(err, QMLA_ENONFINITE,
                                  "learn: content objective%s: expected a finite output error, "
                                  "found %g%s",
                                  tag, e, sizeof(R) == sizeof(float) ? " (float32 overflow)" : "");
        *f = e / q->yden;
    }
    t1 = wall_now();
    tm[0] += t1 - t0;
    if (!want_grad)
        return QMLA_OK;
    CB(gemm_p(h, 0, 0, T, HV, D, one, b.GY, D, 0, b.wo, HV, 0, zero, b.GO, HV, 0, 1),
       lbl(w, sizeof w, "G_O", tag));
    CB(gemm_p(h, 0, 1, T, T, dv, one, b.GO, HV, (long long)dv, b.Vc, HV, (long long)dv, zero,
              b.GA, T, sZ, H),
       lbl(w, sizeof w, "G_A", tag));
    CB(gemm_p(h, 1, 0, T, dv, T, one, b.Z, T, sZ, b.GO, HV, (long long)dv, zero, b.GV, HV,
              (long long)dv, H),
       lbl(w, sizeof w, "G_V", tag));
    jvp_p(b.Z, b.GA, H, T, s);
    CU(cudaGetLastError(), lbl(w, sizeof w, "softmax backward", tag));
    CB(gemm_p(h, 1, 0, T, dn, T, tau, b.GA, T, sZ, b.qn, dn, (long long)(T * dn), zero, b.GK, HN,
              (long long)dn, H),
       lbl(w, sizeof w, "G_K", tag));
    CB(gemm_p(h, 0, 0, T, dc, HN, one, b.GK, HN, 0, b.wuk, dc, 0, zero, b.GC, dc, 0, 1),
       lbl(w, sizeof w, "G_C (keys)", tag));
    CB(gemm_p(h, 0, 0, T, dc, HV, one, b.GV, HV, 0, b.wuv, dc, 0, one, b.GC, dc, 0, 1),
       lbl(w, sizeof w, "G_C (values)", tag));
    CU(cudaMemcpyAsync(GC, b.GC, T * dc * sizeof(R), cudaMemcpyDeviceToHost, s), "copy G_C");
    CU(cudaStreamSynchronize(s), lbl(w, sizeof w, "content gradient", tag));
    tm[1] += wall_now() - t1;
out:
    if (st)
        cudaStreamSynchronize(s);
    return st;
}

static int learn_content(void *p, int bank, size_t k, const float *Ct, int want_grad, double *f,
                         float *GC, double *tm, qmla_error *err)
{
    {
        const int ds_ = device_enter(err);
        if (ds_)
            return ds_;
    }
    cuda_learn_ctx *c = (cuda_learn_ctx *)p;
    const cuda_learn_seq *q = &c->seq[bank][k];
    const learn_bufs<float> b = {c->wuk, c->wuv, c->wo, q->qn,  q->qr, q->K,  q->Y,  c->Ct,
                                 c->Kc,  c->Vc,  c->Z,  c->GA,  c->O,  c->Yt, c->GY, c->GO,
                                 c->GK,  c->GV,  c->GC};
    return learn_attn<float>(c, q, b, Ct, want_grad, f, GC, tm, "", err);
}

static int learn_content64(void *p, int bank, size_t k, const float *Ct, int want_grad, double *f,
                           double *GC, double *tm, qmla_error *err)
{
    {
        const int ds_ = device_enter(err);
        if (ds_)
            return ds_;
    }
    cuda_learn_ctx *c = (cuda_learn_ctx *)p;
    const cuda_learn_seq *q = &c->seq[bank][k];
    const learn_bufs<double> b = {c->wuk64, c->wuv64, c->wo64, q->qn64, q->qr64, q->K64,
                                  q->Y64,   c->Ct64,  c->Kc64, c->Vc64, c->Z64,  c->GA64,
                                  c->O64,   c->Yt64,  c->GY64, c->GO64, c->GK64, c->GV64,
                                  c->GC64};
    return learn_attn<double>(c, q, b, Ct, want_grad, f, GC, tm, " (double)", err);
}

/* A device copy of n floats of host x widened to double (through the
 * float scratch tmp of at least n floats). */
static int upload_f64(const float *x, size_t n, float *tmp, double **out, const char *what,
                      qmla_error *err)
{
    int st = QMLA_OK;
    CU(cudaMalloc((void **)out, (n ? n : 1) * sizeof(double)), what);
    CU(cudaMemcpy(tmp, x, n * sizeof(float), cudaMemcpyHostToDevice), what);
    to_double_kernel<<<NORM_BLOCKS, SM_THREADS>>>(tmp, *out, n);
    CU(cudaGetLastError(), what);
    CU(cudaDeviceSynchronize(), what);
out:
    return st;
}

/* The CPU learner, with the content attention on the GPU (content path
 * with the function-aligned objective in its default per-head form; the
 * RoPE path, --objective recon and attn_reference stay the CPU's). */
extern "C" int qmla_cuda_learn_alloc(qmla_learn_path path, const qmla_mla_dims *d,
                                     const qmla_mla_weights *wt, const float *gamma,
                                     qmla_rope_pairing pairing, const qmla_learn_bank *train,
                                     const qmla_learn_bank *held, const qmla_learn_opts *o,
                                     void **learner, qmla_error *err)
{
    *learner = NULL;
    {
        const int ds_ = device_enter(err);
        if (ds_)
            return ds_;
    }
    qmla_learner *l = NULL;
    /* with attn_f64 the device computes the attention in double
     * (learn_content64); the CPU learner keeps its backward to the
     * parameters in double and never allocates its own double attention */
    const int f64 = o->attn_f64 && path == QMLA_LEARN_CONTENT && !o->recon;
    int st = qmla_learner_alloc(path, d, wt, gamma, pairing, train, held, o, &l, err);
    if (st)
        return st;
    if (path != QMLA_LEARN_CONTENT || o->recon || o->attn_reference) {
        *learner = l;
        return QMLA_OK;
    }
    const size_t H = d->H, dc = d->d_c, dn = d->d_n, dr = d->d_r, dv = d->d_v, D = d->D;
    const size_t HN = H * dn, HV = H * dv;
    cuda_learn_ctx *c = (cuda_learn_ctx *)calloc(1, sizeof *c);
    if (!c) {
        qmla_learner_free(l);
        return qmla_error_set(err, QMLA_ENOMEM, "cuda engine: out of memory");
    }
    c->d = *d;
    c->f64 = f64;
    CU(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "stream");
    CB(cublasCreate(&c->blas), "cublasCreate");
    CB(cublasSetStream(c->blas, c->stream), "cublasSetStream");
    CB(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    CU(cudaMalloc((void **)&c->wuk, HN * dc * sizeof(float)), "w_uk");
    CU(cudaMalloc((void **)&c->wuv, HV * dc * sizeof(float)), "w_uv");
    CU(cudaMalloc((void **)&c->wo, D * HV * sizeof(float)), "w_o");
    CU(cudaMemcpy(c->wuk, wt->w_uk, HN * dc * sizeof(float), cudaMemcpyHostToDevice), "copy w_uk");
    CU(cudaMemcpy(c->wuv, wt->w_uv, HV * dc * sizeof(float), cudaMemcpyHostToDevice), "copy w_uv");
    CU(cudaMemcpy(c->wo, wt->w_o, D * HV * sizeof(float), cudaMemcpyHostToDevice), "copy w_o");
    if (f64) {
        CU(cudaMalloc((void **)&c->wuk64, HN * dc * sizeof(double)), "w_uk (double)");
        CU(cudaMalloc((void **)&c->wuv64, HV * dc * sizeof(double)), "w_uv (double)");
        CU(cudaMalloc((void **)&c->wo64, D * HV * sizeof(double)), "w_o (double)");
        to_double_kernel<<<NORM_BLOCKS, SM_THREADS>>>(c->wuk, c->wuk64, HN * dc);
        to_double_kernel<<<NORM_BLOCKS, SM_THREADS>>>(c->wuv, c->wuv64, HV * dc);
        to_double_kernel<<<NORM_BLOCKS, SM_THREADS>>>(c->wo, c->wo64, D * HV);
        CU(cudaGetLastError(), "widen the weights");
        CU(cudaDeviceSynchronize(), "widen the weights");
    }
    for (int b = 0; b < 2; b++) {
        const size_t n = qmla_learner_n_seq(l, b);
        c->nseq[b] = n;
        if (!(c->seq[b] = (cuda_learn_seq *)calloc(n ? n : 1, sizeof(cuda_learn_seq)))) {
            st = qmla_error_set(err, QMLA_ENOMEM, "cuda engine: out of memory");
            goto out;
        }
        for (size_t k = 0; k < n; k++) {
            cuda_learn_seq *q = &c->seq[b][k];
            const float *qn, *qr, *K, *Y;
            size_t T;
            qmla_learner_seq(l, b, k, &T, &qn, &qr, &K, &Y, &q->yden);
            q->T = T;
            if (T > c->Tmax)
                c->Tmax = T;
            if (f64)
                continue; /* widened below, once Tmax sizes the scratch */
            CU(cudaMalloc((void **)&q->qn, H * T * dn * sizeof(float)), "q_nope");
            CU(cudaMalloc((void **)&q->qr, H * T * dr * sizeof(float)), "q_rope");
            CU(cudaMalloc((void **)&q->K, T * dr * sizeof(float)), "k_rope");
            CU(cudaMalloc((void **)&q->Y, T * D * sizeof(float)), "clean output");
            CU(cudaMemcpy(q->qn, qn, H * T * dn * sizeof(float), cudaMemcpyHostToDevice),
               "copy q_nope");
            CU(cudaMemcpy(q->qr, qr, H * T * dr * sizeof(float), cudaMemcpyHostToDevice),
               "copy q_rope");
            CU(cudaMemcpy(q->K, K, T * dr * sizeof(float), cudaMemcpyHostToDevice), "copy k_rope");
            CU(cudaMemcpy(q->Y, Y, T * D * sizeof(float), cudaMemcpyHostToDevice),
               "copy clean output");
        }
    }
    if (f64) {
        /* double inputs per sequence, through one float staging buffer */
        const size_t T = c->Tmax;
        size_t nmax = H * T * (dn > dr ? dn : dr);
        nmax = nmax > T * D ? nmax : T * D;
        float *tmp = NULL;
        CU(cudaMalloc((void **)&tmp, nmax * sizeof(float)), "staging");
        for (int b = 0; b < 2 && !st; b++)
            for (size_t k = 0; k < c->nseq[b] && !st; k++) {
                cuda_learn_seq *q = &c->seq[b][k];
                const float *qn, *qr, *K, *Y;
                size_t Tq;
                double yd;
                qmla_learner_seq(l, b, k, &Tq, &qn, &qr, &K, &Y, &yd);
                st = upload_f64(qn, H * Tq * dn, tmp, &q->qn64, "q_nope (double)", err);
                if (!st)
                    st = upload_f64(qr, H * Tq * dr, tmp, &q->qr64, "q_rope (double)", err);
                if (!st)
                    st = upload_f64(K, Tq * dr, tmp, &q->K64, "k_rope (double)", err);
                if (!st)
                    st = upload_f64(Y, Tq * D, tmp, &q->Y64, "clean output (double)", err);
            }
        cudaFree(tmp);
        if (st)
            goto out;
        CU(cudaMalloc((void **)&c->Ct, T * dc * sizeof(float)), "effective c_kv");
        CU(cudaMalloc((void **)&c->Ct64, T * dc * sizeof(double)), "effective c_kv (double)");
        CU(cudaMalloc((void **)&c->Kc64, T * HN * sizeof(double)), "keys (double)");
        CU(cudaMalloc((void **)&c->Vc64, T * HV * sizeof(double)), "values (double)");
        CU(cudaMalloc((void **)&c->Z64, H * T * T * sizeof(double)), "attention (double)");
        CU(cudaMalloc((void **)&c->GA64, H * T * T * sizeof(double)),
           "attention gradient (double)");
        CU(cudaMalloc((void **)&c->O64, T * HV * sizeof(double)), "head outputs (double)");
        CU(cudaMalloc((void **)&c->Yt64, T * D * sizeof(double)), "output (double)");
        CU(cudaMalloc((void **)&c->GY64, T * D * sizeof(double)), "output gradient (double)");
        CU(cudaMalloc((void **)&c->GO64, T * HV * sizeof(double)),
           "head-output gradient (double)");
        CU(cudaMalloc((void **)&c->GK64, T * HN * sizeof(double)), "key gradient (double)");
        CU(cudaMalloc((void **)&c->GV64, T * HV * sizeof(double)), "value gradient (double)");
        CU(cudaMalloc((void **)&c->GC64, T * dc * sizeof(double)), "cache gradient (double)");
        CU(cudaMalloc((void **)&c->part, NORM_BLOCKS * sizeof(double)), "objective sums");
        CU(cudaMallocHost((void **)&c->hpart, NORM_BLOCKS * sizeof(double)), "objective sums");
    } else {
        const size_t T = c->Tmax;
        CU(cudaMalloc((void **)&c->Ct, T * dc * sizeof(float)), "effective c_kv");
        CU(cudaMalloc((void **)&c->Kc, T * HN * sizeof(float)), "keys");
        CU(cudaMalloc((void **)&c->Vc, T * HV * sizeof(float)), "values");
        CU(cudaMalloc((void **)&c->Z, H * T * T * sizeof(float)), "attention");
        CU(cudaMalloc((void **)&c->GA, H * T * T * sizeof(float)), "attention gradient");
        CU(cudaMalloc((void **)&c->O, T * HV * sizeof(float)), "head outputs");
        CU(cudaMalloc((void **)&c->Yt, T * D * sizeof(float)), "output");
        CU(cudaMalloc((void **)&c->GY, T * D * sizeof(float)), "output gradient");
        CU(cudaMalloc((void **)&c->GO, T * HV * sizeof(float)), "head-output gradient");
        CU(cudaMalloc((void **)&c->GK, T * HN * sizeof(float)), "key gradient");
        CU(cudaMalloc((void **)&c->GV, T * HV * sizeof(float)), "value gradient");
        CU(cudaMalloc((void **)&c->GC, T * dc * sizeof(float)), "cache gradient");
        CU(cudaMalloc((void **)&c->part, NORM_BLOCKS * sizeof(double)), "objective sums");
        CU(cudaMallocHost((void **)&c->hpart, NORM_BLOCKS * sizeof(double)), "objective sums");
    }
out:
    if (st) {
        learn_ctx_free(c);
        qmla_learner_free(l);
        return st;
    }
    {
        const qmla_learn_attn a = {c, f64 ? NULL : learn_content, learn_ctx_free,
                                   f64 ? learn_content64 : NULL};
        qmla_learner_set_attn(l, &a);
    }
    *learner = l;
    return QMLA_OK;
}
