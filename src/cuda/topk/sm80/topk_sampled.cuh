// The sampled top-k kernel (topk_op::Select::sampled, the plan's default): v3 of session 3 (1b81f8d) with
// every shared-memory loop over the candidates on 16-byte quads (v4 of session 4, 4d5707c), the emit staged
// in shared memory and written with 16-byte stores, and (sm_90) a row split over a thread-block cluster.
// The session-3 kernel (v2) and v3 are removed: this one measured as fast or faster on every shape
// (bench/NOTES.md, sessions 4 and 6).
//
// Top-k of one row by one CTA (or one cluster of CTAs) in one read of the row from HBM: a sampled threshold, one
// filtering pass into shared memory, then an exact radix select on the candidates in shared memory.
//
//   1. Rows of at most kExactMax (4096) values: the whole row goes to shared memory as candidates, densely
//      (no compaction; the holes of a partial last step hold sentinels that rank below every value).
//      Longer rows: a sample of 32 evenly spaced chunks of 128 values (4096, one 16-byte load per thread at
//      1024 threads), and a radix select on the sample's keys picks a key t such that about
//      r = k_s + 5 sqrt(k_s) + 16 sample values are >= t, k_s = k * 4096 / len (the sample's share of k):
//      count(row >= t) is then >= k with a margin of ~5 standard deviations for exchangeable scores.
//   2. One pass over the row with 16-byte loads (kUnroll per thread in flight): every value >= t (a float
//      compare) goes to its warp's segment of shared memory (raw bits and position, kSegCap per warp;
//      warps take 128-value steps round robin, so a hot region of the row spreads over all of them). No
//      atomics, no barrier in the loop: each lane counts its candidates among 8 values, and four ballots
//      (the bits of the counts) give every lane its slots.
//   3. If the candidates number at least k and no segment overflowed, the top k of the row are the top k
//      of the candidates. The segments' bits become keys in place, then a radix select in shared memory:
//      12/12/8 bits of the key, then (only when the k-th key is tied) 12/12/7 bits of 2^31 - 1 - position,
//      stopping as soon as the threshold bin is taken whole. (key, position) pairs are distinct, so exactly
//      k candidates are selected, and equal keys go to the lower positions. Otherwise (adversarial rows: a
//      sample that misses the top, more than kSegCap candidates for a warp, e.g. all-equal rows), the row
//      goes to radix_select_global (topk_radix_global.cuh), which is exact for any input.
//   4. Emit: each warp counts its selected candidates, a prefix over warps gives its output offset, and a
//      ballot orders its lanes: the output order depends only on the data (deterministic, not sorted).
//      Contiguous outputs (column stride 1, k <= kBins - 3) are staged in the free histogram and written
//      by all threads with 16-byte stores; others are stored directly, 4 bytes at a time. The store pass
//      tests every entry again (the default, measured) or, with kKeepMasks (topk_op::Emit::kept_masks, not
//      yet run on a GPU), reuses the count pass's masks.
// Cluster rows (sm_90, plan.cluster > 1 CTAs per row, long rows only): every CTA of the cluster computes
// the same sample threshold (the same 4096 values, the same code), filters 1/nranks of the row's
// 128-value steps into its own segments, and after a cluster barrier copies them into CTA 0's segment of
// the same warp, after the lower ranks' entries (counts read over DSMEM: deterministic placement); after
// a second barrier CTA 0 selects and emits alone, the others exit. A row whose segments would overflow
// in CTA 0 goes to the exact fallback in CTA 0.
// Shared memory: kWarps * kSegCap * 8 bytes of candidates + the 16 KB histogram (152 KB at 1024 threads,
// 50 KB at 256).
// Measured (H200, 7a32edf, phase stops of bench_topk): at 1024 threads the smem phases cost ~40 instructions
// per candidate and pass with the 64-bit composite and the warp-synchronous histogram loop; this version
// keeps 32-bit keys, plain shared atomics and per-thread loops there (ncu 4e2b6ac: v3 was issue-bound,
// 21 K warp instructions per 4096-value row, the select and the emit 80 % of the time).
#pragma once
#include "cuda/topk/sm80/topk_radix_global.cuh"

namespace attnserve::cuda::topk_detail {

constexpr int kSegCap = 528;  // candidates per warp: 4 steps of 128 + 16 (head/tail extras of warp 0)
constexpr int kSampleChunks = 32;
constexpr int kSampleQuads = 32;                               // 128 values per chunk
constexpr int kSampleSize = kSampleChunks * kSampleQuads * 4;  // 4096
constexpr int kExactMax = 4096;                                // rows up to this length are loaded whole
constexpr uint32_t kSentinelBits = 0x7fc00000u;                // NaN: key 0
constexpr uint32_t kSentinelPos = 0x7fffffffu;                 // 2^31 - 1 - pos = 0: below every real position

template <int kThreads>
struct SampledSmem {
  static constexpr int kWarps = kThreads / 32;
  uint32_t bits[kWarps * kSegCap];  // the candidates' raw float bits, then (select) their keys
  uint32_t pos[kWarps * kSegCap];
  alignas(16) uint32_t hist[kBins];  // 16-byte aligned: find_bin reads uint4
  uint32_t warp[2][kWarps];
  uint32_t cnt[kWarps];  // values each warp pushed (more than kSegCap: its segment overflowed)
  BinPick pick;
};

__device__ __forceinline__ uint32_t shr32(uint32_t x, int s) { return s >= 32 ? 0u : x >> s; }

// The radix-select state over (key, rp = 2^31 - 1 - position): fixed so far are the key bits above kshift
// (= kprefix) and, once the key is whole (kshift 0), the rp bits above pshift (= pprefix).
struct SelectState {
  uint32_t kprefix = 0, pprefix = 0;
  int kshift = 32, pshift = 31;
  __device__ __forceinline__ bool matches(uint32_t key, uint32_t rp) const {
    return shr32(key, kshift) == kprefix && (rp >> pshift) == pprefix;
  }
  // Ranked at or above the fixed prefix: the selection once the threshold bin is taken whole.
  __device__ __forceinline__ bool at_or_above(uint32_t key, uint32_t rp) const {
    const uint32_t kk = shr32(key, kshift);
    return kk > kprefix || (kk == kprefix && (rp >> pshift) >= pprefix);
  }
};

struct SelectDigit {
  bool on_pos;
  int shift, width;
};
__device__ __forceinline__ SelectDigit select_digit(int pass) {
  switch (pass) {
    case 0: return {false, 20, 12};
    case 1: return {false, 8, 12};
    case 2: return {false, 0, 8};
    case 3: return {true, 19, 12};
    case 4: return {true, 7, 12};
    default: return {true, 0, 7};
  }
}

// Zeroes the histogram (16-byte stores; every thread calls it), then a barrier.
template <int kThreads>
__device__ __forceinline__ void clear_histogram(SampledSmem<kThreads>& S) {
  uint4* hist4 = reinterpret_cast<uint4*>(S.hist);
  for (int b = int(threadIdx.x); b < kBins / 4; b += kThreads) hist4[b] = make_uint4(0u, 0u, 0u, 0u);
  __syncthreads();
}

// Counts bin bin_of(v[e]) of each entry e of quad q below n: a whole quad with no test per entry (ptxas puts a
// branch around every conditional shared atomic), the segment's last, partial quad entry by entry.
template <typename BinOf>
__device__ __forceinline__ void count_quad(uint32_t* hist, const uint32_t (&v)[4], uint32_t q, uint32_t n,
                                           BinOf bin_of) {
  if (4 * q + 4 <= n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) atomicAdd(&hist[bin_of(v[e])], 1u);
  } else {
#pragma unroll
    for (int e = 0; e < 3; ++e)
      if (4 * q + e < n) atomicAdd(&hist[bin_of(v[e])], 1u);
  }
}

