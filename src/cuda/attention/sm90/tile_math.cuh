// Hopper paged attention: one consumer warpgroup's math on 64 packed rows, as primitives (issue_s,
// softmax, issue_pv) that the kernels order differently, and attend() = the three in series.
// Per tile of N keys (Traits::kN: 128 up to d 128, fewer at d 192 and 256):
//   S[64 x N]    = Q[64 x d] K^T       m64nNk16 SS, Q and K K-major SW128 panels, d / 16 k-steps
//   online softmax in base 2 (mask, softcap), P converted in registers to A fragments
//   O[64 x d_v] += P[64 x N] V         m64n{d_v}k16 RS, V MN-major (trans-b); d_v 96 runs N = 128
// then the normalized rows and their LSE written straight from the accumulators. Semantics of the
// portable kernel and the CPU oracle: a row with no visible key writes 0 and lse = -inf.
// Device code for sm_90a only (the kernels that include it are compiled for it alone).
#pragma once
#include "tile_load.cuh"

namespace attnserve::cuda::attn90 {

#if defined(ATTNSERVE_SM90_DEVICE)
// 2^x, one MUFU.EX2 (flushes subnormal results to 0; ex2(-inf) = 0).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// LAZY (the default): a stale running max. A row's max moves only when a tile's max exceeds it by
// more than kRescaleLog2 (base-2 units), so P <= 2^kRescaleLog2 and most tiles skip O's rescale
// (exact: l, O and the LSE all use the same max; bf16/f16 P keep their relative precision). LAZY =
// false is the session-3 softmax (the max moves on every tile), kept as the bench's A/B baseline.
template <typename T, int D, int DV, bool LAZY = true>
struct Consumer {
  using Tr = Traits<D, DV>;
  static constexpr int kN = Tr::kN;
  int lane, rl0, rl1;  // the thread's two rows (CTA-local): lane/4 and lane/4 + 8 of its warp
  int lo0, hi0, lo1, hi1;
  int cta_lo, cta_hi;  // keys [cta_lo, cta_hi] are visible to every valid row of the CTA
  bool cap;            // softcap on
  float s_log2, s_cap_in, s_cap_out;
  float o[Tr::kOAcc];
  float m0, m1, l0, l1;
  bool rescale;  // some row of this warp moved its max in the last scores() (warp-uniform)
  static constexpr float kRescaleLog2 = 8.f;

  // wg: consumer warpgroup (0/1, rows 64 wg ..), wwarp: warp in it, lane: lane in the warp.
  __device__ __forceinline__ void init(const Params& p, const Block& b, int wg, int wwarp, int lane_) {
    lane = lane_;
    rl0 = wg * 64 + wwarp * 16 + (lane >> 2);
    rl1 = rl0 + 8;
    const int pr0 = b.row0 + rl0, pr1 = b.row0 + rl1;
    if (pr0 < b.rows_total) row_bounds(p, pr0 / p.group, b.q_len, b.k_len, lo0, hi0);
    else {
      lo0 = 0;
      hi0 = -1;
    }
    if (pr1 < b.rows_total) row_bounds(p, pr1 / p.group, b.q_len, b.k_len, lo1, hi1);
    else {
      lo1 = 0;
      hi1 = -1;
    }
    // lo and hi grow with the row: the CTA's last valid row has the largest lo, its first the smallest hi.
    int unused;
    row_bounds(p, (min(b.row0 + kRows, b.rows_total) - 1) / p.group, b.q_len, b.k_len, cta_lo, unused);
    row_bounds(p, b.row0 / p.group, b.q_len, b.k_len, unused, cta_hi);
    cap = p.softcap > 0.f;
    s_log2 = p.scale_log2;
    s_cap_in = p.softcap > 0.f ? p.scale_log2 / (p.softcap * 1.4426950408889634f) : 0.f;
    s_cap_out = p.softcap * 1.4426950408889634f;
#pragma unroll
    for (int i = 0; i < Tr::kOAcc; ++i) o[i] = 0.f;
    m0 = m1 = -INFINITY;
    l0 = l1 = 0.f;
    rescale = true;
  }

  // Descriptors as (lo, hi) words: the start address sits in lo's low 14 bits (address / 16 of a
  // shared memory below 256 KB), so a k-step's constant offset is one 32-bit add to lo, no carry.
  static __device__ __forceinline__ uint64_t desc_at(uint32_t lo, uint32_t hi, uint32_t byte_off) {
    return (uint64_t(hi) << 32) | uint64_t(lo + (byte_off >> 4));
  }

