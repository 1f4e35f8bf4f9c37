// Device helpers both Hopper indexer kernels share: the swizzle-aligned shared-memory base, the NaN-keeping
// relu and where a key column lives (ragged buffer or page table); a row's key window is ../row_window.cuh's.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/indexer/params.cuh"
#include "cuda/indexer/row_window.cuh"
#include "cuda/indexer/sm90/config.h"

namespace attnserve::cuda::indexer90 {

using Params = indexer::Params;

// Shared memory rounded up to the 1024-byte swizzle atom (descriptor base offset 0).
__device__ __forceinline__ char* smem_base() {
  extern __shared__ char smem_raw[];
  return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
}

// relu that keeps NaN, as the CPU oracle's (x < 0 ? 0 : x): a NaN input shows in the output.
__device__ __forceinline__ float relu_keep_nan(float x) {
  float y;
  asm("max.NaN.f32 %0, %1, 0f00000000;\n" : "=f"(y) : "f"(x));
  return y;
}

// Shared-memory loads (and a store) by address (ld.shared: a generic pointer into the aligned base would compile to a
// generic LD through the L1 path).
__device__ __forceinline__ float lds_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint32_t lds_u8(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u8 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ void sts_u8(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u8 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

// Where key column `col` (inside the group's union window) lives: its 128 bytes and its scale; false when
// its page id is outside the pool.
template <bool kPaged>
__device__ __forceinline__ bool locate_key(const Params& p, int64_t group, int64_t col, const uint8_t*& key,
                                           const float*& scale) {
  if constexpr (kPaged) {
    const uint32_t page_idx = uint32_t(col) / uint32_t(p.page_size);
    const int64_t page = p.page_table[group * p.pt_row_stride + int64_t(page_idx) * p.pt_col_stride];
    if (page < 0 || page >= p.num_pages) return false;
    const int64_t in_page = col - int64_t(page_idx) * p.page_size;
    const uint8_t* base = p.pool + page * p.page_size * (kDim + 4);
    key = base + in_page * kDim;
    scale = reinterpret_cast<const float*>(base + p.page_size * kDim + in_page * 4);
  } else {
    key = p.k + col * p.k_row_stride;
    scale = p.k_scale + col * p.k_scale_stride;
  }
  return true;
}

}  // namespace attnserve::cuda::indexer90
