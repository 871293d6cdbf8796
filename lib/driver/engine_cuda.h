/* driver/engine_cuda.h — private to the library: the operations tables of
 * the CUDA engine (kernels/engine_cuda.cu, built with -Dcuda), which
 * lib/driver/engines.c puts in the engine record "cuda" next to the CPU
 * tables it reuses for the operations the GPU does not run yet
 * (docs/cuda-engine.md says which run where). */
#ifndef QMLA_DRIVER_ENGINE_CUDA_H
#define QMLA_DRIVER_ENGINE_CUDA_H

#include <stddef.h>

#include "qmla/intervene.h"
#include "qmla/learn.h"
#include "qmla/predict.h"
#include "qmla/quant.h"
#include "qmla/sweep.h"
#include "qmla/tfeval.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One sequence of the sweep on the GPU: the clean pass, both perturbed
 * passes and the four route outputs, tiled over query tokens, with the
 * sums of squares in double (docs/cuda-engine.md). */
extern const qmla_sweep_ops qmla_cuda_sweep_ops;
/* The points of one sequence of `qmla jvp` / `qmla predict` on the GPU:
 * the sweep's responses, the local gains (exact JVPs, tiled over query
 * tokens) and the exact token sensitivities (the pairwise Gram route of
 * lib/operator/jvp.c in chunks of query rows); the layer object holds
 * W_O^T W_O and the head Grams on the device. */
extern const qmla_op_ops qmla_cuda_op_ops;
/* One item of `qmla intervene` on the GPU: the random controls drawn on the
 * host exactly as the CPU draws them, every JVP and the joint-path forward
 * on the device. */
extern const qmla_iv_ops qmla_cuda_iv_ops;
/* QDQ on the GPU through the project's kernel (kernels/qdq_cuda.h), host
 * arrays in and out; bit for bit the CPU's qmla_quant_qdq. */
extern const qmla_quant_ops qmla_cuda_quant_ops;

/* qmla_tf_eval_cell on the GPU: per sequence the clean and the three
 * quantized attention passes, the positional scores and the Gram of C on
 * the device; per layer the head norms' Grams (DGEMM); the effective
 * caches and the eigenvalues the CPU's code (docs/cuda-engine.md). */
int qmla_cuda_tf_eval_cell(const qmla_exec *ex, qmla_capture *cap, size_t li, size_t ci,
                           const qmla_transform *t, const float *gamma,
                           const qmla_tf_eval_opts *o, qmla_tf_eval_row *row, qmla_error *err);
/* The learner of the cuda engine: the CPU learner (qmla_learner_alloc)
 * whose content objective runs its attention forward and backward on the
 * GPU; the rest of the learn table is the CPU's (a qmla_learner). */
int qmla_cuda_learn_alloc(qmla_learn_path path, const qmla_mla_dims *d,
                          const qmla_mla_weights *w, const float *gamma,
                          qmla_rope_pairing pairing, const qmla_learn_bank *train,
                          const qmla_learn_bank *held, const qmla_learn_opts *o,
                          void **learner, qmla_error *err);

/* "NAME (sm_XY, N GiB), device I of N (RULE)" of the engine's device when
 * it is usable by this build (present, in range, and it runs this build's
 * kernels), else NULL. The device: qmla_cuda_engine_select's, else
 * QMLA_CUDA_DEVICE, else the node-local rank (OMPI_COMM_WORLD_LOCAL_RANK,
 * MV2_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, PALS_LOCAL_RANKID,
 * SLURM_LOCALID) mod the device count, else 0; RULE names which
 * (kernels/engine_cuda.cu, docs/cuda-engine.md "Several GPUs"). Probed once
 * per process (again after qmla_cuda_engine_select). */
const char *qmla_cuda_engine_device(void);

/* The same without making a context (since run 11): the device chosen by
 * the rules, present and in range, with its properties read; whether it
 * runs this build's kernels is checked by qmla_cuda_engine_device (and so
 * at every entry point), on that device only. qmla_engine_find("cuda")
 * uses this, so `--engine cuda --device N` makes no context on device 0. */
const char *qmla_cuda_engine_device_light(void);

/* 1 when the device is unusable because a device asked for explicitly
 * (qmla_cuda_engine_select, QMLA_CUDA_DEVICE) is malformed or out of range;
 * --engine auto then refuses instead of choosing the CPU. */
int qmla_cuda_engine_unusable_explicit(void);