  // Issues S = Q K^T (no commit): d/16 k-steps; step k lives in panel k/4 at byte 32 * (k % 4).
  __device__ __forceinline__ void issue_s(uint32_t sQa, uint32_t sKa, float (&s)[Tr::kSAcc]) {
    const uint64_t dq = sm90::desc_kmajor(sQa), dk = sm90::desc_kmajor(sKa);
    const uint32_t hi = uint32_t(dq >> 32);
#pragma unroll
    for (int k = 0; k < Tr::kKSteps; ++k) {
      const uint64_t da = desc_at(uint32_t(dq), hi, uint32_t((k >> 2) * Tr::kQPanelBytes + (k & 3) * 32));
      const uint64_t db = desc_at(uint32_t(dk), hi, uint32_t((k >> 2) * Tr::kKvPanelBytes + (k & 3) * 32));
      sm90::Wgmma<T, kN>::template ss<0, 0>(s, da, db, k > 0 ? 1 : 0);
    }
  }

  // Issues O += P V (no commit): 16 keys = two 8-key groups of 1024 bytes; N = d_v (rounded up to
  // a panel) spans the panels (LBO = panel bytes).
  __device__ __forceinline__ void issue_pv(uint32_t sVa, const uint32_t (&pa)[kN / 16][4]) {
    const uint64_t dv = sm90::desc_mnmajor(sVa, Tr::kKvPanelBytes);
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      const uint64_t db = desc_at(uint32_t(dv), uint32_t(dv >> 32), uint32_t(kk * 16 * 128));
      sm90::Wgmma<T, Tr::kPvN>::template rs<1>(o, pa[kk], db, 1);
    }
  }

  // Whether the tile starting at key kbase needs the per-element mask: CTA-uniform (the union of
  // the CTA's rows), so the branch around the softmax variants never diverges.
  __device__ __forceinline__ bool mask_tile(int kbase) const { return kbase < cta_lo || kbase + kN - 1 > cta_hi; }

