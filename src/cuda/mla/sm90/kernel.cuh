// Hopper (sm_90a) MLA (absorbed) paged decode: wgmma with shared-memory descriptors.
// One latent KV head, rows [c_kv (512) | k_rope (64)]; score = q . k over 576, value = c_kv.
//
// One CTA = (block of 64 packed rows, split, request); packed row = q_row * h_q + head, so every
// head of the request in the block shares each K byte the CTA reads. Three warpgroups:
//   WG 0 (producer, setmaxnreg down): Q once, then K tiles of 64 keys x 576 gathered per token
//        through the page table by cp.async into 9 SW128 panels (any page size), a 2-stage ring with
//        full / empty mbarriers (its cp.async.mbarrier.arrive fires when its copies land); or, Fill:
//        whole tiles by nine TMA boxes (producer_tma.cuh), or an FP8-656 cache (producer_fp8.cuh).
//   WG 1 (softmax): S[64 x 64] = Q K^T (36 k-steps of m64n64k16 SS), online softmax in base 2 in
//        registers, P -> bf16 to shared memory (one SW128 panel) with each row's rescale factor,
//        then O[:, 0:256) += P V by m64n256k16 SS (P from shared memory).
//   WG 2 (P V): O[:, 256:512) += P V by m64n256k16 SS (the same P), after rescaling by WG 1's factors.
//   V = the first 512 columns of the same K tile (MN-major B, no second load).
// Named barriers hand P over: kBarPFull (WG 1 wrote P and alpha of tile t) and kBarPEmpty (WG 2's
// wgmma finished reading them); the same pair hands over the final 1/l after the last tile. Each
// warpgroup syncs on each barrier n + 1 times (n tiles), in the order Empty, Full, Empty, Full ...
// Semantics of the portable kernel and the CPU oracle: a row with no visible key writes 0 and
// lse = -inf; split s writes its normalized partial O and LSE for the combine (merge kernel).
#pragma once
#include <cuda.h>  // CUtensorMap (Fill::kTma)
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "config.h"
#include "cuda/common/check.cuh"
#include "cuda/common/masking.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/sm90/sync.cuh"
#include "cuda/common/sm90/wgmma.cuh"
#include "cuda/mla/params.h"
#include "producer_fp8.cuh"  // the FP8-656 cache's producer (Fill::kFp8)
#include "producer_tma.cuh"  // the bf16 cache by TMA boxes (Fill::kTma)

namespace attnserve::cuda::mla90 {

using mla::Params;

// Named barriers (0 is __syncthreads), both warpgroups sync on each (256 threads): P handed from WG 1 to
// WG 2 and back. Syncing on both sides costs nothing here (the other side is already waiting: WG 2 for
// P, WG 1 finishes S and the softmax after WG 2's P V) and orders the alpha / 1/l reads for racecheck,
// which reported the bar.arrive -> bar.sync hand-over as races.
constexpr int kBarPFull = 1, kBarPEmpty = 2;

// One CTA's request, rows and key tiles (the portable kernel's split rule with 64-key tiles).
struct Block {
  int r, split, q_start, q_len, k_len, rows_total, row0, k_begin, k_end, n_tiles;

