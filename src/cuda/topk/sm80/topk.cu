// CUDA exact top-k per row with the fused slot transforms (topk.h), same ranking as the CPU oracle
// (src/cpu/topk_select.h): larger wins, -0 == +0, -inf below finite, NaN below -inf, every position in
// [0, len) is a candidate, ties at the k-th value -> the lower position.
//
// One CTA per row (grid = rows: fixed by the scores' shape, graph safe, no host sync, no workspace).
// Radix select on the order-preserving uint32 key, streaming the row from L2/HBM each pass:
//   passes 1-3: histograms of key bits [31:20], [19:8], [7:0] (12 + 12 + 8) over the elements whose
//               higher bits equal the prefix fixed so far, in a 4096-bin shared histogram (a warp whose
//               lanes all hit one bin adds once); after each pass the bin holding the need-th largest
//               element extends the prefix; if that bin is taken whole, selection stops early.
//   final pass: every element whose key prefix is above the threshold is in; elements equal to it are
//               in while their rank among equals (in position order) is below `need`. Warps own
//               contiguous position ranges; a count pass and a prefix sum over warps give each warp its
//               output offset, so the k positions come out in ascending order, deterministically.
// Cost per row: at most 5 reads of the row (3 histograms + count + emit), 4 bytes per position each;
// every streaming loop loads kUnroll values per thread before using them (memory-level parallelism).
#include <cuda_runtime.h>

#include "cuda/cuda_ops.h"
#include "cuda/topk/plan.h"
#include "cuda/common/numeric.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/host_util.cuh"

