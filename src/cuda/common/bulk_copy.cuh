// Hopper (sm_90+) bulk copies global -> shared completing on a shared-memory mbarrier, and the
// mbarrier operations around them. One instruction moves a whole contiguous run (a token's K or V
// row), where cp.async needs one instruction per 16 bytes. Compiled to a trap below sm_90: callers
// pick these paths only on devices whose kernels were built for sm_90 (checked on the host).
#pragma once
#include <cstdint>

namespace attnserve::cuda::bulk {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define ATTNSERVE_BULK_COPY 1
#endif

// Initializes a barrier expecting `arrivals` arrivals per phase; then make it visible to the async proxy.
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
#ifdef ATTNSERVE_BULK_COPY
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void fence_barrier_init() {
#ifdef ATTNSERVE_BULK_COPY
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// Orders this thread's earlier generic-proxy shared-memory accesses before later async-proxy ones.
__device__ __forceinline__ void fence_proxy_async() {
#ifdef ATTNSERVE_BULK_COPY
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Arrives on the barrier, announcing `bytes` more bytes of bulk copies for the current phase.
__device__ __forceinline__ void arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#ifdef ATTNSERVE_BULK_COPY
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void arrive(uint32_t bar) {
#ifdef ATTNSERVE_BULK_COPY
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#else
  __trap();
#endif
}

// Copies `bytes` (a multiple of 16; both addresses 16-byte aligned) and completes them on `bar`.
__device__ __forceinline__ void copy_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
#ifdef ATTNSERVE_BULK_COPY
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#else
  __trap();
#endif
}

// Waits until the barrier's phase with parity `parity` has completed.
__device__ __forceinline__ void wait_parity(uint32_t bar, uint32_t parity) {
#ifdef ATTNSERVE_BULK_COPY
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#else
  __trap();
#endif
}

}  // namespace attnserve::cuda::bulk