  __device__ __forceinline__ bool init(const Params& p) {
    split = blockIdx.y;
    r = blockIdx.z;
    q_start = p.cu_seqlens_q[r];
    q_len = p.cu_seqlens_q[r + 1] - q_start;
    k_len = p.cache_seqlens[r];
    rows_total = q_len * p.h_q;
    row0 = blockIdx.x * kRows;
    if (row0 >= rows_total) return false;
    int blo, bhi, unused;
    row_bounds(p, row0 / p.h_q, q_len, k_len, blo, unused);
    row_bounds(p, (min(row0 + kRows, rows_total) - 1) / p.h_q, q_len, k_len, unused, bhi);
    const int start = max(blo, 0) & ~(kTileKeys - 1);
    if (p.split_keys > 0) {
      k_begin = max(split * p.split_keys, start);
      k_end = min((split + 1) * p.split_keys, bhi + 1);
    } else {
      const int span = bhi + 1 - start;
      const int per = span > 0 ? ((span + p.num_splits - 1) / p.num_splits + kTileKeys - 1) & ~(kTileKeys - 1) : 0;
      k_begin = start + split * per;
      k_end = min(k_begin + per, bhi + 1);
    }
    n_tiles = k_end > k_begin ? (k_end - k_begin + kTileKeys - 1) / kTileKeys : 0;
    return true;
  }
};

#if defined(ATTNSERVE_SM90_DEVICE)

// 2^x, one MUFU.EX2 (flushes subnormal results to 0; ex2(-inf) = 0).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Descriptor with a constant byte offset added to its start address (the address sits in the low
// 14 bits of the low word: shared memory below 256 KB, so no carry).
__device__ __forceinline__ uint64_t desc_plus(uint64_t d, uint32_t byte_off) { return d + (byte_off >> 4); }

// Shared memory rounded up to the 1024-byte swizzle atom (descriptor base offset 0).
__device__ __forceinline__ char* smem_base() {
  extern __shared__ char smem_raw[];
  return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
}

// The producer warpgroup: 8 threads per row (chunk lch of each of the 9 panels, at the same swizzled
// position in every panel), 16 rows per pass, 4 passes per tile, so each thread reads 4 page-table
// entries per tile and issues 36 copies of 16 bytes.
struct Producer {
  static constexpr int kPasses = kTileKeys / 16;
  int lch, lrow;

  __device__ __forceinline__ void load_q(const Params& p, const Block& b, uint32_t sQ) const {
#pragma unroll
    for (int i = 0; i < kRows / 16; ++i) {
      const int row = lrow + 16 * i, pr = b.row0 + row;
      const bool valid = pr < b.rows_total;
      const char *qn = p.q_nope, *qr = p.q_rope;
      if (valid) {
        const int q_row = pr / p.h_q, h = pr - q_row * p.h_q;
        const int64_t tok = b.q_start + q_row;
        qn += (tok * p.qn_st + int64_t(h) * p.qn_sh) * 2 + lch * 16;
        qr += (tok * p.qr_st + int64_t(h) * p.qr_sh) * 2 + lch * 16;
      }
      const uint32_t dst = sQ + sm90::sw128_offset(row, lch);
#pragma unroll
      for (int pn = 0; pn < kPanels - 1; ++pn)
        ptx::cp_async_16(dst + uint32_t(pn * kPanelBytes), qn + (valid ? pn * 128 : 0), valid ? 16 : 0);
      ptx::cp_async_16(dst + uint32_t((kPanels - 1) * kPanelBytes), qr, valid ? 16 : 0);
    }
  }

  // Keys past k_end, past the page table or on an invalid page land as zero rows (masked by
  // position; zeros keep NaN garbage of unused slots out of P V).
  __device__ __forceinline__ void load_tile(const Params& p, const Block& b, int tile, uint32_t sK) const {
    const int* pt = p.page_table + int64_t(b.r) * p.pt_st;
    int page[kPasses];
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int j = b.k_begin + tile * kTileKeys + lrow + 16 * i;
      const int pi = j / p.page_size;
      page[i] = (j < b.k_end && pi < p.max_pages) ? __ldg(pt + pi) : -1;
    }
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int j = b.k_begin + tile * kTileKeys + lrow + 16 * i;
      const bool ok = unsigned(page[i]) < unsigned(p.num_pages);
      const int64_t slot = ok ? int64_t(page[i]) * p.page_size + j % p.page_size : 0;
      const char* src = p.kv + slot * p.kv_stok + lch * 16;
      const uint32_t dst = sK + sm90::sw128_offset(lrow + 16 * i, lch);
#pragma unroll
      for (int pn = 0; pn < kPanels; ++pn)
        ptx::cp_async_16(dst + uint32_t(pn * kPanelBytes), src + pn * 128, ok ? 16 : 0);
    }
  }
};

