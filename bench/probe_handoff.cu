/* bench/probe_handoff.cu — does compute-sanitizer racecheck see the order of
 * a producer / consumer hand-off through shared memory? (issue 19: the
 * racecheck report on decode_ws_kernel's bar.arrive hand-off). Not a test of
 * the library: a diagnostic, run under racecheck by
 * scripts/device-decode-hopper.sh (step probe).
 *
 * One block of 128 threads: warps 2-3 produce, warps 0-1 consume, through
 * two shared tiles of 256 floats. Producer thread p writes elements
 * p, p + 64, .. of page i into tile[i & 1]; every consumer thread reads all
 * 256 elements of the page (so every read depends on stores of other
 * warps) and adds them up; 64 pages. Modes (argv[1]):
 *   0  bar.arrive FULL[buf] by the producers / bar.sync FULL[buf] by the
 *      consumers, EMPTY[buf] the other way (decode_ws_kernel before the fix)
 *   1  bar.sync of all 128 threads once per page on both sides (the fix)
 *   2  mbarrier full / empty pair per tile: mbarrier.arrive (release) and
 *      mbarrier.try_wait.parity (acquire), as CUTLASS's PipelineAsync
 *   3  planted race, a positive control: mode 1's barriers, but the
 *      consumers read the other tile, the one the producers are writing
 *      meanwhile (racecheck must report it; the sums are wrong by design)
 *   4  mode 1 plus a named barrier of the consumers alone (bar.sync 3, 64)
 *      after each page's reads, as decode_ws_kernel's consumers have
 *   5  mode 2 plus that consumers-only named barrier
 * Prints the mode and whether every consumer's sum is the closed form
 * sum over pages i and elements e of (1000 i + e); exit 0 when right
 * (mode 3: when it ran to the end). */
#include "../kernels/mbarrier.cuh"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define NP 64
#define TE 256

__device__ static inline void bsync(int id, int n)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ static inline void barrive(int id, int n)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__global__ void __launch_bounds__(128) probe(int mode, double *out)
{
    __shared__ float tile[2][TE];
    __shared__ uint64_t full[2], empty[2];
    const int tid = threadIdx.x;
    if (tid == 0) {
        for (int k = 0; k < 2; k++) {
            mbar_init(&full[k], 64);
            mbar_init(&empty[k], 64);
        }
    }
    __syncthreads();
    if (tid >= 64) { /* producers */
        const int p = tid - 64;
        for (int i = 0; i < NP; i++) {
            const int buf = i & 1;
            if (i >= 2) {
                if (mode == 0)
                    bsync(4 + buf, 128); /* EMPTY: page i - 2 read */
                else if (mode == 2 || mode == 5)
                    mbar_wait(&empty[buf], (uint32_t)((i / 2 - 1) & 1));
            }
            for (int e = p; e < TE; e += 64)
                tile[buf][e] = (float)(1000 * i + e);
            if (mode == 0)
                barrive(2 + buf, 128); /* FULL */
            else if (mode == 1 || mode == 3 || mode == 4)
                bsync(1, 128);
            else
                mbar_arrive(&full[buf]);
        }
        return;
    }
    double sum = 0.0; /* consumers */
    for (int i = 0; i < NP; i++) {
        const int buf = i & 1;
        if (mode == 0)
            bsync(2 + buf, 128);
        else if (mode == 1 || mode == 3 || mode == 4)
            bsync(1, 128);
        else
            mbar_wait(&full[buf], (uint32_t)((i / 2) & 1));
        const int rb = mode == 3 ? buf ^ 1 : buf; /* 3: the tile being written */
        float s = 0.0f;
        for (int e = 0; e < TE; e++)
            s += tile[rb][(e + tid) % TE];
        sum += s;
        if (mode >= 4)
            bsync(3, 64); /* consumers only */
        if (i + 2 < NP) {
            if (mode == 0)
                barrive(4 + buf, 128);
            else if (mode == 2 || mode == 5)
                mbar_arrive(&empty[buf]);
        }
    }
    out[tid] = sum;
}

int main(int argc, char **argv)
{
    const int mode = argc > 1 ? atoi(argv[1]) : 0;
    if (mode < 0 || mode > 5) {
        fprintf(stderr, "usage: probe_handoff [0-5]\n");
        return 2;
    }
    double *d, h[64];
    if (cudaMalloc(&d, 64 * sizeof(double)) != cudaSuccess)
        return 1;
    probe<<<1, 128>>>(mode, d);
    if (cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) {
        fprintf(stderr, "probe_handoff: %s\n", cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    /* each page's 256 values are small integers, exact in float: per page
     * 256000 i + 32640, summed over 64 pages */
    const double want = 256000.0 * (NP * (NP - 1) / 2) + 32640.0 * NP;
    int bad = 0;
    for (int t = 0; t < 64; t++)
        bad += h[t] != want;
    printf("probe_handoff mode %d: %s (%d of 64 consumer sums wrong%s)\n", mode,
           bad ? "WRONG" : "right", bad, mode == 3 ? ", by design" : "");
    cudaFree(d);
    return bad && mode != 3 ? 3 : 0;
}