// One histogram pass over the keys in every warp's segment (S.cnt[w] <= kSegCap entries each): the digit
// of the entries that match `st`. Plain shared atomics, per-thread loops over 16-byte quads of entries
// (segments are 16-byte aligned: kSegCap * 4 bytes is a multiple of 16). Ends with a barrier.
template <int kThreads, bool kCleared = false>
__device__ inline void candidate_histogram(SampledSmem<kThreads>& S, const SelectState& st, SelectDigit dg) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  if constexpr (!kCleared) clear_histogram<kThreads>(S);
  const uint32_t n = S.cnt[warp];
  const uint4* key4 = reinterpret_cast<const uint4*>(S.bits + warp * kSegCap);
  const uint4* pos4 = reinterpret_cast<const uint4*>(S.pos + warp * kSegCap);
  const uint32_t mask = (1u << dg.width) - 1u;
  if (!dg.on_pos) {
    for (uint32_t q = lane; 4 * q < n; q += 32) {
      const uint4 k4 = key4[q];
      const uint32_t kk[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (4 * q + e < n && shr32(kk[e], st.kshift) == st.kprefix) atomicAdd(&S.hist[(kk[e] >> dg.shift) & mask], 1u);
    }
  } else {
    for (uint32_t q = lane; 4 * q < n; q += 32) {
      const uint4 k4 = key4[q], p4 = pos4[q];
      const uint32_t kk[4] = {k4.x, k4.y, k4.z, k4.w}, pp[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint32_t rp = 0x7fffffffu - pp[e];
        if (4 * q + e < n && st.matches(kk[e], rp)) atomicAdd(&S.hist[(rp >> dg.shift) & mask], 1u);
      }
    }
  }
  __syncthreads();
}

// candidate_histogram for a key digit, lean (TopkParams::lean_select; the default since 26d4201). The first digit
// (no prefix fixed yet: every entry matches) counts the whole quads of a segment without a test or a branch
// per entry (ptxas puts a branch around every conditional shared atomic); later digits match the fixed prefix
// by key - lo <= span (one subtraction and one compare instead of the guarded shift and compare). The same
// histogram as candidate_histogram.
template <int kThreads, bool kCleared = false>
__device__ inline void candidate_histogram_lean(SampledSmem<kThreads>& S, const SelectState& st, SelectDigit dg) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  if constexpr (!kCleared) clear_histogram<kThreads>(S);
  const uint32_t n = S.cnt[warp];
  const uint4* key4 = reinterpret_cast<const uint4*>(S.bits + warp * kSegCap);
  const uint32_t mask = (1u << dg.width) - 1u;
  if (st.kshift >= 32) {  // block-uniform
    for (uint32_t q = lane; 4 * q < n; q += 32) {
      const uint4 k4 = key4[q];
      const uint32_t kk[4] = {k4.x, k4.y, k4.z, k4.w};
      count_quad(S.hist, kk, q, n, [&](uint32_t k) { return (k >> dg.shift) & mask; });
    }
  } else {
    const uint32_t lo = st.kprefix << st.kshift;   // the prefix's lowest key
    const uint32_t span = (1u << st.kshift) - 1u;  // its keys: lo .. lo + span
    for (uint32_t q = lane; 4 * q < n; q += 32) {
      const uint4 k4 = key4[q];
      const uint32_t kk[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (4 * q + e < n && kk[e] - lo <= span) atomicAdd(&S.hist[(kk[e] >> dg.shift) & mask], 1u);
    }
  }
  __syncthreads();
}

// The candidates' first digit relative to the sample's threshold (TopkParams::offset_digit; the
// default since 26d4201): every candidate of the sampled regime has key >= t, so bin min((key >> 16) - (t >> 16), 4095)
// is monotone in the key and, below the top bin, a 16-bit key prefix: t >> 16 plus the bin. Candidates sit
// just above t, where the fixed top-12-bit digit puts most of them in a handful of bins (an octave of the
// float is 8 bins: shared-atomic contention, and a second pass over hundreds of matches); here 4095 bins
// of 2^16 keys each span 2^28 keys (> 30 octaves) above t.
constexpr int kOffsetShift = 16;
template <int kThreads, bool kCleared = false>
__device__ inline void candidate_histogram_offset(SampledSmem<kThreads>& S, uint32_t base) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  if constexpr (!kCleared) clear_histogram<kThreads>(S);
  const uint32_t n = S.cnt[warp];
  const uint4* key4 = reinterpret_cast<const uint4*>(S.bits + warp * kSegCap);
  for (uint32_t q = lane; 4 * q < n; q += 32) {
    const uint4 k4 = key4[q];
    const uint32_t kk[4] = {k4.x, k4.y, k4.z, k4.w};
    uint32_t d[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) d[e] = min((kk[e] >> kOffsetShift) - base, uint32_t(kBins - 1));
    count_quad(S.hist, d, q, n, [](uint32_t b) { return b; });
  }
  __syncthreads();
}

// The digits after the offset digit (a 16-bit key prefix fixed): key bits 4..15, 0..3, then the positions.
__device__ __forceinline__ SelectDigit select_digit_after_offset(int pass) {
  switch (pass) {
    case 0: return {false, 4, 12};
    case 1: return {false, 0, 4};
    case 2: return {true, 19, 12};
    case 3: return {true, 7, 12};
    default: return {true, 0, 7};
  }
}

