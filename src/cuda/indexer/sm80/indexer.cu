// CUDA lightning-indexer scores (indexer.h), ragged (prefill) and paged (decode / verify / draft extend):
//   logit[i, j] = sum_h relu(q[i,h,:] . k[j,:]) * w[i,h] * k_scale[j],   -inf outside row i's window.
//
// Tensor cores, no shared memory: a warp owns 32 key columns (two m16 tiles: keys are the M side,
// heads the N side) and holds their fp8 keys as f16 A fragments in registers (e4m3 -> f16 is exact).
// The 128-dim contraction is permuted so that lane (g, t) needs bytes [32t, 32t + 32) of a key row for
// all 8 k-steps: key and query rows are read with two 16-byte loads per lane, fully coalesced. For
// each query row of the group (a request's next_n rows, or 4 consecutive ragged rows) and each block
// of 8 heads, the lane loads its head's q bytes the same way (B fragments), runs 8 mma.m16n8k16 with
// fresh accumulators (one per k-step: a 16-term sum of exact fp8 products is exact or nearly so) and
// adds them as a tree, so the dot is about as accurate as a float32 loop; relu * weight is
// accumulated over heads in registers and reduced over the quad at the end. Every logit column is
// written: a warp whose columns are outside every row's window only writes -inf.
//
// Floor: keys are read once per CTA group (132 B per key; paged decode b 128 x 32K: 553 MB), logits
// written once (4 B per (row, column)); FLOPs 2 * rows * heads * 128 * keys.
#include <cuda_runtime.h>

#include <cmath>

#include "attnserve/cache_formats.h"
#include "cuda/common/host_util.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/indexer/row_window.cuh"
#include "cuda/indexer/sm80/config.h"
#include "cuda/indexer/sm80/indexer_sm80.h"

namespace attnserve::cuda {
namespace {

using indexer::kColsPerCta;  // the CTA shape (config.h)
using indexer::kColsPerWarp;
using indexer::kDim;
using indexer::kRaggedGroupRows;
using indexer::kWarps;

using IndexerParams = indexer::Params;  // ../params.cuh

// The weight of head h for query row `row`, with q's scale folded in when it is given.
// A compile-time switch: a run-time test of q_scale in this inner loop cost the paged indexer 30% on the
// H200 (611 -> 805 us at b128 x 32K x 64 heads, session 2).
template <bool kQScale>
__device__ __forceinline__ float head_weight(const IndexerParams& p, int64_t row, int h) {
  const float w = p.w[row * p.w_row_stride + int64_t(h) * p.w_head_stride];
  if constexpr (kQScale) return w * p.q_scale[row * p.qs_row_stride + int64_t(h) * p.qs_head_stride];
  else return w;
}

// 32 bytes at p (4-byte aligned; 16-byte aligned when vec16).
__device__ __forceinline__ void load32(const uint8_t* p, bool vec16, uint32_t (&w)[8]) {
  if (vec16) {
    const uint4 x = __ldg(reinterpret_cast<const uint4*>(p));
    const uint4 y = __ldg(reinterpret_cast<const uint4*>(p) + 1);
    w[0] = x.x, w[1] = x.y, w[2] = x.z, w[3] = x.w, w[4] = y.x, w[5] = y.y, w[6] = y.z, w[7] = y.w;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = __ldg(reinterpret_cast<const uint32_t*>(p) + i);
  }
}

// Loads key column `col` (bytes [32 * tig, +32) of its 128) and its scale; ok = false (zeros) when the
// column is outside [lo, hi) or its page id is outside the pool.
template <bool kPaged>
__device__ __forceinline__ void load_key(const IndexerParams& p, int64_t group, int64_t col, int64_t lo, int64_t hi,
                                         int tig, uint32_t (&w)[8], float& scale, bool& ok) {
  ok = col >= lo && col < hi;
  scale = 0.f;
  const uint8_t* src = nullptr;
  if (ok) {
    if constexpr (kPaged) {
      const int64_t page = p.page_table[group * p.pt_row_stride + (col / p.page_size) * p.pt_col_stride];
      ok = page >= 0 && page < p.num_pages;
      if (ok) {
        const int64_t in_page = col % p.page_size;
        const uint8_t* page_base = p.pool + page * p.page_size * (kDim + 4);
        src = page_base + in_page * kDim + 32 * tig;
        scale = *reinterpret_cast<const float*>(page_base + p.page_size * kDim + in_page * 4);
      }
    } else {
      src = p.k + col * p.k_row_stride + 32 * tig;
      scale = p.k_scale[col * p.k_scale_stride];
    }
  }
  if (ok) {
    load32(src, p.key_vec16, w);
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) w[i] = 0u;
  }
}

// v[tig >> 1][tig & 1] through selects.
template <typename T>
__device__ __forceinline__ T pick(const T (&v)[2][2], int tig) {
  const T lo = (tig & 1) ? v[0][1] : v[0][0];
  const T hi = (tig & 1) ? v[1][1] : v[1][0];
  return (tig >> 1) ? hi : lo;
}

__device__ __forceinline__ float relu_keep_nan(float x) { return x < 0.f ? 0.f : x; }

template <bool kPaged, bool kQScale>
__global__ void __launch_bounds__(kWarps * 32) indexer_kernel(IndexerParams p) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, tig = lane & 3;
  const int64_t group = int64_t(blockIdx.x) / p.col_blocks;
  const int64_t col0 = (int64_t(blockIdx.x) % p.col_blocks) * kColsPerCta + warp * kColsPerWarp;
  if (col0 >= p.num_cols) return;
  const int rows_here =
      kPaged ? p.rows_per_group : int(min(int64_t(kRaggedGroupRows), p.rows - group * kRaggedGroupRows));
  const int64_t row0 = group * p.rows_per_group;

