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
#include "cuda/cuda_ops.h"
#include "cuda/common/numeric.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/host_util.cuh"
#include "cuda/indexer/plan.h"
#include "cuda/indexer/sm80/config.h"

namespace attnserve::cuda {
namespace {

using indexer::kColsPerCta;  // the CTA shape (config.h)
using indexer::kColsPerWarp;
using indexer::kDim;
using indexer::kRaggedGroupRows;
using indexer::kWarps;

struct IndexerParams {
  const uint8_t* q;  // [rows, heads, 128] fp8
  int64_t q_row_stride, q_head_stride;
  const float* w;  // [rows, heads]
  int64_t w_row_stride, w_head_stride;
  const float* q_scale;  // [rows, heads] or null: multiplies w
  int64_t qs_row_stride, qs_head_stride;
  int heads;
  int64_t rows;
  float* logits;  // [rows, num_cols]
  int64_t logit_row_stride, logit_col_stride, num_cols;
  int64_t num_groups;
  int rows_per_group;  // paged: next_n; ragged: kRaggedGroupRows
  int64_t col_blocks;
  bool key_vec16;  // keys are 16-byte aligned (else 4-byte loads)
  // ragged
  const uint8_t* k;  // [num_cols, 128] fp8
  int64_t k_row_stride;
  const float* k_scale;
  int64_t k_scale_stride;
  const int32_t* ks;
  int64_t ks_stride;
  const int32_t* ke;
  int64_t ke_stride;
  // paged
  const uint8_t* pool;  // [num_pages, page_size * 132]
  int64_t num_pages;
  int64_t page_size;
  const int32_t* page_table;  // [b, max_pages]
  int64_t pt_row_stride, pt_col_stride, max_pages;
  const int32_t* seqlens;
  int64_t seqlens_stride;
};

// The weight of head h for query row `row`, with q's scale folded in when it is given.
// A compile-time switch: a run-time test of q_scale in this inner loop cost the paged indexer 30% on the
// H200 (611 -> 805 us at b128 x 32K x 64 heads, session 2).
template <bool kQScale>
__device__ __forceinline__ float head_weight(const IndexerParams& p, int64_t row, int h) {
  const float w = p.w[row * p.w_row_stride + int64_t(h) * p.w_head_stride];
  if constexpr (kQScale) return w * p.q_scale[row * p.qs_row_stride + int64_t(h) * p.qs_head_stride];
  else return w;
}

// Key window [lo, hi) of row t of a group (t < rows_per_group), clamped to the logits width.
template <bool kPaged>
__device__ __forceinline__ void row_window(const IndexerParams& p, int64_t group, int t, int64_t& lo, int64_t& hi) {
  if constexpr (kPaged) {
    const int64_t limit = min(p.num_cols, p.max_pages * p.page_size);
    const int64_t seqlen = p.seqlens[group * p.seqlens_stride];
    const int64_t visible = seqlen - p.rows_per_group + t + 1;
    lo = 0;
    hi = visible < 0 ? 0 : (visible > limit ? limit : visible);
  } else {
    const int64_t row = group * kRaggedGroupRows + t;
    if (row >= p.rows) {
      lo = hi = 0;
      return;
    }
    int64_t a = p.ks[row * p.ks_stride], b = p.ke[row * p.ke_stride];
    a = a < 0 ? 0 : (a > p.num_cols ? p.num_cols : a);
    b = b < a ? a : (b > p.num_cols ? p.num_cols : b);
    lo = a;
    hi = b;
  }
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
  const int rows_here = kPaged ? p.rows_per_group
                               : int(min(int64_t(kRaggedGroupRows), p.rows - group * kRaggedGroupRows));
  const int64_t row0 = group * p.rows_per_group;

  // The union of the group's windows, to skip warps that see no key.
  int64_t umin = p.num_cols, umax = 0;
  for (int t = 0; t < rows_here; ++t) {
    int64_t lo, hi;
    row_window<kPaged>(p, group, t, lo, hi);
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
    row_window<kPaged>(p, group, t, lo, hi);
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
          dot[e] = ((acc[0][e] + acc[1][e]) + (acc[2][e] + acc[3][e])) + ((acc[4][e] + acc[5][e]) + (acc[6][e] + acc[7][e]));
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

void launch(const IndexerParams& p, const indexer::Plan& plan, Stream stream) {
  if (plan.ctas() == 0) return;
  cudaStream_t s = to_cuda(stream);
  const dim3 grid{unsigned(plan.ctas())}, block{unsigned(kWarps * 32)};
  switch (plan.kernel) {
    case indexer::Kernel::paged_q_scale: indexer_kernel<true, true><<<grid, block, 0, s>>>(p); break;
    case indexer::Kernel::paged: indexer_kernel<true, false><<<grid, block, 0, s>>>(p); break;
    case indexer::Kernel::ragged_q_scale: indexer_kernel<false, true><<<grid, block, 0, s>>>(p); break;
    case indexer::Kernel::ragged: indexer_kernel<false, false><<<grid, block, 0, s>>>(p); break;
  }
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

IndexerParams common_params(const TensorView& q, const TensorView& w, const TensorView& q_scale,
                            const TensorView& logits, const indexer::Plan& plan) {
  IndexerParams p{};
  p.rows_per_group = plan.rows_per_group;
  p.num_groups = plan.num_groups;
  p.col_blocks = plan.col_blocks;
  p.key_vec16 = plan.key_vec16;
  if (!q_scale.empty_view()) {
    p.q_scale = q_scale.ptr<const float>();
    p.qs_row_stride = q_scale.stride(0);
    p.qs_head_stride = q_scale.stride(1);
  }
  p.q = q.ptr<const uint8_t>();
  p.q_row_stride = q.stride(0);
  p.q_head_stride = q.stride(1);
  p.w = w.ptr<const float>();
  p.w_row_stride = w.stride(0);
  p.w_head_stride = w.stride(1);
  p.heads = int(q.size(1));
  p.rows = q.size(0);
  p.logits = logits.ptr<float>();
  p.logit_row_stride = logits.stride(0);
  p.logit_col_stride = logits.stride(1);
  p.num_cols = logits.size(1);
  return p;
}

}  // namespace

void indexer_ragged(const IndexerRaggedArgs& a, Workspace, Stream stream) {
  constexpr const char* op = "indexer_ragged";
  if (a.q.size(0) == 0 || a.k.size(0) == 0) return;
  require_rows_aligned(op, "q", a.q, 16);
  require_rows_aligned(op, "k", a.k, 16);
  DeviceGuard guard(a.q.device);
  const indexer::Plan plan = indexer::make_plan(indexer::problem_of(a), current_device_caps());
  IndexerParams p = common_params(a.q, a.weights, a.q_scale, a.logits, plan);
  p.k = a.k.ptr<const uint8_t>();
  p.k_row_stride = a.k.stride(0);
  p.k_scale = a.k_scale.ptr<const float>();
  p.k_scale_stride = a.k_scale.stride(0);
  p.ks = a.ks.ptr<const int32_t>();
  p.ks_stride = a.ks.stride(0);
  p.ke = a.ke.ptr<const int32_t>();
  p.ke_stride = a.ke.stride(0);
  launch(p, plan, stream);
}

void indexer_paged(const IndexerPagedArgs& a, Workspace, Stream stream) {
  constexpr const char* op = "indexer_paged";
  if (a.q.size(0) == 0 || a.logits.size(1) == 0) return;
  require_rows_aligned(op, "q", a.q, 16);
  ATTNSERVE_CHECK(aligned_to(a.index_k_cache.data, 16), op,
                  ": argument 'index_k_cache' needs a 16-byte aligned base on CUDA");
  DeviceGuard guard(a.q.device);
  const indexer::Plan plan = indexer::make_plan(indexer::problem_of(a), current_device_caps());
  IndexerParams p = common_params(a.q, a.weights, a.q_scale, a.logits, plan);
  p.pool = a.index_k_cache.ptr<const uint8_t>();
  p.num_pages = a.index_k_cache.size(0);
  p.page_size = a.page_size;
  p.page_table = a.page_table.ptr<const int32_t>();
  p.pt_row_stride = a.page_table.stride(0);
  p.pt_col_stride = a.page_table.stride(1);
  p.max_pages = a.page_table.size(1);
  p.seqlens = a.seqlens.ptr<const int32_t>();
  p.seqlens_stride = a.seqlens.stride(0);
  launch(p, plan, stream);
}

}  // namespace attnserve::cuda