  // Softmax, first half: scores of the tile at key kbase -> new running max and sum, s = P in f32,
  // (al0, al1) = O's rescale factors for the thread's two rows. Touches neither O nor P's fragments,
  // so it may run while this warpgroup's P V wgmma of the previous tile is in flight.
  // Base 2 as FA3 does (softmax.h): the max is taken on raw scores (scale > 0 is validated), and
  // each exponent is one FFMA (s * scale_log2 - max * scale_log2) plus ex2.approx.ftz. Softcap
  // transforms the scores into base-2 units first (unit 1).
  template <bool MASK, bool CAP>
  __device__ __forceinline__ void scores_t(float (&s)[Tr::kSAcc], int kbase, float& al0, float& al1) {
    if constexpr (CAP) {
#pragma unroll
      for (int i = 0; i < Tr::kSAcc; ++i) s[i] = s_cap_out * tanhf(s[i] * s_cap_in);
    }
    if constexpr (MASK) {
      // Column of element i: kbase + 2 (lane % 4) + 8 (i / 4) + i % 2; compare against the row
      // bounds shifted by the thread's base so each test is against a compile-time offset.
      const int cb = kbase + 2 * (lane & 3);
      const int l0s = lo0 - cb, h0s = hi0 - cb, l1s = lo1 - cb, h1s = hi1 - cb;
#pragma unroll
      for (int i = 0; i < Tr::kSAcc; ++i) {
        const int c = 8 * (i / 4) + (i % 2);
        const bool vis = (i & 2) == 0 ? (c >= l0s && c <= h0s) : (c >= l1s && c <= h1s);
        s[i] = vis ? s[i] : -INFINITY;
      }
    }
    // Row maxima: four independent chains per row (ILP), then the quad.
    float a0 = s[0], a1 = s[1], c0 = s[2], c1 = s[3];
#pragma unroll
    for (int i = 4; i < Tr::kSAcc; i += 4) {
      a0 = fmaxf(a0, s[i]);
      a1 = fmaxf(a1, s[i + 1]);
      c0 = fmaxf(c0, s[i + 2]);
      c1 = fmaxf(c1, s[i + 3]);
    }
    const float mx0 = ptx::quad_max(fmaxf(a0, a1)), mx1 = ptx::quad_max(fmaxf(c0, c1));
    const float u = CAP ? 1.f : s_log2;
    if constexpr (LAZY) {
      // m = -inf (no key seen yet): (mx - m) u = +inf, the max moves (al = ex2(-inf) = 0). Both
      // -inf (nothing visible yet): NaN, compares false, nothing moves.
      const bool r0 = (mx0 - m0) * u > kRescaleLog2, r1 = (mx1 - m1) * u > kRescaleLog2;
      al0 = r0 ? ex2((m0 - mx0) * u) : 1.f;
      al1 = r1 ? ex2((m1 - mx1) * u) : 1.f;
      m0 = r0 ? mx0 : m0;
      m1 = r1 ? mx1 : m1;
      rescale = __any_sync(0xffffffffu, r0 || r1);  // warp-uniform: rescale_o() skips 64 FMULs otherwise
    } else {
      const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
      const float ms0 = mn0 == -INFINITY ? 0.f : mn0 * u, ms1 = mn1 == -INFINITY ? 0.f : mn1 * u;
      al0 = ex2(fmaf(m0, u, -ms0));  // m = -inf (nothing seen yet): ex2(-inf) = 0
      al1 = ex2(fmaf(m1, u, -ms1));
      m0 = mn0;
      m1 = mn1;
    }
    const float ms0 = m0 == -INFINITY ? 0.f : m0 * u, ms1 = m1 == -INFINITY ? 0.f : m1 * u;
    float p0 = 0.f, p0b = 0.f, p1 = 0.f, p1b = 0.f;
#pragma unroll
    for (int i = 0; i < Tr::kSAcc; i += 4) {
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

  __device__ __forceinline__ void scores(float (&s)[Tr::kSAcc], int kbase, float& al0, float& al1) {
    if (cap) {
      if (mask_tile(kbase)) scores_t<true, true>(s, kbase, al0, al1);
      else scores_t<false, true>(s, kbase, al0, al1);
    } else {
      if (mask_tile(kbase)) scores_t<true, false>(s, kbase, al0, al1);
      else scores_t<false, false>(s, kbase, al0, al1);
    }
  }

  // Softmax, second half, in two parts. O *= alpha per row (O must not be in flight); LAZY skips it
  // when no row of the warp moved its max.
  __device__ __forceinline__ void rescale_o(float al0, float al1) {
    if (LAZY && !rescale) return;
#pragma unroll
    for (int i = 0; i < Tr::kOAcc; i += 4) {
      o[i] *= al0;
      o[i + 1] *= al0;
      o[i + 2] *= al1;
      o[i + 3] *= al1;
    }
  }
  // P (f32 in s) -> A fragments (the previous P must not be in flight).
  __device__ __forceinline__ void to_a(const float (&s)[Tr::kSAcc], uint32_t (&pa)[kN / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) sm90::acc_to_a<T>(s, kk, pa[kk]);
  }
  __device__ __forceinline__ void finish(const float (&s)[Tr::kSAcc], float al0, float al1,
                                         uint32_t (&pa)[kN / 16][4]) {
    rescale_o(al0, al1);
    to_a(s, pa);
  }

  // Both halves (O must not be in flight).
  __device__ __forceinline__ void softmax(const Params&, float (&s)[Tr::kSAcc], int kbase, uint32_t (&pa)[kN / 16][4]) {
    float al0, al1;
    scores(s, kbase, al0, al1);
    finish(s, al0, al1, pa);
  }

  // One tile, serially: S, softmax, PV. sQa = this warpgroup's 64 Q rows, sKa / sVa = the tile's
  // K and V; kbase = its first key. Returns once this warpgroup's wgmmas finished reading them.
  __device__ __forceinline__ void attend(const Params& p, uint32_t sQa, uint32_t sKa, uint32_t sVa, int kbase) {
    float s[Tr::kSAcc];
    sm90::wg_fence();
    issue_s(sQa, sKa, s);
    sm90::wg_commit();
    sm90::wg_wait<0>();
    sm90::fence_regs(s);
    uint32_t pa[kN / 16][4];
    softmax(p, s, kbase, pa);
    // wgmma must see finished registers: pin P and O before the fence.
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) sm90::fence_regs(pa[kk]);
    sm90::fence_regs(o);
    sm90::wg_fence();
    issue_pv(sVa, pa);
    sm90::wg_commit();
    sm90::wg_wait<0>();
    sm90::fence_regs(o);
  }

  // Normalizes and writes the thread's two rows (4 bytes per column pair) and their LSE.
  __device__ __forceinline__ void store(const Params& p, const Block& b) {
    l0 = ptx::quad_sum(l0);
    l1 = ptx::quad_sum(l1);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int pr = b.row0 + (half ? rl1 : rl0);
      if (pr >= b.rows_total) continue;
      const float L = half ? l1 : l0, M = (half ? m1 : m0) * (cap ? 1.f : s_log2);  // base-2 units
      const float sc = L > 0.f ? 1.f / L : 0.f;
      const int qr = pr / p.group, h = b.hk * p.group + (pr - qr * p.group);
      const int64_t tok = b.q_start + qr;
      char* orow = p.out + (tok * p.o_st + int64_t(h) * p.o_sh) * 2;
#pragma unroll
      for (int i = 0; i < Tr::kOAcc; i += 4) {
        if (8 * (i / 4) >= DV) break;  // compile-time: the padded columns of d_v 96
        const int c = sm90::acc_col(lane, i);
        const uint32_t w = ptx::pack2<T>(o[i + 2 * half] * sc, o[i + 2 * half + 1] * sc);
        *reinterpret_cast<uint32_t*>(orow + c * 2) = w;
      }
      if (p.lse && (lane & 3) == 0)
        p.lse[tok * p.lse_st + int64_t(h) * p.lse_sh] = L > 0.f ? (M + log2f(L)) * 0.6931471805599453f : -INFINITY;
    }
  }
};
#endif

}  // namespace attnserve::cuda::attn90