/* Test hook: 1 when CUDA device `device` has an active primary context in
 * this process, 0 when not, -1 when it cannot be told (the driver's
 * cuDevicePrimaryCtxGetState through cudaGetDriverEntryPointByVersion). */
int qmla_cuda_engine_context_active(int device);

/* Test hook: the eval bound's head norms ||W_O,h W_UV,h||_2 of the cuda
 * engine (what qmla eval uses), H values into pn; non-finite weights or
 * eigenvalues are QMLA_ENONFINITE naming the head and the quantity. */
int qmla_cuda_engine_head_norms(const qmla_mla_dims *d, const qmla_mla_weights *w, int threads,
                                double *pn, qmla_error *err);

/* Eval's ||C||_2 eigensolver (cusolverDnDsyevd): 0 (the default since run
 * 10) on its own stream, queued ahead of the sequence's attention passes;
 * 1 on the passes' stream after them (run 8's order, with everything else
 * today's). The first call reads QMLA_CUDA_EVAL_SOLVER_AFTER (unset: 0);
 * set returns the value before. For the benchmark's before/after rows. */
int qmla_cuda_engine_solver_after(void);
int qmla_cuda_engine_set_solver_after(int on);

/* The CUDA ordinal of that device, or -1 when none is usable. */
int qmla_cuda_engine_device_index(void);

/* Choose device `device` (>= 0; -1: back to the environment rules) for the
 * rest of the process; call before any work (workspaces allocated earlier
 * stay on the device they were made on). Probed at the next use. */
void qmla_cuda_engine_select(int device);

/* Why qmla_cuda_engine_device is NULL ("no CUDA device: ...", the runtime's
 * message), or "" when it is not. */
const char *qmla_cuda_engine_unusable(void);

/* The GEMM precision (run 12): QMLA_CUDA_ENGINE_GEMM=fp32 (unset: the
 * default, cublasSgemm) or 3xtf32 (each float32 operand split into a TF32
 * high part and its float32 remainder, hi*hi + hi*lo + lo*hi by TF32
 * tensor-core GEMMs accumulating in float32). gemm_name: "fp32", "3xtf32",
 * or NULL when the variable is malformed (gemm_error then gives the
 * message; device_enter refuses every engine call with it). set_gemm
 * returns the mode before (0 fp32, 1 3xtf32, 2 malformed) or -1 for an
 * unknown name. switch_error: the same for QMLA_CUDA_ENGINE_TILE and
 * QMLA_CUDA_EVAL_SOLVER_AFTER. switches: "" with the defaults, else the
 * non-default switches ("; GEMMs 3xtf32", "; query tile <= N", "; eval
 * solver after the passes"), appended to qmla_cuda_engine_device and so to
 * the results' engine_device. */
const char *qmla_cuda_engine_gemm_name(void);
const char *qmla_cuda_engine_gemm_error(void);
int qmla_cuda_engine_set_gemm(const char *name);
const char *qmla_cuda_engine_switch_error(void);
const char *qmla_cuda_engine_switches(void);
/* The engine's mode (qmla_engine_mode): switches without the leading "; ".
 * Every string these functions and qmla_cuda_engine_device return is
 * interned (review12): immutable, valid for the process, safe to call from
 * any thread. */
const char *qmla_cuda_engine_mode(void);

/* Test hook: the largest query tile (tokens) of the sweep workspaces
 * allocated afterwards; 0 (the default) sizes tiles from device memory. */
void qmla_cuda_engine_set_tile(size_t tokens);

/* Benchmark hook: wall seconds spent so far in this process in the GPU's
 * exact sensitivities (part of qmla_cuda_op_ops' sequence; each call ends
 * synchronised with the device). */
double qmla_cuda_engine_sens_seconds(void);

/* The engine's phase profile (QMLA_CUDA_ENGINE_PROFILE=1 in the
 * environment, or qmla_cuda_engine_profile_enable): wall seconds of the
 * host in each phase, summed over every table call of the process since
 * the last reset, and the GPU's stream time. The host phases are disjoint
 * intervals of the calling thread (what a call's wall time leaves over is
 * the launches of kernels and GEMMs and the host's small sums); the
 * library only stores them, the benchmark prints them. Off: nothing is
 * timed (no events, no clock reads). */
