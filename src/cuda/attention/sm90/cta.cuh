// Hopper paged attention: the CTA prologue pieces that the bf16 kernels (kernel.cuh) and the FP8
// kernel (fp8_kernel.cuh) share. Device code for sm_90a only.
#pragma once
#include <cstdint>

#include "cuda/common/sm90/wgmma.cuh"  // ATTNSERVE_SM90_DEVICE

namespace attnserve::cuda::attn90 {

#if defined(ATTNSERVE_SM90_DEVICE)
// Dynamic shared memory rounded up to the 1024-byte swizzle atom (descriptor base offset 0); the
// launchers add config.h's kAlignSlack to the size.
__device__ __forceinline__ char* smem_base() {
  extern __shared__ char smem_raw[];
  return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
}

// This thread's warpgroup (threadIdx.x / 128) as a value the compiler knows is warp-uniform (a
// shuffle from lane 0, CUTLASS's trick): it then keeps per-warpgroup descriptors in uniform registers
// instead of moving them there before every wgmma.
__device__ __forceinline__ int warpgroup_index() { return __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0); }
#endif

}  // namespace attnserve::cuda::attn90
