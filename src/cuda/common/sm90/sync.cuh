// Hopper CTA synchronization for warp-specialized kernels (sm_90a): shared-memory mbarriers
// (init, arrive, cp.async / TMA arrivals, parity wait), named barriers, and setmaxnreg (move registers from a producer
// warpgroup to the consumers; effective only with __launch_bounds__(threads, 1) and roles as one if/else).
#pragma once
#include <cstdint>

namespace attnserve::cuda::sm90 {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Arrive (release semantics at CTA scope: this thread's earlier writes happen before the phase flip).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Arrives on `bar` once all of this thread's earlier cp.async copies have landed (asynchronously;
// .noinc: the arrival counts against the barrier's expected count, as mbar_arrive does).
__device__ __forceinline__ void cp_async_mbar_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// As cp_async_mbar_arrive, but the barrier's pending count is raised by one first, so the arrival does not
// count against the expected count: the phase also needs its expected arrivals (e.g. one thread's
// mbar_arrive after every such arrival was issued).
__device__ __forceinline__ void cp_async_mbar_arrive_inc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Arrive and expect `bytes` more of asynchronous copies (TMA complete_tx) in the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// Expect `bytes` more of asynchronous copies in the current phase, without arriving (the thread's arrival
// comes separately, e.g. by cp_async_mbar_arrive after its own copies).
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// True once the phase of parity `parity` has completed (acquire semantics).
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, int parity) {
  uint32_t done;
  asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(done)
               : "r"(bar), "r"(parity)
               : "memory");
  return done != 0;
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}
// As mbar_try_wait, with a suspend-time hint: a thread whose phase is not complete may sleep up to `ns`
// nanoseconds (it wakes when the phase completes), so a long wait retries far less often than the default
// limit lets it (fewer issue slots spent spinning).
__device__ __forceinline__ bool mbar_try_wait_hint(uint32_t bar, int parity, uint32_t ns) {
  uint32_t done;
  asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(done)
               : "r"(bar), "r"(parity), "r"(ns)
               : "memory");
  return done != 0;
}
__device__ __forceinline__ void mbar_wait_sleep(uint32_t bar, int parity, uint32_t ns = 0x989680) {
  while (!mbar_try_wait_hint(bar, parity, ns)) {
  }
}
// Named CTA barriers (id 1..15; 0 is __syncthreads): sync waits until `threads` threads have
// arrived or synced on it; arrive counts this thread and does not wait.
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
#endif

}  // namespace attnserve::cuda::sm90
