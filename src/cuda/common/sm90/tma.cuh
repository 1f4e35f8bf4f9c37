// Hopper TMA (the bulk tensor copy engine, sm_90a): one 2-D box of a tensor map into shared memory,
// completing its bytes on an mbarrier (mbar_arrive_expect_tx in sync.cuh announces them). The tensor
// map itself is encoded on the host (cuTensorMapEncodeTiled) and passed as a __grid_constant__ kernel
// parameter, so `map` is its address in parameter space.
#pragma once
#include <cstdint>

namespace attnserve::cuda::sm90 {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Box at coordinates (col = innermost, row) of `map` to shared address dst (1024-aligned for a 128-byte
// swizzle); `bar` counts its bytes.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void* map, int col, int row, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(bar)
      : "memory");
}
#endif

}  // namespace attnserve::cuda::sm90