// Row state shared by both consumer warpgroups: the thread's two rows (CTA-local) r0 = 16 w + lane / 4
// and r1 = r0 + 8 of warp w of its warpgroup, as in every m64 accumulator fragment.
struct Rows {
  int lane, r0, r1;
  __device__ __forceinline__ void init(int warp_in_group, int lane_) {
    lane = lane_;
    r0 = 16 * warp_in_group + (lane >> 2);
    r1 = r0 + 8;
  }
};

// One tile's online softmax of the thread's two rows (s masked already, -inf where hidden): running max m on
// raw scores, sum l in base 2 (exponent = one FFMA with u = base-2 units per raw score and ex2.approx.ftz),
// al0 / al1 = the rows' rescale factors of what came before; s becomes the tile's probabilities.
// Element i of the m64n64 fragment belongs to row r0 (i % 4 < 2) or r1. Shared with the sparse kernel on this
// schedule (src/cuda/sparse_mla/sm90/dense_schedule.cuh).
__device__ __forceinline__ void online_softmax(float (&s)[32], float u, float& m0, float& m1, float& l0, float& l1,
                                               float& al0, float& al1) {
  float a0 = s[0], a1 = s[1], c0 = s[2], c1 = s[3];
#pragma unroll
  for (int i = 4; i < 32; i += 4) {
    a0 = fmaxf(a0, s[i]);
    a1 = fmaxf(a1, s[i + 1]);
    c0 = fmaxf(c0, s[i + 2]);
    c1 = fmaxf(c1, s[i + 3]);
  }
  const float mn0 = fmaxf(m0, ptx::quad_max(fmaxf(a0, a1))), mn1 = fmaxf(m1, ptx::quad_max(fmaxf(c0, c1)));
  const float ms0 = mn0 == -INFINITY ? 0.f : mn0 * u, ms1 = mn1 == -INFINITY ? 0.f : mn1 * u;
  al0 = ex2(fmaf(m0, u, -ms0));  // m = -inf (nothing seen yet): ex2(-inf) = 0
  al1 = ex2(fmaf(m1, u, -ms1));
  m0 = mn0;
  m1 = mn1;
  float p0 = 0.f, p0b = 0.f, p1 = 0.f, p1b = 0.f;
#pragma unroll
  for (int i = 0; i < 32; i += 4) {
    s[i] = ex2(fmaf(s[i], u, -ms0));
    s[i + 1] = ex2(fmaf(s[i + 1], u, -ms0));
    s[i + 2] = ex2(fmaf(s[i + 2], u, -ms1));
    s[i + 3] = ex2(fmaf(s[i + 3], u, -ms1));
    p0 += s[i];
    p0b += s[i + 1];
    p1 += s[i + 2];
    p1b += s[i + 3];
  }
  l0 = fmaf(l0, al0, p0 + p0b);
  l1 = fmaf(l1, al1, p1 + p1b);
}

// Scores -> probabilities for one tile (WG 1): mask, running max and sum in base 2 (max on raw
// scores, exponent = one FFMA and ex2.approx.ftz), the rescale factors of the two rows.
struct Softmax {
  int lo0, hi0, lo1, hi1;  // visible keys of the thread's rows, cut to the split
  int cta_lo, cta_hi;      // keys every valid row of the CTA sees
  float u;                 // base-2 units per raw score (scale_log2; 1 with softcap, applied first)
  float cap_in, cap_out;
  bool cap;
  float m0, m1, l0, l1;

  __device__ __forceinline__ void init(const Params& p, const Block& b, const Rows& rw) {
    const int pr0 = b.row0 + rw.r0, pr1 = b.row0 + rw.r1;
    lo0 = lo1 = 0;
    hi0 = hi1 = -1;
    if (pr0 < b.rows_total) row_bounds(p, pr0 / p.h_q, b.q_len, b.k_len, lo0, hi0);
    if (pr1 < b.rows_total) row_bounds(p, pr1 / p.h_q, b.q_len, b.k_len, lo1, hi1);
    hi0 = min(hi0, b.k_end - 1);
    hi1 = min(hi1, b.k_end - 1);
    int unused;
    row_bounds(p, (min(b.row0 + kRows, b.rows_total) - 1) / p.h_q, b.q_len, b.k_len, cta_lo, unused);
    row_bounds(p, b.row0 / p.h_q, b.q_len, b.k_len, unused, cta_hi);
    cta_hi = min(cta_hi, b.k_end - 1);
    cap = p.softcap > 0.f;
    cap_in = cap ? p.scale_log2 / (p.softcap * 1.4426950408889634f) : 0.f;
    cap_out = p.softcap * 1.4426950408889634f;
    u = cap ? 1.f : p.scale_log2;
    m0 = m1 = -INFINITY;
    l0 = l1 = 0.f;
  }