// Radix select over the segments' keys (positions when `with_pos`): the state whose at_or_above() holds for
// exactly `need` entries (with_pos), or, for the sample (!with_pos), a key prefix holding at least `need`
// entries and at most need / 2 more (or the exact key). Every thread calls it; ends after a barrier.
// lean (block-uniform): the key digits' histograms by candidate_histogram_lean (the same state results).
// floor_key (block-uniform, with_pos only; 0: none): every entry's key is >= it, and the first digit is the
// offset digit (candidate_histogram_offset); a k-th entry in its top bin restarts from the standard digits.
// Either way the same entries are at_or_above() the result.
// offset_hist_ready (block-uniform, with floor_key only): S.hist already holds the offset digit's histogram of the
// segments (the streaming filter's fused count), so its pass starts at find_bin.
// kCleared (the streaming kernel): S.hist is all zeros on entry and is left so (find_bin<kThreads, true> clears it):
// the passes count without a clearing pass and its barrier.
// kBinList (Tuning::bin_list, session 8, opt-in): after the offset digit, a k-th bin of at most kBinListCap entries is
// resolved by select_in_bin (2 barriers, ties on the key by position included) instead of the key / position passes
// (4 barriers each); S.hist is then left dirty (only the emit's staging writes it after this select).
template <int kThreads>
__device__ inline SelectState select_in_bin(SampledSmem<kThreads>& S, uint32_t prefix16, uint32_t need);
constexpr uint32_t kBinListCap = 256;  // entries of the k-th offset bin resolved by select_in_bin
template <int kThreads, bool kCleared = false, bool kBinList = false>
__device__ inline SelectState radix_select_smem(SampledSmem<kThreads>& S, uint32_t need, bool with_pos,
                                                bool lean = false, uint32_t floor_key = 0,
                                                bool offset_hist_ready = false) {
  SelectState st;
  const uint32_t r = need;
  bool after_offset = false;
  if (floor_key != 0) {
    const uint32_t base = floor_key >> kOffsetShift;
    if (!offset_hist_ready) candidate_histogram_offset<kThreads, kCleared>(S, base);
    const BinPick pick = find_bin<kThreads, kCleared>(S.hist, need, S.warp[0], &S.pick);
    if (pick.digit < uint32_t(kBins - 1)) {  // else the k-th is above the digit's range: the standard passes
      need -= pick.above;
      st.kprefix = base + pick.digit;
      st.kshift = kOffsetShift;
      if (pick.count == need) return st;
      if constexpr (kBinList) {
        if (with_pos && pick.count <= kBinListCap) return select_in_bin<kThreads>(S, st.kprefix, need);  // uniform
      }
      after_offset = true;
    }
  }
  for (int pass = 0; pass < (after_offset ? 5 : with_pos ? 6 : 3); ++pass) {
    const SelectDigit dg = after_offset ? select_digit_after_offset(pass) : select_digit(pass);
    if (lean && !dg.on_pos) candidate_histogram_lean<kThreads, kCleared>(S, st, dg);
    else candidate_histogram<kThreads, kCleared>(S, st, dg);
    const BinPick pick = find_bin<kThreads, kCleared>(S.hist, need, S.warp[0], &S.pick);
    need -= pick.above;
    if (!dg.on_pos) {
      st.kprefix = (st.kprefix << (st.kshift - dg.shift)) | pick.digit;
      st.kshift = dg.shift;
    } else {
      st.pprefix = (st.pprefix << (st.pshift - dg.shift)) | pick.digit;
      st.pshift = dg.shift;
    }
    if (pick.count == need) break;                // the bin is taken whole (always by the last pass with positions)
    if (!with_pos && pick.count <= r / 2) break;  // the sample: a thin bin is precise enough
  }
  return st;
}

// The k-th offset bin (key prefix `prefix16` = key >> 16, count <= kBinListCap, `need` of them wanted) resolved in two
// barriers: every warp appends its segment's entries of the bin as (key, rp = 2^31 - 1 - position) pairs to a
// list in S.hist (slots by one shared atomic a warp and 128 entries on a counter, S.warp[1][0], zeroed by the kernel:
// the list's order is not deterministic, the ranks are), a barrier; a group of lanes ranks each entry among the list
// ((key, rp) pairs are distinct), the one of rank need - 1 (the need-th largest) writes the state's pivot, a barrier.
// The result selects exactly the same entries as the passes it replaces: key > the pivot's, or equal and rp >= the
// pivot's; by the key alone (pshift 31: the lean emit) when no entry of the pivot's key ranks below it.
template <int kThreads>
__device__ inline SelectState select_in_bin(SampledSmem<kThreads>& S, uint32_t prefix16, uint32_t need) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  uint32_t* list_n = &S.warp[1][0];  // 0 on entry (the kernel zeroed it; nothing else writes it before the emit)
  uint2* list = reinterpret_cast<uint2*>(S.hist);  // find_bin read the histogram before its last barrier
  const uint32_t n = S.cnt[warp];
  const uint4* key4 = reinterpret_cast<const uint4*>(S.bits + warp * kSegCap);
  const uint4* pos4 = reinterpret_cast<const uint4*>(S.pos + warp * kSegCap);
  const unsigned lanes_below = (1u << lane) - 1u;
  for (uint32_t base = 0; base < n; base += 128) {  // warp-uniform trips: one shared atomic a warp and trip
    const uint32_t q = base / 4 + uint32_t(lane);
    uint32_t m = 0;  // bit e: entry 4q + e is in the bin
    uint4 k4 = make_uint4(0u, 0u, 0u, 0u);
    if (4 * q < n) {
      k4 = key4[q];
      const uint32_t kk[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) m |= uint32_t(4 * q + e < n && (kk[e] >> kOffsetShift) == prefix16) << e;
    }
    const uint32_t cl = uint32_t(__popc(m));  // 0..4: three bit planes
    const unsigned b0 = __ballot_sync(ptx::kFullMask, cl & 1u), b1 = __ballot_sync(ptx::kFullMask, cl & 2u);
    const unsigned b2 = __ballot_sync(ptx::kFullMask, cl & 4u);
    const uint32_t total = uint32_t(__popc(b0)) + 2u * uint32_t(__popc(b1)) + 4u * uint32_t(__popc(b2));
    if (total == 0) continue;  // warp-uniform
    uint32_t slot = 0;
    if (lane == 0) slot = atomicAdd(list_n, total);
    slot = __shfl_sync(ptx::kFullMask, slot, 0) + uint32_t(__popc(b0 & lanes_below)) +
           2u * uint32_t(__popc(b1 & lanes_below)) + 4u * uint32_t(__popc(b2 & lanes_below));
    if (m == 0) continue;
    const uint4 p4 = pos4[q];
    const uint32_t kk[4] = {k4.x, k4.y, k4.z, k4.w}, pp[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if ((m >> e) & 1u) list[slot++] = make_uint2(kk[e], 0x7fffffffu - pp[e]);
  }
  __syncthreads();
  const uint32_t c = *list_n;  // = the bin's count (<= kBinListCap)
  // Entry i is ranked by the g = 32 .. 4 lanes tid / g == i (the widest group that gives every entry one: the scan
  // is c / g entries a lane), their counts summed over the group by shuffles.
  const uint32_t g = c <= 32 ? 32u : c <= 64 ? 16u : c <= 128 ? 8u : 4u;  // block-uniform
  const uint32_t i = uint32_t(tid) / g, sub = uint32_t(tid) % g;
  uint2 me = make_uint2(0u, 0u);
  uint32_t rank = 0, tie_below = 0;  // entries ranked above entry i; entries of its key ranked below it
  if (i < c) {
    me = list[i];
    for (uint32_t j = sub; j < c; j += g) {
      const uint2 o = list[j];
      rank += uint32_t(o.x > me.x || (o.x == me.x && o.y > me.y));
      tie_below += uint32_t(o.x == me.x && o.y < me.y);
    }
  }
#pragma unroll
  for (uint32_t o = 1; o < 32; o <<= 1) {  // the group's sums (lanes of a group: one warp, g-aligned)
    if (o < g) {                           // block-uniform
      rank += __shfl_xor_sync(ptx::kFullMask, rank, int(o));
      tie_below += __shfl_xor_sync(ptx::kFullMask, tie_below, int(o));
    }
  }
  if (i < c && sub == 0 && rank == need - 1) S.pick = BinPick{me.x, me.y, tie_below};  // the pivot: one thread
  __syncthreads();
  const BinPick pv = S.pick;
  SelectState st;
  st.kprefix = pv.digit;
  st.kshift = 0;
  if (pv.count != 0) {  // entries of the pivot's key below it: the pivot's rp decides among them
    st.pprefix = pv.above;
    st.pshift = 0;
  }
  return st;
}