  // The union of the group's windows, to skip warps that see no key.
  int64_t umin = p.num_cols, umax = 0;
  for (int t = 0; t < rows_here; ++t) {
    int64_t lo, hi;
    indexer::row_window<kPaged>(p, group, kPaged ? p.rows_per_group : kRaggedGroupRows, t, lo, hi);
    if (lo < hi) umin = min(umin, lo), umax = max(umax, hi);
  }
  // This lane writes column col0 + 16 * (tig >> 1) + 8 * (tig & 1) + g after the quad reduction.
  const int64_t my_col = col0 + 16 * (tig >> 1) + 8 * (tig & 1) + g;
  const bool my_col_in = my_col < p.num_cols;
  const float neg_inf = -INFINITY;
  if (umin >= umax || col0 + kColsPerWarp <= umin || col0 >= umax) {
    for (int t = 0; t < rows_here; ++t)
      if (my_col_in) p.logits[(row0 + t) * p.logit_row_stride + my_col * p.logit_col_stride] = neg_inf;
    return;
  }

  // Key fragments: a[mt][ks][0..3] for keys col0 + 16 mt + g (+8).
  uint32_t a[2][8][4];
  float key_scale[2][2];  // [mt][half]
  bool key_ok[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      uint32_t w[8];
      load_key<kPaged>(p, group, col0 + 16 * mt + 8 * hf + g, umin, umax, tig, w, key_scale[mt][hf], key_ok[mt][hf]);
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) {
        uint32_t lo, hi;
        fp8x4_to_f16x4(w[ks], lo, hi);
        a[mt][ks][hf] = lo;      // row g (+8 for hf 1), logical cols 2tig, 2tig+1
        a[mt][ks][2 + hf] = hi;  // logical cols 2tig+8, 2tig+9
      }
    }
  // The scale and validity of the column this lane writes (selects, not a dynamic index: no local memory).
  const float out_scale = pick(key_scale, tig);
  const bool out_ok = pick(key_ok, tig);

  const int head_tiles = (p.heads + 7) / 8;
  for (int t = 0; t < rows_here; ++t) {
    const int64_t row = row0 + t;
    int64_t lo, hi;
    indexer::row_window<kPaged>(p, group, kPaged ? p.rows_per_group : kRaggedGroupRows, t, lo, hi);
    float* out_row = p.logits + row * p.logit_row_stride;
    if (col0 + kColsPerWarp <= lo || col0 >= hi) {
      if (my_col_in) out_row[my_col * p.logit_col_stride] = neg_inf;
      continue;
    }
    float part[2][2] = {{0.f, 0.f}, {0.f, 0.f}};  // [mt][key g / g+8], this lane's head columns
    for (int nt = 0; nt < head_tiles; ++nt) {
      const int h_load = nt * 8 + g;  // B fragment: head of this lane's n index
      uint32_t wq[8];
      if (h_load < p.heads) {
        load32(p.q + row * p.q_row_stride + int64_t(h_load) * p.q_head_stride + 32 * tig, true, wq);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) wq[i] = 0u;
      }
      uint32_t b[8][2];
#pragma unroll
      for (int ks = 0; ks < 8; ++ks) fp8x4_to_f16x4(wq[ks], b[ks][0], b[ks][1]);
      const int h0 = nt * 8 + 2 * tig;  // output columns (heads) of c0/c2 and c1/c3
      const float w0 = h0 < p.heads ? head_weight<kQScale>(p, row, h0) : 0.f;
      const float w1 = h0 + 1 < p.heads ? head_weight<kQScale>(p, row, h0 + 1) : 0.f;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        float acc[8][4];
#pragma unroll
        for (int ks = 0; ks < 8; ++ks) {
          acc[ks][0] = acc[ks][1] = acc[ks][2] = acc[ks][3] = 0.f;
          ptx::mma_16816<__half>(acc[ks], a[mt][ks], b[ks][0], b[ks][1]);
        }
        float dot[4];
#pragma unroll
        for (int e = 0; e < 4; ++e)
          dot[e] =
              ((acc[0][e] + acc[1][e]) + (acc[2][e] + acc[3][e])) + ((acc[4][e] + acc[5][e]) + (acc[6][e] + acc[7][e]));
        part[mt][0] = fmaf(relu_keep_nan(dot[0]), w0, part[mt][0]);
        part[mt][0] = fmaf(relu_keep_nan(dot[1]), w1, part[mt][0]);
        part[mt][1] = fmaf(relu_keep_nan(dot[2]), w0, part[mt][1]);
        part[mt][1] = fmaf(relu_keep_nan(dot[3]), w1, part[mt][1]);
      }
    }
    // Sum over the quad's head columns (every lane ends with all four sums), then write.
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        part[mt][hf] += __shfl_xor_sync(ptx::kFullMask, part[mt][hf], 1);
        part[mt][hf] += __shfl_xor_sync(ptx::kFullMask, part[mt][hf], 2);
      }
    const float mine = pick(part, tig);
    if (my_col_in) {
      const bool visible = out_ok && my_col >= lo && my_col < hi;
      out_row[my_col * p.logit_col_stride] = visible ? mine * out_scale : neg_inf;
    }
  }
}

}  // namespace

void indexer::launch_sm80(const Params& p, const Plan& plan, Stream stream) {
  if (plan.ctas() == 0) return;
  cudaStream_t s = to_cuda(stream);
  const dim3 grid{unsigned(plan.ctas())}, block{unsigned(kWarps * 32)};
  using indexer::Kernel;
  switch (plan.kernel) {
    case Kernel::paged_q_scale: indexer_kernel<true, true><<<grid, block, 0, s>>>(p); break;
    case Kernel::paged: indexer_kernel<true, false><<<grid, block, 0, s>>>(p); break;
    case Kernel::ragged_q_scale: indexer_kernel<false, true><<<grid, block, 0, s>>>(p); break;
    case Kernel::ragged: indexer_kernel<false, false><<<grid, block, 0, s>>>(p); break;
    default: ATTNSERVE_CHECK(false, "indexer: launch_sm80 given a Hopper kernel"); return;
  }
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace attnserve::cuda