  // Element i of the m64n64 fragment: row r0 (i % 4 < 2) or r1, key kbase + 8 (i / 4) + 2 (lane % 4) + i % 2.
  template <bool MASK, bool CAP>
  __device__ __forceinline__ void step_t(float (&s)[32], int kbase, int lane, float& al0, float& al1) {
    if constexpr (CAP) {
#pragma unroll
      for (int i = 0; i < 32; ++i) s[i] = cap_out * tanhf(s[i] * cap_in);
    }
    if constexpr (MASK) {
      const int cb = kbase + 2 * (lane & 3);
      const int l0s = lo0 - cb, h0s = hi0 - cb, l1s = lo1 - cb, h1s = hi1 - cb;
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int c = 8 * (i / 4) + (i % 2);
        const bool vis = (i & 2) == 0 ? (c >= l0s && c <= h0s) : (c >= l1s && c <= h1s);
        s[i] = vis ? s[i] : -INFINITY;
      }
    }
    online_softmax(s, u, m0, m1, l0, l1, al0, al1);
  }

  // The mask branch is CTA-uniform (the union of the CTA's rows), so it never diverges.
  __device__ __forceinline__ void step(float (&s)[32], int kbase, int lane, float& al0, float& al1) {
    const bool mask = kbase < cta_lo || kbase + kTileKeys - 1 > cta_hi;
    if (cap) {
      if (mask) step_t<true, true>(s, kbase, lane, al0, al1);
      else step_t<false, true>(s, kbase, lane, al0, al1);
    } else {
      if (mask) step_t<true, false>(s, kbase, lane, al0, al1);
      else step_t<false, false>(s, kbase, lane, al0, al1);
    }
  }
};

__device__ __forceinline__ void scale_rows(float (&o)[128], float a0, float a1) {
#pragma unroll
  for (int i = 0; i < 128; i += 4) {
    o[i] *= a0;
    o[i + 1] *= a0;
    o[i + 2] *= a1;
    o[i + 3] *= a1;
  }
}

// O[:, col0 .. col0 + 256) of the thread's two rows, times inv per row: bf16 to out (one split) or
// f32 to the split's partial state; lse only from WG 1 (with_lse).
__device__ __forceinline__ void store_rows(const Params& p, const Block& b, const Rows& rw, const float (&o)[128],
                                           int col0, float inv0, float inv1, bool with_lse, float lse0, float lse1) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int pr = b.row0 + (half ? rw.r1 : rw.r0);
    if (pr >= b.rows_total) continue;
    const float inv = half ? inv1 : inv0;
    const int q_row = pr / p.h_q, h = pr - q_row * p.h_q;
    const int64_t tok = b.q_start + q_row;
    if (p.num_splits == 1) {
      char* orow = p.out + (tok * p.o_st + int64_t(h) * p.o_sh + col0) * 2;
#pragma unroll
      for (int i = 0; i < 128; i += 4) {
        const int c = sm90::acc_col(rw.lane, i);
        *reinterpret_cast<uint32_t*>(orow + c * 2) =
            ptx::pack2<__nv_bfloat16>(o[i + 2 * half] * inv, o[i + 2 * half + 1] * inv);
      }
      if (with_lse && p.lse && (rw.lane & 3) == 0) p.lse[tok * p.lse_st + int64_t(h) * p.lse_sh] = half ? lse1 : lse0;
    } else {
      float* orow = p.part_o + ((int64_t(b.split) * p.total_q + tok) * p.h_q + h) * kDv + col0;
#pragma unroll
      for (int i = 0; i < 128; i += 4) {
        const int c = sm90::acc_col(rw.lane, i);
        *reinterpret_cast<float2*>(orow + c) = make_float2(o[i + 2 * half] * inv, o[i + 2 * half + 1] * inv);
      }
      if (with_lse && (rw.lane & 3) == 0)
        p.part_lse[(int64_t(b.split) * p.total_q + tok) * p.h_q + h] = half ? lse1 : lse0;
    }
  }
}