// Converts each warp's segment from raw float bits to keys, in place (every entry is read by its own warp).
template <int kThreads>
__device__ inline void segment_bits_to_keys(SampledSmem<kThreads>& S) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t n = S.cnt[warp];
  uint4* b4 = reinterpret_cast<uint4*>(S.bits + warp * kSegCap);
  for (uint32_t q = lane; 4 * q < n; q += 32) {  // entries past n in the last quad: converted, never read
    uint4 v = b4[q];
    v.x = topk_key(__uint_as_float(v.x)), v.y = topk_key(__uint_as_float(v.y));
    v.z = topk_key(__uint_as_float(v.z)), v.w = topk_key(__uint_as_float(v.w));
    b4[q] = v;
  }
  __syncwarp();
}

// The float f with key(x) >= t <=> x >= f for every non-NaN x (t > 0): -inf up to key(-inf); a NaN
// (nothing passes) above key(+inf). -0 for t = 0x7fffffff, which no float has (-0 maps to +0's key).
__device__ __forceinline__ float key_threshold_float(uint32_t t) {
  if (t <= 0x007fffffu) return __uint_as_float(0xff800000u);
  return __uint_as_float(t >= 0x80000000u ? t ^ 0x80000000u : ~t);
}

__device__ __forceinline__ uint32_t warp_sum(uint32_t v) { return __reduce_add_sync(ptx::kFullMask, v); }

// ---- L2 prefetch of the filter's steps (TopkParams::l2_prefetch; the default since 26d4201)
// A warp's steps are first, first + stride, ... (128 values = 512 bytes each); lane l prefetches the 128-byte
// line l % 4 of the (l / 4)-th of the n <= 8 steps from `first` (a step that starts mid-line leaves its last
// partial line to the demand load, or to the next step's prefetch). No data comes back: nothing waits on it.
constexpr int kPrefetchSteps = 8;  // steps per warp prefetched before the threshold is known (4 KB a warp)
__device__ __forceinline__ void prefetch_steps_l2(const float4* q4, int32_t nq, int32_t first, int32_t stride, int n) {
  const int lane = threadIdx.x & 31;
  if ((lane >> 2) >= n) return;
  const int32_t q = (first + (lane >> 2) * stride) * 32 + (lane & 3) * 8;  // 8 quads: one 128-byte line
  if (q < nq) asm volatile("prefetch.global.L2 [%0];" ::"l"(__cvta_generic_to_global(q4 + q)));
}

// ---- the streaming filter (kStream kernels: topk_op::Tuning::stream, session 8)
// Each thread keeps kStreamRing 16-byte cp.async copies of its own next quads in flight in a ring after
// SampledSmem ([kStreamRing][kThreads] quads: lane-contiguous, no bank conflict); the filter takes two quads (8 values)
// a turn and refills their slots with the quads two turns ahead. The first two turns are issued right after the
// sample's loads, so they land while the threshold is found. A thread reads only the slots it filled itself
// (cp.async.wait_group makes them visible to it): no barrier.
constexpr int kStreamRing = 4;  // = topk_op::kStreamRingQuads (topk.cu static_asserts the shared-memory size)

// A non-coherent 16-byte global load that the compiler neither drops nor speculates out of its branch.
__device__ __forceinline__ float4 ldg_f4_volatile(const float4* p) {
  float4 v;
  asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(__cvta_generic_to_global(p)));
  return v;
}

// The offset digit's bin of a candidate key (candidate_histogram_offset's: key >= the threshold, base = t >> 16).
__device__ __forceinline__ uint32_t offset_bin(uint32_t key, uint32_t base) {
  return min((key >> kOffsetShift) - base, uint32_t(kBins - 1));
}

// ---- thread-block clusters (sm_90; compiled out below, where every launch is one CTA per row)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr bool kHaveClusters = true;
__device__ __forceinline__ uint32_t cluster_ctas() {
  uint32_t n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
// Every thread of every CTA of the cluster: shared-memory writes before it are visible to all after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The generic address of the same shared-memory location in CTA `rank` of the cluster (DSMEM).
template <typename T>
__device__ __forceinline__ T* in_rank(T* p, uint32_t rank) {
  uint64_t out;
  asm volatile("mapa.u64 %0, %1, %2;" : "=l"(out) : "l"(reinterpret_cast<uint64_t>(p)), "r"(rank));
  return reinterpret_cast<T*>(out);
}
#else
constexpr bool kHaveClusters = false;
__device__ __forceinline__ uint32_t cluster_ctas() { return 1u; }
__device__ __forceinline__ uint32_t cluster_rank() { return 0u; }
__device__ __forceinline__ void cluster_sync() {}
template <typename T>
__device__ __forceinline__ T* in_rank(T* p, uint32_t) {
  return p;
}
#endif

// Cluster rows, after every CTA filtered its share into its own segments (S.cnt set, block barrier done):
// CTA r's warp-w entries go to CTA 0's warp-w segment after those of ranks < r, unless some warp-w total
// (over the ranks) exceeds kSegCap: then nothing moves, and the total returned (this warp's entries over
// the ranks, CTA 0's new S.cnt[warp]) shows the overflow, which sends the row to the exact fallback.
// Every CTA calls it (warp counts <= 32 ranks); it ends after the second cluster barrier, after which no
// CTA touches another's shared memory.
template <int kThreads>
__device__ inline uint32_t gather_into_rank0(SampledSmem<kThreads>& S, uint32_t rank, uint32_t nranks) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  cluster_sync();  // A: every CTA's S.cnt is final
  const uint32_t mine = S.cnt[warp];
  const uint32_t c = uint32_t(lane) < nranks ? *in_rank(&S.cnt[warp], uint32_t(lane)) : 0u;
  const uint32_t total_w = warp_sum(c);
  const uint32_t before = warp_sum(uint32_t(lane) < rank ? c : 0u);   // entries of the lower ranks
  const bool fits = __syncthreads_and(total_w <= uint32_t(kSegCap));  // block-uniform, equal in every rank
  if (fits && rank != 0) {
    uint32_t* dst_bits = in_rank(S.bits + warp * kSegCap + before, 0u);
    uint32_t* dst_pos = in_rank(S.pos + warp * kSegCap + before, 0u);
    const uint32_t* src_bits = S.bits + warp * kSegCap;
    const uint32_t* src_pos = S.pos + warp * kSegCap;
    for (uint32_t i = lane; i < mine; i += 32) {
      dst_bits[i] = src_bits[i];
      dst_pos[i] = src_pos[i];
    }
  }
  cluster_sync();  // B: the copies landed in CTA 0; the counts were read
  return total_w;
}

