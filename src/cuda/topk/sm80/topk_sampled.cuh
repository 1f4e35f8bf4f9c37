// Top-k of one row by one CTA in one read of the row from HBM: a sampled threshold, one filtering pass
// into shared memory, then an exact radix select on the candidates in shared memory.
//
//   1. Rows of at most kExactMax (4096) elements: the whole row goes to shared memory as candidates.
//      Longer rows: a sample of 32 evenly spaced chunks of 128 elements (4096 values, one 16-byte load
//      per thread at 1024 threads), and a radix select on the sample's keys picks a key t such that about
//      r = k_s + 5 sqrt(k_s) + 16 sample values are >= t, k_s = k * 4096 / len (the sample's share of k):
//      count(row >= t) is then >= k with a margin of ~5 standard deviations for exchangeable scores.
//   2. One pass over the row with 16-byte loads (kUnroll per thread in flight): every value with
//      key >= t goes to its warp's segment of shared memory (key and position, kSegCap per warp; warps
//      take 128-element steps round robin, so a hot region of the row spreads over all of them). No
//      atomics, no barrier in the loop: a ballot gives each lane its slot.
//   3. If the candidates number at least k and no segment overflowed, the top k of the row are the top k
//      of the candidates: a radix select on the 64-bit composite (key << 32 | (2^31 - 1 - position))
//      in shared memory, 12/12/8 bits of the key then 12/12/7 of the position, stopping as soon as the
//      threshold bin is taken whole. Composites are distinct, so exactly k candidates are >= the
//      threshold, and equal keys go to the lower positions. Otherwise (adversarial rows: a sample that
//      misses the top, or more than kSegCap candidates for a warp, e.g. all-equal rows), the row goes to
//      radix_select_global (topk_radix_global.cuh), which is exact for any input.
//   4. Emit: each warp counts its selected candidates, a prefix over warps gives its output offset, and a
//      ballot orders its lanes: the output order depends only on the data (deterministic, not sorted).
// Shared memory: kWarps * kSegCap * 8 bytes of candidates + the 16 KB histogram (152 KB at 1024 threads,
// 50 KB at 256).
#pragma once
#include "cuda/topk/sm80/topk_radix_global.cuh"

namespace attnserve::cuda::topk_detail {

constexpr int kSegCap = 528;  // candidates per warp: 4 steps of 128 + 16 (head/tail extras of warp 0)
constexpr int kSampleChunks = 32;
constexpr int kSampleQuads = 32;                               // 128 values per chunk
constexpr int kSampleSize = kSampleChunks * kSampleQuads * 4;  // 4096
constexpr int kExactMax = 4096;                                // rows up to this length are loaded whole

template <int kThreads>
struct SampledSmem {
  static constexpr int kWarps = kThreads / 32;
  uint32_t bits[kWarps * kSegCap];  // the candidates' raw float bits (the key is derived when read)
  uint32_t pos[kWarps * kSegCap];
  alignas(16) uint32_t hist[kBins];  // 16-byte aligned: find_bin reads uint4
  uint32_t warp[2][kWarps];
  uint32_t cnt[kWarps];  // values each warp pushed (more than kSegCap: its segment overflowed)
  BinPick pick;
};

// The composite rank of a candidate: larger ranks first; distinct for distinct positions.
__device__ __forceinline__ uint64_t composite(uint32_t bits, uint32_t pos) {
  return (uint64_t(topk_key(__uint_as_float(bits))) << 32) | uint64_t(0x7fffffffu - pos);
}

// One histogram pass over the candidates of every warp's segment: the digit (c >> shift) & mask of the
// candidates whose bits above prev_shift equal `prefix` (all of them when prev_shift == 64).
// `key_only`: the composite's position half is ignored (the sample). Ends with a barrier.
template <int kThreads>
__device__ inline void candidate_histogram(SampledSmem<kThreads>& S, bool key_only, int prev_shift, uint64_t prefix,
                                           int shift, uint32_t mask, int hist_mode) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int b = tid; b < kBins; b += kThreads) S.hist[b] = 0;
  __syncthreads();
  const uint32_t n = S.cnt[warp];  // <= kSegCap here
  const uint32_t* bits = S.bits + warp * kSegCap;
  const uint32_t* pos = S.pos + warp * kSegCap;
  for (uint32_t base = 0; base < n; base += 32) {  // warp-uniform trip count
    const uint32_t i = base + lane;
    bool take = i < n;
    uint32_t d = 0;
    if (take) {
      const uint64_t c = composite(bits[i], key_only ? 0x7fffffffu : pos[i]);
      take = prev_shift == 64 || (c >> prev_shift) == prefix;
      d = uint32_t(c >> shift) & mask;
    }
    const unsigned voters = __ballot_sync(ptx::kFullMask, take);
    if (voters == 0) continue;
    if (hist_mode == 1) {  // one atomic per distinct bin of the warp
      if (take) {
        const unsigned peers = __match_any_sync(voters, d);
        if (__ffs(peers) - 1 == lane) atomicAdd(&S.hist[d], uint32_t(__popc(peers)));
      }
    } else {  // one atomic if every voter has the leader's bin, else one per lane
      const int leader = __ffs(voters) - 1;
      const uint32_t leader_d = __shfl_sync(ptx::kFullMask, d, leader);
      if (__all_sync(ptx::kFullMask, !take || d == leader_d)) {
        if (lane == leader) atomicAdd(&S.hist[leader_d], uint32_t(__popc(voters)));
      } else if (take) {
        atomicAdd(&S.hist[d], 1u);
      }
    }
  }
  __syncthreads();
}