// Shared-memory map of a CTA (addresses in the shared window; 1024-aligned panels).
struct Smem {
  uint32_t q, ring, p_tile, bars;  // Q [9 panels][64 rows][128 B]; ring [stages][9][64 keys][128 B]; P [64][64] bf16
  float *alpha, *inv;              // [64] rescale of the tile handed over; [64] final 1/l
  __device__ __forceinline__ uint32_t stage(int t) const { return ring + uint32_t((t % kStages) * kTileBytes); }
  __device__ __forceinline__ uint32_t full(int t) const { return bars + uint32_t((t % kStages) * 8); }
  __device__ __forceinline__ uint32_t empty(int t) const { return bars + uint32_t((kStages + t % kStages) * 8); }
  // Fill::kFp8Tma: tile t's raw bytes landed in its stage (before the producer dequantizes them).
  __device__ __forceinline__ uint32_t landed(int t) const { return bars + uint32_t((2 * kStages + t % kStages) * 8); }
  // The sparse kernel on this schedule only: stage t's 64-bit key mask, past the barriers (kKeyMaskBytes).
  __device__ __forceinline__ uint32_t key_mask(int t) const {
    return bars + uint32_t(3 * kStages * 8 + (t % kStages) * 8);
  }
};

// S = Q K^T into s (no commit): k-step k lives in panel k / 4 at byte 32 (k % 4).
__device__ __forceinline__ void issue_s(uint64_t dq, uint32_t sK, float (&s)[32]) {
  const uint64_t dk = sm90::desc_kmajor(sK);
#pragma unroll
  for (int k = 0; k < kDqk / 16; ++k) {
    const uint32_t off = uint32_t((k >> 2) * kPanelBytes + (k & 3) * 32);
    sm90::Wgmma<__nv_bfloat16, 64>::ss<0, 0>(s, desc_plus(dq, off), desc_plus(dk, off), k > 0 ? 1 : 0);
  }
}

// What the consumer roles below ask of the problem they run (a policy class; this one is the paged decode's;
// src/cuda/sparse_mla/sm90/dense_schedule.cuh has the sparse one): its Params, Block (n_tiles) and Softmax (init,
// m0, m1, l0, l1, u), the masked softmax of tile t, the final 1/l of a row, and the stores of WG 1's and WG 2's
// halves of O.
struct PagedDecode {
  using Params = mla::Params;
  using Block = mla90::Block;
  using Softmax = mla90::Softmax;
  __device__ __forceinline__ static void step(Softmax& st, const Block& b, const Smem&, int t, float (&s)[32], int lane,
                                              float& al0, float& al1) {
    st.step(s, b.k_begin + t * kTileKeys, lane, al0, al1);
  }
  // L0 / L1: the rows' quad-summed l.
  __device__ __forceinline__ static void inverse(const Params&, const Block&, const Rows&, const Softmax&, float L0,
                                                 float L1, float& inv0, float& inv1) {
    inv0 = L0 > 0.f ? 1.f / L0 : 0.f;
    inv1 = L1 > 0.f ? 1.f / L1 : 0.f;
  }
  __device__ __forceinline__ static void store_lead(const Params& p, const Block& b, const Rows& rw,
                                                    const float (&o)[128], const Softmax& st, float L0, float L1,
                                                    float inv0, float inv1) {
    const float lse0 = L0 > 0.f ? (st.m0 * st.u + log2f(L0)) * 0.6931471805599453f : -INFINITY;
    const float lse1 = L1 > 0.f ? (st.m1 * st.u + log2f(L1)) * 0.6931471805599453f : -INFINITY;
    store_rows(p, b, rw, o, 0, inv0, inv1, true, lse0, lse1);
  }
  __device__ __forceinline__ static void store_rest(const Params& p, const Block& b, const Rows& rw,
                                                    const float (&o)[128], float inv0, float inv1) {
    store_rows(p, b, rw, o, kHalfDv, inv0, inv1, false, 0.f, 0.f);
  }
};

