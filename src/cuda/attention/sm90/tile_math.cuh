// Hopper paged attention: one consumer warpgroup's math on 64 packed rows, as primitives (issue_s,
// softmax, issue_pv) that the kernels order differently, and attend() = the three in series.
// Per 128-key tile:
//   S[64 x 128]  = Q[64 x d] K^T       m64n128k16 SS, Q and K K-major SW128 panels
//   online softmax in base 2 (mask, softcap), P converted in registers to A fragments
//   O[64 x d]   += P[64 x 128] V       m64n{d}k16 RS, V MN-major (trans-b)
// then the normalized rows and their LSE written straight from the accumulators. Semantics of the
// portable kernel and the CPU oracle: a row with no visible key writes 0 and lse = -inf.
// Device code for sm_90a only (the kernels that include it are compiled for it alone).
#pragma once
#include "tile_load.cuh"

namespace attnserve::cuda::attn90 {

#if defined(ATTNSERVE_SM90_DEVICE)
template <typename T, int D>
struct Consumer {
  using Tr = Traits<D>;
  int lane, rl0, rl1;              // the thread's two rows (CTA-local): lane/4 and lane/4 + 8 of its warp
  int lo0, hi0, lo1, hi1, lo_max, hi_min;
  float s_log2, s_cap_in, s_cap_out;
  float o[Tr::kOAcc];
  float m0, m1, l0, l1;

  // wg: consumer warpgroup (0/1, rows 64 wg ..), wwarp: warp in it, lane: lane in the warp.
  __device__ __forceinline__ void init(const Params& p, const Block& b, int wg, int wwarp, int lane_) {
    lane = lane_;
    rl0 = wg * 64 + wwarp * 16 + (lane >> 2);
    rl1 = rl0 + 8;
    const int pr0 = b.row0 + rl0, pr1 = b.row0 + rl1;
    if (pr0 < b.rows_total) row_bounds(p, pr0 / p.group, b.q_len, b.k_len, lo0, hi0); else { lo0 = 0; hi0 = -1; }
    if (pr1 < b.rows_total) row_bounds(p, pr1 / p.group, b.q_len, b.k_len, lo1, hi1); else { lo1 = 0; hi1 = -1; }
    lo_max = max(lo0, lo1);
    hi_min = min(hi0, hi1);
    s_log2 = p.scale_log2;
    s_cap_in = p.softcap > 0.f ? p.scale_log2 / (p.softcap * 1.4426950408889634f) : 0.f;
    s_cap_out = p.softcap * 1.4426950408889634f;
#pragma unroll
    for (int i = 0; i < Tr::kOAcc; ++i) o[i] = 0.f;
    m0 = m1 = -INFINITY;
    l0 = l1 = 0.f;
  }

  // Issues S = Q K^T (no commit): d/16 k-steps; step k lives in panel k/4 at byte 32 * (k % 4).
  __device__ __forceinline__ void issue_s(uint32_t sQa, uint32_t sKa, float (&s)[Tr::kSAcc]) {
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      const uint32_t koff = uint32_t((k & 3) * 32);
      const uint64_t da = sm90::desc_kmajor(sQa + uint32_t((k >> 2) * Tr::kQPanelBytes) + koff);
      const uint64_t db = sm90::desc_kmajor(sKa + uint32_t((k >> 2) * Tr::kKvPanelBytes) + koff);
      sm90::Wgmma<T, kTileKeys>::template ss<0, 0>(s, da, db, k > 0 ? 1 : 0);
    }
  }

  // Issues O += P V (no commit): 16 keys = two 8-key groups of 1024 bytes; N = d spans the panels
  // (LBO = panel bytes).
  __device__ __forceinline__ void issue_pv(uint32_t sVa, const uint32_t (&pa)[kTileKeys / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < kTileKeys / 16; ++kk) {
      const uint64_t db = sm90::desc_mnmajor(sVa + uint32_t(kk * 16 * 128), Tr::kKvPanelBytes);
      sm90::Wgmma<T, D>::template rs<1>(o, pa[kk], db, 1);
    }
  }

  // Scores of the tile starting at key kbase -> base-2 softmax update of m, l and O's scale, and
  // P as A fragments. O must not be in flight (it is rescaled here).
  __device__ __forceinline__ void softmax(const Params& p, float (&s)[Tr::kSAcc], int kbase,
                                          uint32_t (&pa)[kTileKeys / 16][4]) {
    // Scores in base 2, masked (a quad shares a row).
    const bool need_mask = kbase < lo_max || kbase + kTileKeys - 1 > hi_min;
#pragma unroll
    for (int i = 0; i < Tr::kSAcc; ++i) {
      float x = s[i];
      x = p.softcap > 0.f ? s_cap_out * tanhf(x * s_cap_in) : x * s_log2;
      if (need_mask) {
        const int j = kbase + sm90::acc_col(lane, i);
        const bool vis = (i & 2) == 0 ? (j >= lo0 && j <= hi0) : (j >= lo1 && j <= hi1);
        x = vis ? x : -INFINITY;
      }
      s[i] = x;
    }
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int i = 0; i < Tr::kSAcc; i += 4) {
      mx0 = fmaxf(mx0, fmaxf(s[i], s[i + 1]));
      mx1 = fmaxf(mx1, fmaxf(s[i + 2], s[i + 3]));
    }
    mx0 = ptx::quad_max(mx0);
    mx1 = ptx::quad_max(mx1);
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float b0 = mn0 == -INFINITY ? 0.f : mn0, b1 = mn1 == -INFINITY ? 0.f : mn1;
    const float al0 = exp2f(m0 - b0), al1 = exp2f(m1 - b1);
    m0 = mn0;
    m1 = mn1;
    float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
    for (int i = 0; i < Tr::kSAcc; i += 4) {
      s[i] = exp2f(s[i] - b0);
      s[i + 1] = exp2f(s[i + 1] - b0);
      s[i + 2] = exp2f(s[i + 2] - b1);
      s[i + 3] = exp2f(s[i + 3] - b1);
      ps0 += s[i] + s[i + 1];
      ps1 += s[i + 2] + s[i + 3];
    }
    l0 = l0 * al0 + ps0;
    l1 = l1 * al1 + ps1;
#pragma unroll
    for (int i = 0; i < Tr::kOAcc; i += 4) {
      o[i] *= al0;
      o[i + 1] *= al0;
      o[i + 2] *= al1;
      o[i + 3] *= al1;
    }
#pragma unroll
    for (int kk = 0; kk < kTileKeys / 16; ++kk) sm90::acc_to_a<T>(s, kk, pa[kk]);
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
    uint32_t pa[kTileKeys / 16][4];
    softmax(p, s, kbase, pa);
    // wgmma must see finished registers: pin P and O before the fence.
#pragma unroll
    for (int kk = 0; kk < kTileKeys / 16; ++kk) sm90::fence_regs(pa[kk]);
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
      const float L = half ? l1 : l0, M = half ? m1 : m0;
      const float sc = L > 0.f ? 1.f / L : 0.f;
      const int qr = pr / p.group, h = b.hk * p.group + (pr - qr * p.group);
      const int64_t tok = b.q_start + qr;
      char* orow = p.out + (tok * p.o_st + int64_t(h) * p.o_sh) * 2;
#pragma unroll
      for (int i = 0; i < Tr::kOAcc; i += 4) {
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