namespace attnserve::cuda {
namespace {

constexpr int kBins = 4096;
constexpr int kUnroll = 8;  // row values each thread has in flight per streaming step

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
  int transform;               // TopkTransform
  const int32_t* table;        // page_table_1 (decode: [rows, W]; prefill: [b, W])
  int64_t table_row_stride, table_col_stride, table_width;
  const int32_t* cu_seqlens_q;  // prefill: [b + 1]
  int64_t cu_stride;
  int64_t num_requests;
  const int32_t* offsets;  // ragged: [rows]
  int64_t offset_stride;
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

struct Digit {
  int shift, width;
};
__device__ __forceinline__ Digit digit_of_pass(int pass) {
  return pass == 0 ? Digit{20, 12} : pass == 1 ? Digit{8, 12} : Digit{0, 8};
}

// The request of a prefill row: the last r in [0, b) with cu_seqlens_q[r] <= row (skips empty requests).
__device__ int64_t request_of_row(const TopkParams& p, int64_t row) {
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
    case int(TopkTransform::ragged):
      return int32_t(j + int64_t(p.offsets[row * p.offset_stride]));
    default:
      return int32_t(j);
  }
}

template <int kThreads>
__global__ void __launch_bounds__(kThreads) topk_rows_kernel(TopkParams p) {
  constexpr int kWarps = kThreads / 32;
  constexpr int kBinsPerThread = kBins / kThreads;
  static_assert(kBins % kThreads == 0, "bins per thread");
  __shared__ uint32_t s_hist[kBins];
  __shared__ uint32_t s_warp[2][kWarps];
  __shared__ uint32_t s_digit, s_above, s_count;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t row = blockIdx.x;
  int64_t start = p.row_starts ? int64_t(p.row_starts[row * p.start_stride]) : 0;
  start = start < 0 ? 0 : (start > p.width ? p.width : start);
  int64_t len = p.lengths[row * p.length_stride];
  len = len < 0 ? 0 : (len > p.width - start ? p.width - start : len);  // clamped to the row width
  const float* s = p.scores + row * p.score_row_stride + start;        // [len]
  int32_t* out = p.out + row * p.out_row_stride;                        // [k] (stride out_col_stride)
  const int k = p.k;
  const int64_t request = p.transform == int(TopkTransform::prefill) ? request_of_row(p, row) : 0;

  if (len <= k) {  // everything, in order, then -1 padding
    for (int c = tid; c < k; c += kThreads) out[c * p.out_col_stride] = c < len ? value_of(p, row, request, c) : -1;
    return;
  }

  // ---- histogram passes: fix the threshold key prefix (prefix, bits) and how many of it to take.
  uint32_t prefix = 0;
  int bits = 0;
  uint32_t need = uint32_t(k);
  for (int pass = 0; pass < 3; ++pass) {
    const Digit dg = digit_of_pass(pass);
    const uint32_t mask = (1u << dg.width) - 1u;
    for (int b = tid; b < kBins; b += kThreads) s_hist[b] = 0;
    __syncthreads();
    // kUnroll loads per thread are in flight before the first is used: one load at a time left a
    // 64K row latency-bound (~100 us per row on the H200 whatever the batch).
    for (int64_t base = 0; base < len; base += int64_t(kThreads) * kUnroll) {  // uniform trip count: whole warps vote
      float v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = base + int64_t(u) * kThreads + tid;
        v[u] = j < len ? __ldg(s + j) : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const bool valid = base + int64_t(u) * kThreads + tid < len;
        const uint32_t key = valid ? topk_key(v[u]) : 0u;
        const bool take = valid && (bits == 0 || (key >> (32 - bits)) == prefix);
        const uint32_t bin = (key >> dg.shift) & mask;
        const unsigned voters = __ballot_sync(ptx::kFullMask, take);
        if (voters == 0) continue;
        const int leader = __ffs(voters) - 1;
        const uint32_t leader_bin = __shfl_sync(ptx::kFullMask, bin, leader);
        if (__all_sync(ptx::kFullMask, !take || bin == leader_bin)) {
          if (lane == leader) atomicAdd(&s_hist[leader_bin], uint32_t(__popc(voters)));
        } else if (take) {
          atomicAdd(&s_hist[bin], 1u);
        }
      }
    }
    __syncthreads();

    // Threshold bin: the largest d with count(bins >= d) >= need. Thread t owns bins
    // [t * kBinsPerThread, (t + 1) * kBinsPerThread); a suffix sum over threads finds the owner.
    uint32_t mine = 0;
#pragma unroll
    for (int i = 0; i < kBinsPerThread; ++i) mine += s_hist[tid * kBinsPerThread + i];
    uint32_t incl = mine;  // sum over lanes >= lane of this warp
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t y = __shfl_down_sync(ptx::kFullMask, incl, o);
      if (lane + o < 32) incl += y;
    }
    if (lane == 0) s_warp[0][warp] = incl;
    __syncthreads();
    uint32_t above = incl - mine;  // bins owned by higher threads
    for (int w = warp + 1; w < kWarps; ++w) above += s_warp[0][w];
    if (above < need && above + mine >= need) {  // exactly one thread
      for (int i = kBinsPerThread - 1; i >= 0; --i) {
        const uint32_t c = s_hist[tid * kBinsPerThread + i];
        if (above + c >= need) {
          s_digit = uint32_t(tid * kBinsPerThread + i);
          s_above = above;
          s_count = c;
          break;
        }
        above += c;
      }
    }
    __syncthreads();
    const uint32_t d = s_digit;
    need -= s_above;
    const uint32_t count = s_count;
    prefix = (prefix << dg.width) | d;
    bits += dg.width;
    if (count == need) break;  // the whole bin is taken: the prefix decides alone
  }
  // Here: keys whose top `bits` bits exceed `prefix` are in (k - need of them); of those equal to it,
  // the first `need` in position order are in.

  // ---- final pass: warps own contiguous ranges of 32-position steps.
  const int64_t chunk = ((len + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int64_t w_begin = int64_t(warp) * chunk;
  const int64_t w_end = w_begin + chunk < len ? w_begin + chunk : len;
  const int shift = 32 - bits;
  // The warp's values, kUnroll steps of 32 positions per batch (loads in flight together).
  auto load_batch = [&](int64_t base, float (&v)[kUnroll]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = base + 32 * u + lane;
      v[u] = j < w_end ? __ldg(s + j) : 0.f;
    }
  };
  auto classify = [&](int64_t j, float x, bool& is_above, bool& is_eq) {
    is_above = is_eq = false;
    if (j < w_end) {
      const uint32_t kp = topk_key(x) >> shift;
      is_above = kp > prefix;
      is_eq = kp == prefix;
    }
  };
  uint32_t n_above = 0, n_eq = 0;
  for (int64_t base = w_begin; base < w_end; base += 32 * kUnroll) {
    float v[kUnroll];
    load_batch(base, v);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      bool a, e;
      classify(base + 32 * u + lane, v[u], a, e);
      n_above += uint32_t(__popc(__ballot_sync(ptx::kFullMask, a)));
      n_eq += uint32_t(__popc(__ballot_sync(ptx::kFullMask, e)));
    }
  }
  if (lane == 0) {
    s_warp[0][warp] = n_above;
    s_warp[1][warp] = n_eq;
  }
  __syncthreads();
  uint32_t above_before = 0, eq_before = 0;  // in the ranges of lower warps
  for (int w = 0; w < warp; ++w) {
    above_before += s_warp[0][w];
    eq_before += s_warp[1][w];
  }
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int64_t base = w_begin; base < w_end; base += 32 * kUnroll) {
    float v[kUnroll];
    load_batch(base, v);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {  // in position order: the output stays ascending
      const int64_t j = base + 32 * u + lane;
      bool a, e;
      classify(j, v[u], a, e);
      const unsigned m_above = __ballot_sync(ptx::kFullMask, a);
      const unsigned m_eq = __ballot_sync(ptx::kFullMask, e);
      const uint32_t eq_rank = eq_before + uint32_t(__popc(m_eq & lanes_below));
      const bool sel = a || (e && eq_rank < need);
      const unsigned m_sel = __ballot_sync(ptx::kFullMask, sel);
      if (sel) {
        const uint32_t slot = above_before + (eq_before < need ? eq_before : need) + uint32_t(__popc(m_sel & lanes_below));
        if (slot < uint32_t(k)) out[int64_t(slot) * p.out_col_stride] = value_of(p, row, request, j);
      }
      above_before += uint32_t(__popc(m_above));
      eq_before += uint32_t(__popc(m_eq));
    }
  }
}

}  // namespace