// Emit step 4's k outputs: each selected entry's value goes to its slot (the warps' prefix plus the lane
// order), directly to global memory or (contiguous rows) staged in S.hist, then written by 16-byte stores.
// kKeepMasks (topk_op::Emit::kept_masks; its lean form is the default): the count pass keeps each lane's 4-bit masks
// in one register and the store pass reuses them (the recount tests every quad twice), reading only the
// positions of quads with a selected entry; a select that ended on key bits tests the key alone.
template <int kThreads, bool kKeepMasks>
__device__ inline void emit_selected(const TopkParams& p, int64_t row, const RowView& rv, SampledSmem<kThreads>& S,
                                     const SelectState& st) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned lanes_below = (1u << lane) - 1u;
  const int k = p.k;
  const uint32_t n = S.cnt[warp];
  const uint4* key4 = reinterpret_cast<const uint4*>(S.bits + warp * kSegCap);
  const uint4* pos4 = reinterpret_cast<const uint4*>(S.pos + warp * kSegCap);
  // Staging: output i at S.hist[i + pad], so outputs from the first 16-byte boundary on are read as quads.
  const uint32_t out_misalign = (uint32_t(reinterpret_cast<uintptr_t>(rv.out)) & 15u) >> 2;  // int32 aligned
  const uint32_t head = (4u - out_misalign) & 3u;  // outputs before the first 16-byte boundary
  const uint32_t pad = (4u - head) & 3u;
  const bool staged = p.out_col_stride == 1 && k + 3 <= kBins && !p.direct_emit;
  // A select that ended on key bits (no position pass: pshift 31, pprefix 0) selects by the key alone:
  // at_or_above(key, rp) is then shr32(key, kshift) >= kprefix for every rp (used by the kKeepMasks emit).
  const bool key_only = kKeepMasks && st.pshift == 31;
  // The lean emit (TopkParams::lean_emit, topk_op::Emit::kept_masks_lean; the default since 26d4201), where the select
  // ended on key bits and the outputs are staged positions (+ the ragged offset): the count pass compares each
  // key with the whole threshold key (one compare, no shift), and the store pass writes each selected entry
  // by a predicated store at its slot (the count of the quad's lower selected entries), with no branch and no
  // transform switch per entry. The same slots and values as the kept-masks emit: the same bits out.
  const bool lean = kKeepMasks && p.lean_emit && key_only && staged &&
                    (p.transform == int(TopkTransform::none) || p.transform == int(TopkTransform::ragged));
  const uint32_t lean_thr = st.kshift >= 32 ? 0u : st.kprefix << st.kshift;  // key >= it <=> at_or_above
  const uint32_t lean_add =
      lean && p.transform == int(TopkTransform::ragged) ? uint32_t(p.offsets[row * p.offset_stride]) : 0u;
  // The selected entries of quad q among its first n - 4q: bit e for entry 4q + e (p4: the quad's positions,
  // unless key_only).
  auto selected4 = [&](uint32_t q, uint4& p4) {
    uint32_t m = 0;
    if (4 * q < n) {
      const uint4 k4 = key4[q];
      if (lean) {  // the threshold key; then the entries past n cut off
        m = uint32_t(k4.x >= lean_thr) | uint32_t(k4.y >= lean_thr) << 1 | uint32_t(k4.z >= lean_thr) << 2 |
            uint32_t(k4.w >= lean_thr) << 3;
        return 4 * q + 4 <= n ? m : m & ((1u << (n - 4 * q)) - 1u);
      }
      if (key_only) {
        const uint32_t kk[4] = {k4.x, k4.y, k4.z, k4.w};
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (4 * q + e < n && shr32(kk[e], st.kshift) >= st.kprefix) m |= 1u << e;
        return m;
      }
      p4 = pos4[q];
      const uint32_t kk[4] = {k4.x, k4.y, k4.z, k4.w}, pp[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (4 * q + e < n && st.at_or_above(kk[e], 0x7fffffffu - pp[e])) m |= 1u << e;
    }
    return m;
  };
  // Count pass. kKeepMasks: lane l's quads l + 32 t (t < 5: n <= kSegCap) keep their masks at bits 4 t.
  constexpr int kQuadTrips = (kSegCap + 127) / 128;
  static_assert(kQuadTrips * 4 <= 32, "a lane's masks fit one register");
  uint32_t n_sel = 0, masks = 0;
  if constexpr (kKeepMasks) {
#pragma unroll
    for (int t = 0; t < kQuadTrips; ++t) {
      uint4 p4;
      const uint32_t m = selected4(uint32_t(lane + 32 * t), p4);
      masks |= m << (4 * t);
      n_sel += uint32_t(__popc(m));
    }
  } else {
    for (uint32_t q = lane; 4 * q < n; q += 32) {
      uint4 p4;
      n_sel += uint32_t(__popc(selected4(q, p4)));
    }
  }
  n_sel = warp_sum(n_sel);
  if (lane == 0) S.warp[1][warp] = n_sel;
  __syncthreads();
  uint32_t slot0 = warp_sum(lane < warp ? S.warp[1][lane] : 0u);  // selected in lower warps' segments
  for (uint32_t base = 0, t = 0; base < n; base += 128, ++t) {    // warp-uniform trip count
    uint4 p4 = make_uint4(0u, 0u, 0u, 0u);
    uint32_t m;
    if constexpr (kKeepMasks) {
      m = (masks >> (4 * t)) & 15u;
      if (m) p4 = pos4[base / 4 + lane];  // only quads with a selected entry read their positions
    } else {
      m = selected4(base / 4 + lane, p4);
    }
    const uint32_t c = uint32_t(__popc(m));  // 0..4: three bit planes
    const unsigned b0 = __ballot_sync(ptx::kFullMask, c & 1u), b1 = __ballot_sync(ptx::kFullMask, c & 2u);
    const unsigned b2 = __ballot_sync(ptx::kFullMask, c & 4u);
    uint32_t slot = slot0 + uint32_t(__popc(b0 & lanes_below)) + 2u * uint32_t(__popc(b1 & lanes_below)) +
                    4u * uint32_t(__popc(b2 & lanes_below));
    slot0 += uint32_t(__popc(b0)) + 2u * uint32_t(__popc(b1)) + 4u * uint32_t(__popc(b2));
    const uint32_t pp[4] = {p4.x, p4.y, p4.z, p4.w};
    if (lean) {  // warp-uniform; slot + (selected entries of the quad below e); k selected in all: slot < k
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const uint32_t se = slot + uint32_t(__popc(m & ((1u << e) - 1u)));
        if (((m >> e) & 1u) && se < uint32_t(k)) S.hist[se + pad] = pp[e] + lean_add;
      }
      continue;
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if ((m >> e) & 1u) {
        if (slot < uint32_t(k)) {
          const int32_t v = value_of(p, row, rv.request, int64_t(pp[e]));
          if (staged) S.hist[slot + pad] = uint32_t(v);
          else rv.out[int64_t(slot) * p.out_col_stride] = v;
        }
        ++slot;
      }
    }
  }
  if (!staged) return;  // block-uniform
  __syncthreads();
  // [0, h) scalar, [h, h + 4 nq) 16-byte stores from 16-byte aligned staging, [h + 4 nq, k) scalar
  const uint32_t h = head < uint32_t(k) ? head : uint32_t(k);
  const uint32_t nq = (uint32_t(k) - h) >> 2;
  int32_t* o = rv.out;
  if (uint32_t(tid) < h) o[tid] = int32_t(S.hist[tid + pad]);
  const uint4* src4 = reinterpret_cast<const uint4*>(S.hist + h + pad);
  uint4* dst4 = reinterpret_cast<uint4*>(o + h);
  for (uint32_t q = tid; q < nq; q += kThreads) dst4[q] = src4[q];
  const uint32_t t0 = h + 4 * nq + uint32_t(tid);
  if (t0 < uint32_t(k)) o[t0] = int32_t(S.hist[t0 + pad]);
}