// WG 1: per tile t, S(t), its softmax, P(t) handed to WG 2, then P V(t) on columns 0..255, in series
// (issuing S(t + 1) under P V(t) spilled in a first try; the next step).
template <class Pol>
__device__ __forceinline__ void softmax_role(const typename Pol::Params& p, const typename Pol::Block& b,
                                             const Smem& sm, int warp, int lane) {
  Rows rw;
  rw.init(warp & 3, lane);
  typename Pol::Softmax st;
  st.init(p, b, rw);
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  const int n = b.n_tiles;
  const uint64_t dq = sm90::desc_kmajor(sm.q);
  float s[32];
  // Softmax of tile t (in s), P and alpha to shared memory once WG 2 is done with tile t - 1, O rescaled.
  auto prepare = [&](int t) {
    float al0, al1;
    Pol::step(st, b, sm, t, s, lane, al0, al1);
    uint32_t pa[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) sm90::acc_to_a<__nv_bfloat16>(s, kk, pa[kk]);
    sm90::named_sync(kBarPEmpty, 256);
    const uint32_t row0 = sm.p_tile + uint32_t(rw.r0 * 128), row1 = sm.p_tile + uint32_t(rw.r1 * 128);
    const int g = rw.r0 & 7, tb = 4 * (lane & 3);
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
      // pa[kk] = {(r0, keys 16kk + 2t..), (r1, ..), (r0, 16kk + 8 + 2t..), (r1, ..)}: key block nb = 2kk + j
      const uint32_t off = uint32_t(((nb ^ g) << 4) + tb);
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(row0 + off), "r"(pa[nb >> 1][2 * (nb & 1)]) : "memory");
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(row1 + off), "r"(pa[nb >> 1][2 * (nb & 1) + 1]) : "memory");
    }
    if ((lane & 3) == 0) {
      sm.alpha[rw.r0] = al0;
      sm.alpha[rw.r1] = al1;
    }
    sm90::fence_proxy_async();         // P's generic writes, for the wgmmas of both warpgroups
    sm90::named_sync(kBarPFull, 256);  // also: every warp of this warpgroup wrote its rows of P
    scale_rows(o, al0, al1);
  };
  // O[:, 0:256) += P V with P from shared memory as WG 2 does: 4 k-steps of 16 keys (2048 bytes of V,
  // 32 bytes of P); N = 256 spans panels 0..3 (LBO = panel).
  const uint64_t dp = sm90::desc_kmajor(sm.p_tile);
  auto issue_pv = [&](uint32_t sK) {
    const uint64_t dv = sm90::desc_mnmajor(sK, kPanelBytes);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      sm90::Wgmma<__nv_bfloat16, 256>::ss<0, 1>(o, desc_plus(dp, uint32_t(kk * 32)),
                                                desc_plus(dv, uint32_t(kk * 16 * 128)), 1);
  };
  auto pin = [&] { sm90::fence_regs(o); };
  for (int t = 0; t < n; ++t) {
    sm90::mbar_wait(sm.full(t), (t / kStages) & 1);
    sm90::fence_proxy_async();  // the producer's cp.async bytes, seen through the async proxy
    sm90::wg_fence();
    issue_s(dq, sm.stage(t), s);
    sm90::wg_commit();
    sm90::wg_wait<0>();
    sm90::fence_regs(s);
    prepare(t);
    pin();
    sm90::wg_fence();
    issue_pv(sm.stage(t));
    sm90::wg_commit();
    sm90::wg_wait<0>();
    pin();
    sm90::mbar_arrive(sm.empty(t));  // this warpgroup's reads of tile t are done
  }
  // The final 1/l per row for WG 2, then this half and the LSE.
  const float L0 = ptx::quad_sum(st.l0), L1 = ptx::quad_sum(st.l1);
  float inv0, inv1;
  Pol::inverse(p, b, rw, st, L0, L1, inv0, inv1);
  sm90::named_sync(kBarPEmpty, 256);
  if ((lane & 3) == 0) {
    sm.inv[rw.r0] = inv0;
    sm.inv[rw.r1] = inv1;
  }
  sm90::named_sync(kBarPFull, 256);
  Pol::store_lead(p, b, rw, o, st, L0, L1, inv0, inv1);
}

