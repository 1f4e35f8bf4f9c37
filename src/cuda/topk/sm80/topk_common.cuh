// Device helpers shared by the top-k kernels (topk_radix_global.cuh, topk_sampled.cuh): the launch
// parameters, the order-preserving key, the fused slot transforms, and the block-wide search of a
// histogram for the bin that holds the need-th largest element.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "attnserve/ops/topk.h"
#include "cuda/common/ptx.cuh"

namespace attnserve::cuda::topk_detail {

constexpr int kBins = 4096;  // widest digit: 12 bits

struct TopkParams {
  const float* scores;
  int64_t score_row_stride;
  int64_t width;
  const int32_t* lengths;
  int64_t length_stride;
  const int32_t* row_starts;  // nullable
  int64_t start_stride;
  int32_t* out;
  int64_t out_row_stride, out_col_stride;
  int64_t rows;
  int k;
  int transform;         // TopkTransform
  const int32_t* table;  // page_table_1 (decode: [rows, W]; prefill: [b, W])
  int64_t table_row_stride, table_col_stride, table_width;
  const int32_t* cu_seqlens_q;  // prefill: [b + 1]
  int64_t cu_stride;
  int64_t num_requests;
  const int32_t* offsets;  // ragged: [rows]
  int64_t offset_stride;
  int direct_emit;   // benchmarks only: the sampled kernel stores its outputs directly (no shared-memory staging)
  int debug_stop;    // benchmarks only: the sampled kernel returns after phase n (1..5); 0 runs it whole
  int l2_prefetch;   // the sampled kernel's long rows prefetch their filter's steps into L2 (Plan::l2_prefetch)
  int lean_emit;     // the kept-masks emit's lean stores where they apply (Emit::kept_masks_lean)
  int lean_select;   // the sampled kernel's key-digit histograms without a branch per entry (Plan::lean_select)
  int offset_digit;  // the sampled regime's candidates: first digit relative to the threshold (Plan::offset_digit)
  int fused_count;   // the streaming kernel counts the offset digit's histogram in its filter (Plan::fused_count)
};

// Monotone float -> uint32 (src/cpu/topk_select.h topk_key): larger float => larger key, -0 == +0,
// NaN -> 0 (below -inf, whose key is 0x007fffff).
__device__ __forceinline__ uint32_t topk_key(float f) {
  uint32_t u = __float_as_uint(f);
  const uint32_t mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) return 0u;  // NaN
  if (mag == 0u) u = 0u;             // -0 -> +0
  const uint32_t flip = uint32_t(int32_t(u) >> 31) | 0x80000000u;
  return u ^ flip;
}

// The request of a prefill row: the last r in [0, b) with cu_seqlens_q[r] <= row (skips empty requests).
__device__ inline int64_t request_of_row(const TopkParams& p, int64_t row) {
  int64_t lo = 0, hi = p.num_requests;  // answer in [lo, hi)
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (int64_t(p.cu_seqlens_q[mid * p.cu_stride]) <= row) lo = mid;
    else hi = mid;
  }
  return lo;
}

// Position j (relative to the row start) -> the value written out. `request` is used by prefill only.
__device__ __forceinline__ int32_t value_of(const TopkParams& p, int64_t row, int64_t request, int64_t j) {
  switch (p.transform) {
    case int(TopkTransform::decode):
      return j < p.table_width ? p.table[row * p.table_row_stride + j * p.table_col_stride] : -1;
    case int(TopkTransform::prefill):
      return j < p.table_width ? p.table[request * p.table_row_stride + j * p.table_col_stride] : -1;
    case int(TopkTransform::ragged): return int32_t(j + int64_t(p.offsets[row * p.offset_stride]));
    default: return int32_t(j);
  }
}

// The row's bounds (start clamped to [0, width], len to [0, width - start]: lengths live in device memory).
struct RowView {
  const float* s;  // [len]
  int64_t len;
  int32_t* out;  // [k] (stride out_col_stride)
  int64_t request;
};
__device__ inline RowView row_view(const TopkParams& p, int64_t row) {
  int64_t start = p.row_starts ? int64_t(p.row_starts[row * p.start_stride]) : 0;
  start = start < 0 ? 0 : (start > p.width ? p.width : start);
  int64_t len = p.lengths[row * p.length_stride];
  len = len < 0 ? 0 : (len > p.width - start ? p.width - start : len);
  RowView v;
  v.s = p.scores + row * p.score_row_stride + start;
  v.len = len;
  v.out = p.out + row * p.out_row_stride;
  v.request = p.transform == int(TopkTransform::prefill) ? request_of_row(p, row) : 0;
  return v;
}