// One row per CTA (grid = rows), or one row per cluster of nranks CTAs (grid = rows * nranks, sm_90).
// kKeepMasks: the emit's variant (emit_selected). kStream: the streaming filter (above; its dynamic shared memory
// is SampledSmem plus the ring; each warp converts its candidates to keys after its filter; the selects keep the
// histogram clear); no L2 prefetch.
template <int kThreads, int kUnroll, bool kKeepMasks, bool kStream = false, bool kBinList = false>
__global__ void __launch_bounds__(kThreads, kThreads <= 256 ? 4 : 1)
    topk_sampled_kernel(const __grid_constant__ TopkParams p) {  // 256: 4 CTAs (50 KB) per SM
  constexpr int kWarps = kThreads / 32;
  static_assert(kUnroll % 2 == 0, "values are compacted 8 per lane");
  extern __shared__ uint4 smem_raw[];
  SampledSmem<kThreads>& S = *reinterpret_cast<SampledSmem<kThreads>*>(smem_raw);
  static_assert(sizeof(SampledSmem<kThreads>) % 16 == 0, "the ring starts 16-byte aligned");
  uint4* const ring = smem_raw + sizeof(SampledSmem<kThreads>) / 16;  // kStream: [kStreamRing][kThreads]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned lanes_below = (1u << lane) - 1u;
  const uint32_t nranks = cluster_ctas(), rank = cluster_rank();  // 1, 0 without a cluster launch
  const int64_t row = blockIdx.x / nranks;
  // kStream, rows without row starts (they begin at scores + row * stride) in the sampled regime's width: the
  // sample's load is issued for a whole row (len = width) before the row's length has arrived from memory (one
  // round trip earlier); a row of another length reloads it (the sample's positions depend on the length). (The
  // ring's first turns are issued once the length is known: issued here, ptxas put them ahead of the sample's load.)
  bool spec = false;  // kStream: the speculative sample load was issued
  float4 spec_v = make_float4(0.f, 0.f, 0.f, 0.f);
  int32_t spec_nq = 0;
  if constexpr (kStream) {
    static_assert(kSampleChunks == kWarps, "one sample chunk per warp (1024 threads)");
    if (p.row_starts == nullptr && p.width > kExactMax) {  // grid-uniform
      spec = true;
      const float* s0 = p.scores + row * p.score_row_stride;
      const int32_t h0 = int32_t(((16u - (uint32_t(reinterpret_cast<uintptr_t>(s0)) & 15u)) & 15u) >> 2);
      spec_nq = int32_t((p.width - h0) >> 2);  // >= 1023
      const int32_t q0 = int32_t(int64_t(warp) * (spec_nq - kSampleQuads) / (kSampleChunks - 1));
      spec_v = __ldg(reinterpret_cast<const float4*>(s0 + h0) + q0 + lane);
    }
  }
  const RowView rv = row_view(p, row);
  const int64_t len = rv.len;
  const int k = p.k;
  if (len <= k) {
    if (rank == 0) emit_identity<kThreads>(p, row, rv);
    return;
  }
  // Rows loaded whole are CTA 0's alone (every CTA of a cluster returns here or below together: the row
  // decides, and it is the same row).
  if (len <= kExactMax && rank != 0) return;
  if constexpr (kBinList) {  // select_in_bin's counter (seen after the barriers below)
    if (tid == 0) S.warp[1][0] = 0u;
  }
  if constexpr (kStream) {  // the selects' histogram starts clear (seen after the first barrier below) and stays so
    static_assert(kBins == 4 * kThreads, "one uint4 of the histogram per thread");
    reinterpret_cast<uint4*>(S.hist)[tid] = make_uint4(0u, 0u, 0u, 0u);
  }
  const float* s = rv.s;
  if (p.debug_stop == 1) return;

  // The row as 16-byte quads: [0, head) scalar, [head, head + 4 nq) quads, [tail, len) scalar.
  int32_t head = int32_t(((16u - (uint32_t(reinterpret_cast<uintptr_t>(s)) & 15u)) & 15u) >> 2);
  if (head > len) head = int32_t(len);
  const int32_t nq = int32_t((len - head) >> 2);
  const int32_t tail = head + 4 * nq;
  const float4* q4 = reinterpret_cast<const float4*>(s + head);
  const int32_t steps = (nq + 31) >> 5;  // 32 quads (128 values) per step; warp w takes steps w, w + kWarps, ...
  uint32_t* seg_bits = S.bits + warp * kSegCap;
  uint32_t* seg_pos = S.pos + warp * kSegCap;
  uint32_t cnt = 0;                // warp-uniform: entries of this warp's segment
  uint32_t cand_floor = 0;         // the sampled regime's threshold key t (> 0: every candidate's key is >= it)
  bool offset_hist_ready = false;  // kStream, fused count: S.hist holds the offset digit's histogram

  // Appends the lanes' flagged values (warp-synchronous), in lane order.
  auto push1 = [&](bool cand, float x, uint32_t pos) {
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

  if (len <= kExactMax) {
    // ---- exact regime: every value is a candidate, stored densely at step * 128 + 4 * lane + component.
    // Steps per warp <= 4 (<= 32 steps over >= 8 warps): at most 512 entries + the extras of warp 0.
    constexpr int kExactSteps = (kExactMax / 128 + kWarps - 1) / kWarps;  // 4 at 256 threads, 1 at 1024
    float4 v[kExactSteps];
#pragma unroll
    for (int j = 0; j < kExactSteps; ++j) {  // every load in flight before the first store
      const int32_t q = (warp + j * kWarps) * 32 + lane;
      v[j] = q < nq ? __ldg(q4 + q) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int j = 0; j < kExactSteps; ++j) {
      if (warp + j * kWarps >= steps) break;  // warp-uniform
      const int32_t q = (warp + j * kWarps) * 32 + lane;
      const bool valid = q < nq;
      const uint32_t pos = uint32_t(head + 4 * q);
      reinterpret_cast<uint4*>(seg_bits + j * 128)[lane] =
          valid ? make_uint4(__float_as_uint(v[j].x), __float_as_uint(v[j].y), __float_as_uint(v[j].z),
                             __float_as_uint(v[j].w))
                : make_uint4(kSentinelBits, kSentinelBits, kSentinelBits, kSentinelBits);
      reinterpret_cast<uint4*>(seg_pos + j * 128)[lane] =
          valid ? make_uint4(pos, pos + 1, pos + 2, pos + 3)
                : make_uint4(kSentinelPos, kSentinelPos, kSentinelPos, kSentinelPos);
      cnt += 128u;
    }
    if (warp == 0) {  // the scalar head and tail: lanes 0..2 and 8..10
      int32_t jj = -1;
      if (lane < head) jj = lane;
      else if (lane >= 8 && tail + (lane - 8) < len) jj = tail + (lane - 8);
      push1(jj >= 0, jj >= 0 ? __ldg(s + jj) : 0.f, uint32_t(jj));
    }
    if (p.debug_stop == 3) return;
  } else {
    // ---- 1. the sample and its threshold t (every CTA of a cluster the same). Here nq >= 1023: the
    // chunks lie inside the quads.
    constexpr int kChunksPerWarp = kSampleChunks / kWarps;
    static_assert(kSampleChunks % kWarps == 0 && kChunksPerWarp * kSampleQuads * 4 <= kSegCap, "sample layout");
    float4 v[kChunksPerWarp];
    const bool spec_hit = kStream && spec && nq == spec_nq;  // block-uniform: the speculative sample is this row's
    if (!spec_hit) {
#pragma unroll
      for (int c = 0; c < kChunksPerWarp; ++c) {
        const int chunk = warp + c * kWarps;
        const int32_t q0 = int32_t(int64_t(chunk) * (nq - kSampleQuads) / (kSampleChunks - 1));
        // (kStream: a volatile load, so that ptxas keeps the branch: it had loaded unconditionally, and the hit
        // path then waited for that load)
        if constexpr (kStream) v[c] = ldg_f4_volatile(q4 + q0 + lane);
        else v[c] = __ldg(q4 + q0 + lane);
      }
    }
    const int32_t wstride = int32_t(nranks) * kWarps;  // steps between a warp's consecutive steps
    const int32_t first_step = int32_t(rank) * kWarps + warp;
    // The streaming filter's ring slot `slot` <- this lane's quad of step `step` (none past the row).
    const auto ring_fill = [&](int32_t step, int slot) {
      const int32_t q = step * 32 + lane;
      if (q < nq) ptx::cp_async_16(ptx::smem_addr(ring + slot * kThreads + tid), q4 + q);
    };
    if constexpr (kStream) {  // turns 0 and 1 (the warp's steps 0..3) stream in while the threshold is found
      static_assert(kStreamRing == 4, "two turns of two quads");
      ring_fill(first_step, 0), ring_fill(first_step + wstride, 1), ptx::cp_async_commit();
      ring_fill(first_step + 2 * wstride, 2), ring_fill(first_step + 3 * wstride, 3), ptx::cp_async_commit();
      // (A row of another length: ptxas converts the sample's keys after the first turn's copies, so the second
      // turn waits for the reloaded sample; a whole row's sample landed with its length. Checked in the SASS.)
      if (spec_hit) v[0] = spec_v;
    } else {
      // The row streams into L2 while the threshold is found. After the sample's loads, so that they do not queue
      // behind the prefetches (ptxas issues it once they land, after their key conversion: checked in the SASS).
      if (p.l2_prefetch) prefetch_steps_l2(q4, nq, first_step, wstride, kPrefetchSteps);
    }
#pragma unroll
    for (int c = 0; c < kChunksPerWarp; ++c)  // keys directly: the sample is only ranked
      reinterpret_cast<uint4*>(seg_bits + c * 128)[lane] =
          make_uint4(topk_key(v[c].x), topk_key(v[c].y), topk_key(v[c].z), topk_key(v[c].w));
    if (lane == 0) S.cnt[warp] = kChunksPerWarp * 128;
    __syncthreads();
    if (p.debug_stop == 2) {
      if constexpr (kStream) ptx::cp_async_wait<0>();
      return;
    }
    uint32_t t = 0;
    const float ks = float(k) * float(kSampleSize) / float(4 * nq);
    const float rf = ks + 5.f * sqrtf(ks) + 16.f;
    if (rf < float(kSampleSize)) {
      const SelectState st = radix_select_smem<kThreads, kStream>(S, uint32_t(rf), false, p.lean_select != 0);
      t = st.kshift >= 32 ? 0u : st.kprefix << st.kshift;  // the lower edge of the chosen key bin
    }
    // Everything read from the sample was read before find_bin's last barrier: the segments are free.
    if (p.debug_stop == 3) {
      if constexpr (kStream) ptx::cp_async_wait<0>();
      return;
    }

    // ---- 2. filter: values x >= tf (key >= t; t == 0: everything, NaN included) into the warp's segment.
    // Global warp gw = rank * kWarps + warp of the cluster takes steps gw, gw + nranks * kWarps, ...
    const bool take_all = t == 0;
    cand_floor = t;
    const float tf = key_threshold_float(t);
    // The candidate flags of a lane's 8 values (quads qa, qb; none past nq), and the warp's ballots of the lanes'
    // counts (four bit planes).
    auto flag8 = [&](const float(&x)[8], int32_t qa, int32_t qb) {
      uint32_t m8 = 0;
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (take_all || x[e] >= tf) m8 |= 1u << e;
      if (qa >= nq) m8 &= 0xf0u;
      if (qb >= nq) m8 &= 0x0fu;
      return m8;
    };
    auto ballot8 = [&](uint32_t m8, unsigned(&b)[4]) {
      const uint32_t c = uint32_t(__popc(m8));  // 0..8
#pragma unroll
      for (int i = 0; i < 4; ++i) b[i] = __ballot_sync(ptx::kFullMask, c & (1u << i));
    };
    // Appends the flagged values of every lane (warp-synchronous, in lane order) after the warp's earlier ones.
    auto push8 = [&](const float(&x)[8], uint32_t m8, const unsigned(&b)[4], int32_t qa, int32_t qb) {
      uint32_t off = cnt + uint32_t(__popc(b[0] & lanes_below)) + 2u * uint32_t(__popc(b[1] & lanes_below)) +
                     4u * uint32_t(__popc(b[2] & lanes_below)) + 8u * uint32_t(__popc(b[3] & lanes_below));
      cnt += uint32_t(__popc(b[0])) + 2u * uint32_t(__popc(b[1])) + 4u * uint32_t(__popc(b[2])) +
             8u * uint32_t(__popc(b[3]));
      const uint32_t pa = uint32_t(head + 4 * qa), pb = uint32_t(head + 4 * qb);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if ((m8 >> e) & 1u) {
          if (off < uint32_t(kSegCap)) {
            seg_bits[off] = __float_as_uint(x[e]);
            seg_pos[off] = (e < 4 ? pa : pb) + uint32_t(e & 3);
          }
          ++off;
        }
      }
    };
    if (warp == 0 && rank == 0) {  // the scalar head and tail: lanes 0..2 and 8..10
      int32_t jj = -1;
      if (lane < head) jj = lane;
      else if (lane >= 8 && tail + (lane - 8) < len) jj = tail + (lane - 8);
      const float x = jj >= 0 ? __ldg(s + jj) : 0.f;
      push1(jj >= 0 && (take_all || x >= tf), x, uint32_t(jj));
    }
    if constexpr (kStream) {
      // Turn g: the warp's steps s0 = first_step + 2 g wstride and s0 + wstride, from ring slots 2 (g & 1) + {0, 1}.
      for (int32_t g = 0, s0 = first_step; s0 < steps; ++g, s0 += 2 * wstride) {
        ptx::cp_async_wait<1>();  // turn g landed (turn g + 1 may still be in flight)
        const int slot = (g & 1) * 2;
        const uint4 ra = ring[slot * kThreads + tid], rb = ring[(slot + 1) * kThreads + tid];
        const int32_t qa = s0 * 32 + lane, qb = qa + wstride * 32;
        const float x[8] = {__uint_as_float(ra.x), __uint_as_float(ra.y), __uint_as_float(ra.z), __uint_as_float(ra.w),
                            __uint_as_float(rb.x), __uint_as_float(rb.y), __uint_as_float(rb.z), __uint_as_float(rb.w)};
        const uint32_t m8 = flag8(x, qa, qb);
        unsigned b[4];
        ballot8(m8, b);
        // Refill the two slots just read with turn g + 2 (their values are in registers: the ballots used them;
        // the fence keeps the slots' loads above the copies).
        asm volatile("" ::: "memory");
        ring_fill(s0 + 4 * wstride, slot), ring_fill(s0 + 5 * wstride, slot + 1), ptx::cp_async_commit();
        if ((b[0] | b[1] | b[2] | b[3]) == 0) continue;
        push8(x, m8, b, qa, qb);
      }
      ptx::cp_async_wait<0>();  // no copy outlives the filter
      // Each warp, once its own filter is done (while others still stream): its segment's bits become keys and,
      // with the fused count (one CTA per row: a cluster's CTAs each hold a share; take_all has no offset digit),
      // their offset digits are counted into S.hist, which is clear (the kernel cleared it, the sample's select left
      // it so). The candidates' select then starts at the offset digit's find_bin. (In the filter's loop the key
      // and the count per candidate nearly doubled its instructions: counted in the SASS.)
      const bool fused = p.fused_count && p.offset_digit && nranks == 1 && !take_all;  // block-uniform
      const uint32_t obase = t >> kOffsetShift;
      offset_hist_ready = fused;
      __syncwarp();  // the warp's lanes wrote the segment's entries
      const uint32_t n = cnt < uint32_t(kSegCap) ? cnt : uint32_t(kSegCap);  // more: the fallback, unread
      uint4* b4 = reinterpret_cast<uint4*>(seg_bits);
      for (uint32_t q = lane; 4 * q < n; q += 32) {  // entries past n in the last quad: converted, never counted
        const uint4 b = b4[q];
        const uint32_t kk[4] = {topk_key(__uint_as_float(b.x)), topk_key(__uint_as_float(b.y)),
                                topk_key(__uint_as_float(b.z)), topk_key(__uint_as_float(b.w))};
        b4[q] = make_uint4(kk[0], kk[1], kk[2], kk[3]);
        if (fused) count_quad(S.hist, kk, q, n, [&](uint32_t key) { return offset_bin(key, obase); });
      }
      __syncwarp();
    } else {  // the default filter
      static_assert(kPrefetchSteps % kUnroll == 0 && kUnroll <= 8, "prefetched steps: whole iterations, 8 per warp");
      for (int32_t s0 = first_step; s0 < steps; s0 += wstride * kUnroll) {
        // kPrefetchSteps ahead: this iteration's steps were prefetched one or two iterations (or the threshold) ago.
        if (p.l2_prefetch) prefetch_steps_l2(q4, nq, s0 + kPrefetchSteps * wstride, wstride, kUnroll);
        float4 v4[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int32_t q = (s0 + u * wstride) * 32 + lane;
          v4[u] = q < nq ? __ldg(q4 + q) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int g = 0; g < kUnroll; g += 2) {  // 8 values per lane: two quads
          const int32_t qa = (s0 + g * wstride) * 32 + lane, qb = qa + wstride * 32;
          const float x[8] = {v4[g].x, v4[g].y, v4[g].z, v4[g].w, v4[g + 1].x, v4[g + 1].y, v4[g + 1].z, v4[g + 1].w};
          const uint32_t m8 = flag8(x, qa, qb);
          unsigned b[4];
          ballot8(m8, b);
          if ((b[0] | b[1] | b[2] | b[3]) == 0) continue;
          push8(x, m8, b, qa, qb);
        }
      }
    }
    if (kHaveClusters && nranks > 1) {  // cluster-uniform: the CTAs' candidates into CTA 0
      if (lane == 0) S.cnt[warp] = cnt;
      __syncthreads();
      cnt = gather_into_rank0<kThreads>(S, rank, nranks);  // CTA 0: its warp's entries over the cluster
      if (rank != 0) return;
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
    radix_select_global_fallback<kThreads>(p, row, rv, S.hist, S.warp, &S.pick);
    return;
  }

  // ---- 3. exact radix select on (key, position) (the streaming filter's warps converted the sampled regime's keys)
  if (!kStream || len <= kExactMax) segment_bits_to_keys<kThreads>(S);
  const SelectState st = radix_select_smem<kThreads, kStream, kBinList>(
      S, uint32_t(k), true, p.lean_select != 0, p.offset_digit ? cand_floor : 0u, offset_hist_ready);
  if (p.debug_stop == 5) return;

  // ---- 4. emit, in segment order (quads of entries; deterministic)
  emit_selected<kThreads, kKeepMasks>(p, row, rv, S, st);
}

template <int kThreads>
constexpr std::size_t sampled_smem_bytes() {
  return sizeof(SampledSmem<kThreads>);
}

}  // namespace attnserve::cuda::topk_detail