struct CompositeDigit {
  int shift, width;
};
__device__ __forceinline__ CompositeDigit composite_digit(int pass) {
  // key bits [63:52] [51:40] [39:32], then position bits [30:19] [18:7] [6:0] (bit 31 is always 0)
  switch (pass) {
    case 0: return {52, 12};
    case 1: return {40, 12};
    case 2: return {32, 8};
    case 3: return {19, 12};
    case 4: return {7, 12};
    default: return {0, 7};
  }
}

// The float f with key(x) >= t <=> x >= f for every non-NaN x (t > 0): -inf up to key(-inf); a NaN
// (nothing passes) above key(+inf). -0 for t = 0x7fffffff, which no float has (-0 maps to +0's key).
__device__ __forceinline__ float key_threshold_float(uint32_t t) {
  if (t <= 0x007fffffu) return __uint_as_float(0xff800000u);
  return __uint_as_float(t >= 0x80000000u ? t ^ 0x80000000u : ~t);
}

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

template <int kThreads, int kUnroll>
__global__ void __launch_bounds__(kThreads, kThreads <= 256 ? 4 : 1)
    topk_sampled_kernel(TopkParams p) {  // 256: 4 CTAs (50 KB) per SM
  constexpr int kWarps = kThreads / 32;
  extern __shared__ uint4 smem_raw[];
  SampledSmem<kThreads>& S = *reinterpret_cast<SampledSmem<kThreads>*>(smem_raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned lanes_below = (1u << lane) - 1u;
  const int64_t row = blockIdx.x;
  const RowView rv = row_view(p, row);
  const int64_t len = rv.len;
  const int k = p.k;
  if (len <= k) {
    emit_identity<kThreads>(p, row, rv);
    return;
  }
  const float* s = rv.s;
  if (p.debug_stop == 1) return;

  // The first p.prefetch_bytes of the row go to L2 now, at the chip's bandwidth rather than this SM's
  // loads in flight; the sample and its select run meanwhile, and the filter then mostly hits L2.
  {
    const int64_t n_pf = (p.prefetch_bytes / 4 < len ? p.prefetch_bytes / 4 : len);                 // values
    for (int64_t j = int64_t(tid) * 32; j < n_pf; j += int64_t(kThreads) * 32) prefetch_l2(s + j);  // a line each
  }

  // The row as 16-byte quads: [0, head) scalar, [head, head + 4 nq) quads, [tail, len) scalar.
  int32_t head = int32_t(((16u - (uint32_t(reinterpret_cast<uintptr_t>(s)) & 15u)) & 15u) >> 2);
  if (head > len) head = int32_t(len);
  const int32_t nq = int32_t((len - head) >> 2);
  const int32_t tail = head + 4 * nq;
  const float4* q4 = reinterpret_cast<const float4*>(s + head);

  // ---- 1. the threshold key t (0: every value is a candidate, NaN included)
  uint32_t t = 0;
  if (len > kExactMax) {  // here nq >= 1023: the chunks lie inside the quads, barely overlapping at worst
    constexpr int kChunksPerWarp = kSampleChunks / kWarps;
    static_assert(kSampleChunks % kWarps == 0 && kChunksPerWarp * kSampleQuads * 4 <= kSegCap, "sample layout");
    float4 v[kChunksPerWarp];
#pragma unroll
    for (int c = 0; c < kChunksPerWarp; ++c) {
      const int chunk = warp + c * kWarps;
      const int32_t q0 = int32_t(int64_t(chunk) * (nq - kSampleQuads) / (kSampleChunks - 1));
      v[c] = __ldg(q4 + q0 + lane);
    }
    uint32_t* sb = S.bits + warp * kSegCap;
#pragma unroll
    for (int c = 0; c < kChunksPerWarp; ++c) {
      sb[c * 128 + 0 * 32 + lane] = __float_as_uint(v[c].x);
      sb[c * 128 + 1 * 32 + lane] = __float_as_uint(v[c].y);
      sb[c * 128 + 2 * 32 + lane] = __float_as_uint(v[c].z);
      sb[c * 128 + 3 * 32 + lane] = __float_as_uint(v[c].w);
    }
    if (lane == 0) S.cnt[warp] = kChunksPerWarp * 128;
    __syncthreads();
    if (p.debug_stop == 2) return;
    const float ks = float(k) * float(kSampleSize) / float(4 * nq);
    const float rf = ks + 5.f * sqrtf(ks) + 16.f;
    if (rf < float(kSampleSize)) {
      const uint32_t r = uint32_t(rf);
      uint32_t need = r;
      uint64_t prefix = 0;
      int prev_shift = 64;
      for (int pass = 0; pass < 3; ++pass) {
        const CompositeDigit dg = composite_digit(pass);
        candidate_histogram<kThreads>(S, true, prev_shift, prefix, dg.shift, (1u << dg.width) - 1u, p.hist_mode);
        const BinPick pick = find_bin<kThreads>(S.hist, need, S.warp[0], &S.pick);
        need -= pick.above;
        prefix = prev_shift == 64 ? uint64_t(pick.digit) : (prefix << (prev_shift - dg.shift)) | pick.digit;
        prev_shift = dg.shift;
        // Stop once the bin is thin: t is its lower edge, so at most pick.count extra sample values.
        if (pick.count == need || pick.count <= r / 2) break;
      }
      t = uint32_t((prefix << prev_shift) >> 32);
    }
    // Everything read from the sample was read before find_bin's last barrier: the segments are free.
  }
  if (p.debug_stop == 3) return;

  // ---- 2. filter: values with key >= t (x >= tf as floats) into the warp's segment.
  const bool take_all = t == 0;
  const float tf = key_threshold_float(t);
  uint32_t cnt = 0;  // warp-uniform
  uint32_t* seg_bits = S.bits + warp * kSegCap;
  uint32_t* seg_pos = S.pos + warp * kSegCap;
  auto push = [&](bool cand, float x, uint32_t pos) {
    const unsigned m = __ballot_sync(ptx::kFullMask, cand);
    if (cand) {
      const uint32_t i = cnt + uint32_t(__popc(m & lanes_below));
      if (i < uint32_t(kSegCap)) {
        seg_bits[i] = __float_as_uint(x);
        seg_pos[i] = pos;
      }
    }
    cnt += uint32_t(__popc(m));
  };
  if (warp == 0) {  // the scalar head and tail: lanes 0..2 and 8..10
    int32_t j = -1;
    if (lane < head) j = lane;
    else if (lane >= 8 && tail + (lane - 8) < len) j = tail + (lane - 8);
    const float x = j >= 0 ? __ldg(s + j) : 0.f;
    push(j >= 0 && (take_all || x >= tf), x, uint32_t(j));
  }
  const int32_t steps = (nq + 31) >> 5;  // 32 quads per step
  for (int32_t s0 = warp; s0 < steps; s0 += kWarps * kUnroll) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t q = (s0 + u * kWarps) * 32 + lane;
      v[u] = q < nq ? __ldg(q4 + q) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t q = (s0 + u * kWarps) * 32 + lane;
      const bool valid = q < nq;
      const uint32_t pos = uint32_t(head + 4 * q);
      push(valid && (take_all || v[u].x >= tf), v[u].x, pos);
      push(valid && (take_all || v[u].y >= tf), v[u].y, pos + 1);
      push(valid && (take_all || v[u].z >= tf), v[u].z, pos + 2);
      push(valid && (take_all || v[u].w >= tf), v[u].w, pos + 3);
    }
  }
  if (lane == 0) S.cnt[warp] = cnt;
  __syncthreads();
  uint32_t total = 0;
  bool overflow = false;
  for (int w = 0; w < kWarps; ++w) {
    const uint32_t c = S.cnt[w];
    total += c;
    overflow |= c > uint32_t(kSegCap);
  }
  if (p.debug_stop == 4) return;
  if (overflow || total < uint32_t(k)) {  // block-uniform: the exact multi-pass path
    radix_select_global<kThreads>(p, row, rv, S.hist, S.warp, &S.pick);
    return;
  }

  // ---- 3. exact radix select on the candidates' composites
  uint32_t need = uint32_t(k);
  uint64_t prefix = 0;
  int prev_shift = 64;
  for (int pass = 0; pass < 6; ++pass) {
    const CompositeDigit dg = composite_digit(pass);
    candidate_histogram<kThreads>(S, false, prev_shift, prefix, dg.shift, (1u << dg.width) - 1u, p.hist_mode);
    const BinPick pick = find_bin<kThreads>(S.hist, need, S.warp[0], &S.pick);
    need -= pick.above;
    prefix = prev_shift == 64 ? uint64_t(pick.digit) : (prefix << (prev_shift - dg.shift)) | pick.digit;
    prev_shift = dg.shift;
    if (pick.count == need) break;  // always by the last pass: composites are distinct
  }
  // Selected: composite >> prev_shift >= prefix (exactly k candidates).
  if (p.debug_stop == 5) return;

  // ---- 4. emit, in segment order
  const uint32_t n = S.cnt[warp];
  uint32_t n_sel = 0;
  for (uint32_t base = 0; base < n; base += 32) {
    const uint32_t i = base + lane;
    const bool sel = i < n && (composite(seg_bits[i], seg_pos[i]) >> prev_shift) >= prefix;
    n_sel += uint32_t(__popc(__ballot_sync(ptx::kFullMask, sel)));
  }
  if (lane == 0) S.warp[1][warp] = n_sel;
  __syncthreads();
  uint32_t slot0 = 0;
  for (int w = 0; w < warp; ++w) slot0 += S.warp[1][w];
  for (uint32_t base = 0; base < n; base += 32) {
    const uint32_t i = base + lane;
    const bool sel = i < n && (composite(seg_bits[i], seg_pos[i]) >> prev_shift) >= prefix;
    const unsigned m = __ballot_sync(ptx::kFullMask, sel);
    if (sel) {
      const uint32_t slot = slot0 + uint32_t(__popc(m & lanes_below));
      if (slot < uint32_t(k))
        rv.out[int64_t(slot) * p.out_col_stride] = value_of(p, row, rv.request, int64_t(seg_pos[i]));
    }
    slot0 += uint32_t(__popc(m));
  }
}

template <int kThreads>
constexpr std::size_t sampled_smem_bytes() {
  return sizeof(SampledSmem<kThreads>);
}

}  // namespace attnserve::cuda::topk_detail