// len <= k: everything, in order, then -1 padding.
template <int kThreads>
__device__ inline void emit_identity(const TopkParams& p, int64_t row, const RowView& v) {
  for (int c = threadIdx.x; c < p.k; c += kThreads)
    v.out[c * p.out_col_stride] = c < v.len ? value_of(p, row, v.request, c) : -1;
}

struct BinPick {
  uint32_t digit, above, count;  // the bin, the count in bins above it, the count in it
};

// Block-wide, every thread calls it after a barrier that completed `hist`: the largest d with
// count(bins >= d) >= need (need >= 1 and <= the total). Thread t owns bins [t * kBins / kThreads, ...);
// a suffix sum over threads finds the owner. hist: 16-byte aligned; s_warp: [kThreads / 32] scratch;
// s_pick: the result.
// Returns after a barrier, with the result read by every thread.
// kClear (the streaming kernel's selects, 4 bins per thread): the owner's scan uses the bins it read, and every thread
// zeroes its own bins after the first barrier, when nobody reads them any more: the histogram is clear after the
// second barrier, so the next pass counts into it with no clearing pass and no barrier of its own.
template <int kThreads, bool kClear = false>
__device__ inline BinPick find_bin(uint32_t* hist, uint32_t need, uint32_t* s_warp, BinPick* s_pick) {
  constexpr int kWarps = kThreads / 32;
  constexpr int kPer = kBins / kThreads;
  static_assert(kBins % kThreads == 0, "bins per thread");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  static_assert(kPer % 4 == 0, "bins are read as uint4");
  // 16-byte reads, the i-th of a thread rotated by tid / 2: lanes 64 bytes apart (kPer 16) would
  // otherwise meet in two bank groups (the scalar loop was a 16-way conflict). hist is 16-byte aligned.
  const uint4* h4 = reinterpret_cast<const uint4*>(hist + tid * kPer);
  uint32_t mine = 0;
  uint4 last{};  // kClear: the thread's bins (kPer 4: one uint4)
#pragma unroll
  for (int i = 0; i < kPer / 4; ++i) {
    const uint4 x = h4[(i + (tid >> 1)) & (kPer / 4 - 1)];
    mine += x.x + x.y + x.z + x.w;
    last = x;
  }
  uint32_t incl = mine;  // sum over lanes >= lane of this warp
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t y = __shfl_down_sync(ptx::kFullMask, incl, o);
    if (lane + o < 32) incl += y;
  }
  if (lane == 0) s_warp[warp] = incl;
  __syncthreads();
  static_assert(kWarps <= 32, "one lane per warp");
  // bins owned by higher threads: this warp's higher lanes, then the higher warps (one lane each)
  uint32_t above = incl - mine + __reduce_add_sync(ptx::kFullMask, lane > warp && lane < kWarps ? s_warp[lane] : 0u);
  if constexpr (kClear) {
    static_assert(kPer == 4, "one uint4 of bins per thread");
    if (above < need && above + mine >= need) {  // exactly one thread
      const uint32_t c[4] = {last.x, last.y, last.z, last.w};
#pragma unroll
      for (int i = kPer - 1; i >= 0; --i) {
        if (above + c[i] >= need) {
          *s_pick = BinPick{uint32_t(tid * kPer + i), above, c[i]};
          break;
        }
        above += c[i];
      }
    }
    reinterpret_cast<uint4*>(hist)[tid] = make_uint4(0u, 0u, 0u, 0u);  // = hist + tid * kPer
    __syncthreads();
    return *s_pick;
  }
  if (above < need && above + mine >= need) {  // exactly one thread
    for (int i = kPer - 1; i >= 0; --i) {
      const uint32_t c = hist[tid * kPer + i];
      if (above + c >= need) {
        *s_pick = BinPick{uint32_t(tid * kPer + i), above, c};
        break;
      }
      above += c;
    }
  }
  __syncthreads();
  return *s_pick;
}

}  // namespace attnserve::cuda::topk_detail
