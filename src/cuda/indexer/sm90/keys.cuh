// Device helpers both Hopper indexer kernels share: the swizzle-aligned shared-memory base, the NaN-keeping
// relu, a row's key window and where a key column lives (ragged buffer or page table).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/indexer/params.cuh"
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

// Key window [lo, hi) of row t of the group (t < rows of the shape), clamped to the logits width.
template <bool kPaged, int kRows>
__device__ __forceinline__ void row_window(const Params& p, int64_t group, int t, int64_t& lo, int64_t& hi) {
  if constexpr (kPaged) {
    const int64_t limit = min(p.num_cols, p.max_pages * p.page_size);
    const int64_t visible = int64_t(p.seqlens[group * p.seqlens_stride]) - kRows + t + 1;
    lo = 0;
    hi = visible < 0 ? 0 : (visible > limit ? limit : visible);
  } else {
    const int64_t row = group * kRows + t;
    if (row >= p.rows) {
      lo = hi = 0;
      return;
    }
    int64_t a = p.ks[row * p.ks_stride], b = p.ke[row * p.ke_stride];
    a = a < 0 ? 0 : (a > p.num_cols ? p.num_cols : a);
    b = b < a ? a : (b > p.num_cols ? p.num_cols : b);
    lo = a, hi = b;
  }
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