// WG 2: per tile, O[:, 256:512) = alpha O + P V with P from shared memory.
template <class Pol>
__device__ __forceinline__ void pv_role(const typename Pol::Params& p, const typename Pol::Block& b, const Smem& sm,
                                        int warp, int lane) {
  Rows rw;
  rw.init(warp & 3, lane);
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  sm90::named_sync(kBarPEmpty, 256);  // P's buffer starts free
  const uint64_t dp = sm90::desc_kmajor(sm.p_tile);
  for (int t = 0; t < b.n_tiles; ++t) {
    sm90::named_sync(kBarPFull, 256);
    sm90::mbar_wait(sm.full(t), (t / kStages) & 1);  // completed already (WG 1 waited); orders the bytes
    sm90::fence_proxy_async();
    scale_rows(o, sm.alpha[rw.r0], sm.alpha[rw.r1]);
    sm90::fence_regs(o);
    sm90::wg_fence();
    // A = P (K-major, k-step = 32 bytes), B = panels 4..7 of the tile (MN-major).
    const uint64_t dv = sm90::desc_mnmajor(sm.stage(t) + uint32_t(4 * kPanelBytes), kPanelBytes);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      sm90::Wgmma<__nv_bfloat16, 256>::ss<0, 1>(o, desc_plus(dp, uint32_t(kk * 32)),
                                                desc_plus(dv, uint32_t(kk * 16 * 128)), 1);
    sm90::wg_commit();
    sm90::wg_wait<0>();
    sm90::fence_regs(o);
    sm90::mbar_arrive(sm.empty(t));
    sm90::named_sync(kBarPEmpty, 256);
  }
  sm90::named_sync(kBarPFull, 256);
  Pol::store_rest(p, b, rw, o, sm.inv[rw.r0], sm.inv[rw.r1]);
}

// One CTA of the schedule: the shared-memory map, the ring's barriers (full: `full_arrivals` per phase; empty:
// the 256 consumer threads; landed: 1), then the three roles; produce(sm, tid) is the producer warpgroup's whole
// job (tid < 128), which fills stage t % kStages with tile t once both consumers released tile t - kStages.
template <class Pol, class Produce>
__device__ __forceinline__ void run_cta(const typename Pol::Params& p, const typename Pol::Block& b, char* smem,
                                        int full_arrivals, Produce&& produce) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = __shfl_sync(0xffffffffu, warp >> 2, 0);  // warp-uniform for the compiler
  Smem sm;
  sm.q = ptx::smem_addr(smem);
  sm.ring = sm.q + kTileBytes;
  sm.p_tile = sm.ring + kStages * kTileBytes;
  sm.alpha = reinterpret_cast<float*>(smem + (1 + kStages) * kTileBytes + kPanelBytes);
  sm.inv = sm.alpha + kRows;
  sm.bars = ptx::smem_addr(sm.inv + kRows);
  if (tid == 0)
    for (int s = 0; s < kStages; ++s) {
      sm90::mbar_init(sm.full(s), full_arrivals);
      sm90::mbar_init(sm.empty(s), 256);  // every consumer thread, after its wgmmas read the tile
      sm90::mbar_init(sm.landed(s), 1);   // kFp8Tma: thread 0 (produce_fp8_tma)
    }
  __syncthreads();
  if (wg == 0) {
    sm90::setmaxnreg_dec<kProducerRegs>();
    produce(sm, tid);
    asm volatile("cp.async.wait_all;\n" ::: "memory");
  } else if (wg == 1) {
    sm90::setmaxnreg_inc<kSoftmaxRegs>();
    softmax_role<Pol>(p, b, sm, warp, lane);
  } else {
    sm90::setmaxnreg_inc<kPvRegs>();
    pv_role<Pol>(p, b, sm, warp, lane);
  }
}