enum {
    QMLA_CUDA_PH_DIR,       /* host: error directions (QDQ, rescaling) */
    QMLA_CUDA_PH_CTRL,      /* host: intervention controls drawn (GSL) and their norms */
    QMLA_CUDA_PH_POINTS,    /* host: point weights w_t, ||E||^2, the partial sums */
    QMLA_CUDA_PH_EVAL_HOST, /* host: eval's cell outside the engine's calls (effective
                               caches, means, the bound, loading the layer and cell) */
    QMLA_CUDA_PH_EVAL_HEADS, /* host: eval's head norms' eigensolves (GSL) */
    QMLA_CUDA_PH_EVAL_SETUP, /* host: eval's cell workspace set up and freed (allocations,
                                cuBLAS and cuSOLVER handles) */
    QMLA_CUDA_PH_H2D,       /* host: inside host-to-device copy calls (a pageable
                               source blocks until it is staged) */
    QMLA_CUDA_PH_WAIT,      /* host: blocked on the stream (synchronisations) */
    QMLA_CUDA_PH_GPU,       /* GPU: stream time from the first work queued after a
                               synchronisation to the next synchronisation (events) */
    QMLA_CUDA_PH_SENS,      /* wall of the exact sensitivities (inside the others) */
    QMLA_CUDA_PH_N
};
/* The GPU time of predict's stages (run 13; events after each stage on the
 * stream, read at the waits predict has anyway, and in the exact
 * sensitivities every few chunks, an extra wait with the profile on):
 * seconds per stage in st[]. */
enum {
    QMLA_CUDA_ST_FINITE,     /* predict: a configuration's response-only sweep (with the
                                sequence's upload and clean pass in the first) */
    QMLA_CUDA_ST_JVP,        /* predict: its JVPs of both paths */
    QMLA_CUDA_ST_SENS_GRAM,  /* values Yc = C W_UV^T, key-token Grams yy_t */
    QMLA_CUDA_ST_SENS_ATTN,  /* a chunk's attention and head outputs */
    QMLA_CUDA_ST_SENS_OKXQ,  /* O K and xq (strided-batched GEMMs) */
    QMLA_CUDA_ST_SENS_X2,    /* X2 (pointer-batched GEMM of H^2 blocks) */
    QMLA_CUDA_ST_SENS_CONST, /* the per-row constants */
    QMLA_CUDA_ST_SENS_PAIR,  /* the pair terms without a GEMM, their head sum */
    QMLA_CUDA_ST_SENS_R,     /* the pair products R0, R1 (strided-batched GEMMs) */
    QMLA_CUDA_ST_SENS_RTERM, /* the pair GEMM terms, head and row sums */
    QMLA_CUDA_ST_N
};
typedef struct qmla_cuda_profile {
    int on;
    double s[QMLA_CUDA_PH_N];
    double st[QMLA_CUDA_ST_N]; /* GPU seconds of the stages above */
    unsigned long syncs, h2d_calls; /* synchronisations, host-to-device copies */
    double h2d_bytes;
} qmla_cuda_profile;
void qmla_cuda_engine_profile_enable(int on);
void qmla_cuda_engine_profile_get(qmla_cuda_profile *p);
void qmla_cuda_engine_profile_reset(void);
/* The phase's name ("host: error directions"). */
const char *qmla_cuda_engine_profile_name(int phase);
/* The stage's name ("sens: row constants"). */
const char *qmla_cuda_engine_stage_name(int stage);

/* QMLA_CUDA_ENGINE_R12=1 (or set_r12(1)): the run-12 forms of what run 13
 * changed (the query tiles' products over their whole key range, the
 * sensitivities' row constants and key Grams one thread per value), for
 * the benchmark's before rows and the test; results agree within rounding
 * (docs/cuda-engine.md, "H200 run 13"). set_r12 returns the setting before. */
int qmla_cuda_engine_r12(void);
int qmla_cuda_engine_set_r12(int on);

/* Which sequences the engine runs (benchmarks' before rows, tests):
 * 0 today's; 1 those of commit e498e58 (run 8: serial error directions
 * drawn again for every point and control, one synchronisation per JVP,
 * controls copied from pageable memory, no overlap of host and GPU);
 * 2 those of 2026-12-02 (f8d3d79: full five-route finite sweeps, weights
 * and inputs copied with every sweep, sensitivity chunks of 1024 / H
 * rows, ||C||_2 by GSL on the host). The first call reads
 * QMLA_CUDA_ENGINE_BEFORE (unset: 0); set returns the level before. The
 * chunk rows are fixed when a workspace is allocated. */
int qmla_cuda_engine_before(void);
int qmla_cuda_engine_set_before(int level);

#ifdef __cplusplus
}
#endif
#endif
