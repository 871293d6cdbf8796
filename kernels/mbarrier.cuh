/* kernels/mbarrier.cuh — shared-memory mbarriers (sm_90) for producer /
 * consumer hand-offs: init by one thread, made visible to the block by a
 * barrier (__syncthreads) before use; arrive with release and wait
 * (try_wait.parity loop) with acquire semantics at CTA scope, the pattern of
 * CUTLASS's PipelineAsync. Used by decode.cu's warp-specialised kernel and
 * by bench/probe_handoff.cu. */
#ifndef QMLA_MBARRIER_CUH
#define QMLA_MBARRIER_CUH

#include <stdint.h>

__device__ static inline uint32_t mbar_addr(const uint64_t *b)
{
    return (uint32_t)__cvta_generic_to_shared(b);
}
__device__ static inline void mbar_init(uint64_t *b, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mbar_addr(b)), "r"(count)
                 : "memory");
}
__device__ static inline void mbar_arrive(uint64_t *b)
{
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(mbar_addr(b))
                 : "memory");
}
/* Wait until the phase of parity `parity` has completed. */
__device__ static inline void mbar_wait(uint64_t *b, uint32_t parity)
{
    asm volatile("{\n .reg .pred done;\n"
                 "WAIT: mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
                 " @!done bra WAIT;\n}\n" ::"r"(mbar_addr(b)),
                 "r"(parity)
                 : "memory");
}

#endif