#endif  // ATTNSERVE_SM90_DEVICE

// How the producer fills the stages (the consumers are the same for all):
//   kCpAsync  bf16 cache, 16-byte cp.async per (key, panel chunk) through the page table (any page size)
//   kTma      bf16 cache, whole tiles on one page by nine TMA boxes, other tiles as kCpAsync (producer_tma.cuh)
//   kFp8      FP8-656 cache, dequantized by the producer into the same bf16 stages (producer_fp8.cuh)
//   kFp8Tma   kFp8 with the raw bytes of whole tiles on one page by ten TMA boxes (produce_fp8_tma)
enum class Fill : int { kCpAsync, kTma, kFp8, kFp8Tma };

// The TMA producers' tensor maps of the cache (unused by the others). kTma: map[0] = [slots][576] bf16, 64 x 64
// boxes, 128-byte swizzle (mla90_bf16.cu). kFp8Tma: the FP8-656 rows as [slots][656] bytes, map[0] latent boxes
// of 64 bytes x 64 keys, map[1] scale boxes of 16 x 64, map[2] rope boxes of 128 x 64 with 128-byte swizzle
// (mla90_fp8.cu).
struct KvMaps {
  CUtensorMap map[3];
};

template <Fill kFill>
__global__ void __launch_bounds__(kThreads, 1) mla_sm90_kernel(const Params p, const __grid_constant__ KvMaps kv) {
#if defined(ATTNSERVE_SM90_DEVICE)
  char* smem = smem_base();
  Block b;
  if (!b.init(p)) return;  // uniform over the CTA
  // full: every producer thread, when its copies of the tile land (kTma: thread 0, see producer_tma.cuh)
  run_cta<PagedDecode>(p, b, smem, kFill == Fill::kTma ? 1 : 128, [&](const Smem& sm, int tid) {
    // Tile t goes into stage t % 2 once both consumers released tile t - 2; Q rides on tile 0's arrival.
    const Producer ld{tid & 7, tid >> 3};
    if constexpr (kFill == Fill::kFp8) {
      produce_fp8(p, b, sm, ld, tid);
    } else if constexpr (kFill == Fill::kFp8Tma) {
      produce_fp8_tma(p, b, sm, ld, tid, &kv.map[0], &kv.map[1], &kv.map[2]);
    } else if constexpr (kFill == Fill::kTma) {
      produce_tma(p, b, sm, ld, tid, &kv.map[0]);
    } else {
      if (b.n_tiles > 0) ld.load_q(p, b, sm.q);
      for (int t = 0; t < b.n_tiles; ++t) {
        if (t >= kStages) sm90::mbar_wait(sm.empty(t), ((t / kStages) - 1) & 1);
        ld.load_tile(p, b, t, sm.stage(t));
        sm90::cp_async_mbar_arrive(sm.full(t));
      }
    }
  });
#endif
}

// Launches one instantiation (the host side of mla90_bf16.cu / mla90_fp8.cu, each instantiating its fills);
// the dynamic shared-memory limit is set once per instantiation.
template <Fill kFill>
void launch_fill(const mla::Params& p, const KvMaps& maps, const dim3& grid, cudaStream_t stream) {
  static const bool configured = [] {
    ATTNSERVE_CUDA_CHECK(
        cudaFuncSetAttribute(mla_sm90_kernel<kFill>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes())));
    return true;
  }();
  (void)configured;
  mla_sm90_kernel<kFill><<<grid, kThreads, smem_bytes(), stream>>>(p, maps);
}

}  // namespace attnserve::cuda::mla90
