// Top-k of one row by one CTA, streaming the row from L2/HBM on every pass (the first kernel, kept as
// the exact fallback of topk_sampled.cuh and as a path of its own for A/B runs).
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
#pragma once
#include "cuda/topk/sm80/topk_common.cuh"

namespace attnserve::cuda::topk_detail {

constexpr int kGlobalUnroll = 8;  // row values each thread has in flight per streaming step

struct Digit {
  int shift, width;
};
__device__ __forceinline__ Digit digit_of_pass(int pass) {
  return pass == 0 ? Digit{20, 12} : pass == 1 ? Digit{8, 12} : Digit{0, 8};
}

// Requires v.len > p.k. s_hist: [kBins]; s_warp: [2][kThreads / 32]; every thread of the CTA calls it.
template <int kThreads>
__device__ __forceinline__ void radix_select_global(const TopkParams& p, int64_t row, const RowView& rv,
                                                    uint32_t* s_hist, uint32_t (*s_warp)[kThreads / 32],
                                                    BinPick* s_pick) {
  constexpr int kWarps = kThreads / 32;
  constexpr int kUnroll = kGlobalUnroll;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float* s = rv.s;
  const int64_t len = rv.len;
  const int k = p.k;

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
    const BinPick pick = find_bin<kThreads>(s_hist, need, s_warp[0], s_pick);
    need -= pick.above;
    prefix = (prefix << dg.width) | pick.digit;
    bits += dg.width;
    if (pick.count == need) break;  // the whole bin is taken: the prefix decides alone
  }
  // Here: keys whose top `bits` bits exceed `prefix` are in (k - need of them); of those equal to it,
  // the first `need` in position order are in.

  // ---- final pass: warps own contiguous ranges of 32-position steps.
  const int64_t chunk = ((len + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int64_t w_begin = int64_t(warp) * chunk;
  const int64_t w_end = w_begin + chunk < len ? w_begin + chunk : len;
  const int shift = 32 - bits;
  // The warp's values, kUnroll steps of 32 positions per batch (loads in flight together).
  auto load_batch = [&](int64_t base, float(&v)[kUnroll]) {
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
        const uint32_t slot =
            above_before + (eq_before < need ? eq_before : need) + uint32_t(__popc(m_sel & lanes_below));
        if (slot < uint32_t(k)) rv.out[int64_t(slot) * p.out_col_stride] = value_of(p, row, rv.request, j);
      }
      above_before += uint32_t(__popc(m_above));
      eq_before += uint32_t(__popc(m_eq));
    }
  }
}

// The same, not inlined: the fallback of the sampled kernel (topk_sampled.cuh), kept out of its
// register allocation (inlined, it cost the streaming loop ~36 bytes of spills at 64 registers). p must
// be a __grid_constant__ parameter.
template <int kThreads>
__device__ __noinline__ void radix_select_global_fallback(const TopkParams& p, int64_t row, RowView rv,
                                                          uint32_t* s_hist, uint32_t (*s_warp)[kThreads / 32],
                                                          BinPick* s_pick) {
  radix_select_global<kThreads>(p, row, rv, s_hist, s_warp, s_pick);
}

// The first kernel: one CTA per row, every pass from global memory.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) topk_global_kernel(TopkParams p) {
  __shared__ alignas(16) uint32_t s_hist[kBins];
  __shared__ uint32_t s_warp[2][kThreads / 32];
  __shared__ BinPick s_pick;
  const int64_t row = blockIdx.x;
  const RowView rv = row_view(p, row);
  if (rv.len <= p.k) {
    emit_identity<kThreads>(p, row, rv);
    return;
  }
  radix_select_global<kThreads>(p, row, rv, s_hist, s_warp, &s_pick);
}

}  // namespace attnserve::cuda::topk_detail