std::size_t topk_workspace_size(const TopkArgs& a, const DeviceCaps& caps) {
  return topk_op::workspace_size(topk_op::make_plan(topk_op::problem_of(a), caps));
}

void topk(const TopkArgs& a, Workspace, Stream stream) {
  const int64_t rows = a.scores.size(0);
  if (rows == 0) return;
  DeviceGuard guard(a.scores.device);
  const topk_op::Plan plan = topk_op::make_plan(topk_op::problem_of(a), current_device_caps());
  TopkParams p{};
  p.scores = a.scores.ptr<const float>();
  p.score_row_stride = a.scores.stride(0);
  p.width = a.scores.size(1);
  p.lengths = a.lengths.ptr<const int32_t>();
  p.length_stride = a.lengths.stride(0);
  p.row_starts = a.row_starts.empty_view() ? nullptr : a.row_starts.ptr<const int32_t>();
  p.start_stride = a.row_starts.empty_view() ? 0 : a.row_starts.stride(0);
  p.out = a.out.ptr<int32_t>();
  p.out_row_stride = a.out.stride(0);
  p.out_col_stride = a.out.stride(1);
  p.rows = rows;
  p.k = a.topk;
  p.transform = int(a.transform);
  if (a.transform == TopkTransform::decode || a.transform == TopkTransform::prefill) {
    p.table = a.page_table_1.ptr<const int32_t>();
    p.table_row_stride = a.page_table_1.stride(0);
    p.table_col_stride = a.page_table_1.stride(1);
    p.table_width = a.page_table_1.size(1);
  }
  if (a.transform == TopkTransform::prefill) {
    p.cu_seqlens_q = a.cu_seqlens_q.ptr<const int32_t>();
    p.cu_stride = a.cu_seqlens_q.stride(0);
    p.num_requests = a.page_table_1.size(0);
    ATTNSERVE_CHECK(p.num_requests >= 1, "topk: transform 'prefill' needs 'page_table_1' with at least one row");
  }
  if (a.transform == TopkTransform::ragged) {
    p.offsets = a.offsets.ptr<const int32_t>();
    p.offset_stride = a.offsets.stride(0);
  }
  cudaStream_t s = to_cuda(stream);
  switch (plan.kernel) {  // topk_op::make_plan: 1024 threads stream long rows, 256 share an SM on short ones
    case topk_op::Kernel::rows_1024: topk_rows_kernel<1024><<<unsigned(rows), 1024, 0, s>>>(p); break;
    case topk_op::Kernel::rows_256: topk_rows_kernel<256><<<unsigned(rows), 256, 0, s>>>(p); break;
  }
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace attnserve::cuda
