// The Hopper MLA decode kernel's "seesaw" consumer schedule (MlaTuning::sm90_seesaw, Schedule::kSeesaw; bf16 cache,
// TMA producer). Unmeasured: bench/NOTES.md "Session 6: MLA seesaw schedule, prepared (unmeasured)".
//
// Why: in the split-d_v schedule (kernel.cuh) WG 1 computes every S and every softmax, and the tensor pipe idles
// during each softmax (~450 cycles per tile, bench/NOTES.md "Session 6"). Here the tiles go in pairs (t0 = 2i in
// stage 0, t1 = 2i + 1 in stage 1) and each consumer warpgroup computes S of its own tile, so one warpgroup's
// softmax runs under the other's GEMMs (FlashMLA's idea, docs/20250422-new-kernel-deep-dive.md; our own order).
// One running max m per row, shared by both warpgroups; O[:, 0:256) in WG A (= 1), O[:, 256:512) in WG B (= 2).
//
//   WG A, pair i                                   WG B, pair i
//   S0 = Q K(t0)^T                                 (waits S0Done: keeps S1 off the pipe while S0 runs)
//   arrive S0Done                                  S1 = Q K(t1)^T                         (if t1 exists)
//   softmax: m -> m_a, P0 (registers)              sync AReady; read m_a
//   [sync P0Free(i-1)] P0 -> P panel, m_a -> smem  O_R *= 2^(m - m_a); O_R += P0 V(t0)_R   (SS, async)
//   arrive AReady                                  softmax on S1 from m_a: m_a -> m_b, P1  (under the wgmma)
//   O_L = O_L 2^(m - m_a) + P0 V(t0)_L (RS)        P1 -> panel 8 of stage 1 (its rope panel: free once S1 is
//   release t0                                       done), m_b -> smem; arrive BReady
//   sync BReady; read m_b                          wait P0 V_R; [arrive P0Free(i)]; release t0
//   O_L = O_L 2^(m_a - m_b) + P1 V(t1)_L (SS)      O_R = O_R 2^(m_a - m_b) + P1 V(t1)_R    (RS)
//   release t1                                     release t1
// Without t1 (odd tile count, last pair) B only adds P0 V(t0)_R and both end at m = m_a. The row sums: each
// warpgroup keeps l of its own P's in the current max's scale; the two are added after the loop.
//
// Barrier invariants (named barriers, 256 threads = both consumer warpgroups; one side arrives, the other syncs, so
// each must not be arrived at twice before the other side synced: the chain that guarantees it is given per id):
//   S0Done(i)  A arrives every pair, B syncs every pair. A arrives S0Done(i+1) after syncing BReady(i), which B arrives
//              after syncing S0Done(i) (pair i has t1 whenever a pair i + 1 exists).
//   AReady(i)  A arrives every pair, B syncs every pair. A arrives AReady(i+1) after syncing P0Free(i), which B arrives
//              after syncing AReady(i).
//   BReady(i)  B arrives and A syncs in every pair with t1. B arrives BReady(i+1) after syncing AReady(i+1), which A
//              arrives after syncing BReady(i).
//   P0Free(i)  B arrives and A syncs for every pair i but the last (A syncs it in pair i + 1 before it overwrites P0
//              and m_a). Counts match: each id gets the same number of arrivals from both sides.
//   End        both sync twice after the loop (all exchange reads done; then each one's l written).
// Shared data: P0 in the P panel and m_a in alpha[] (A writes after P0Free(i-1), B reads before P0Free(i)); m_b in
// inv[] (B writes after AReady(i), A reads after BReady(i), before AReady(i+1)); P1 in panel 8 of tile t1's stage
// (B writes after its S1 wgmma completed; A reads it before releasing t1, so the producer cannot refill it earlier).
// Ring mbarriers as in kernel.cuh: every consumer thread arrives once on empty(t) for every tile t (count 256), after
// its last wgmma read of that stage; each warpgroup waits full(t) (parity (t / 2) & 1) before it reads tile t, which
// cannot be refilled (phase + 2) before this thread's own empty arrival.
#pragma once

#if defined(ATTNSERVE_SM90_DEVICE)

namespace attnserve::cuda::mla90 {

constexpr int kBarSeeS0Done = 3, kBarSeeAReady = 4, kBarSeeBReady = 5, kBarSeeP0Free = 6, kBarSeeEnd = 7;

// P (bf16 A fragments, pa[kk] as acc_to_a makes them) to a SW128 panel of 64 rows x 64 keys, the thread's rows.
__device__ __forceinline__ void seesaw_store_p(uint32_t panel, const Rows& rw, const uint32_t (&pa)[4][4]) {
  const uint32_t row0 = panel + uint32_t(rw.r0 * 128), row1 = panel + uint32_t(rw.r1 * 128);
  const int g = rw.r0 & 7, tb = 4 * (rw.lane & 3);
#pragma unroll
  for (int nb = 0; nb < 8; ++nb) {
    const uint32_t off = uint32_t(((nb ^ g) << 4) + tb);
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(row0 + off), "r"(pa[nb >> 1][2 * (nb & 1)]) : "memory");
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(row1 + off), "r"(pa[nb >> 1][2 * (nb & 1) + 1]) : "memory");
  }
}

// 2^((m_from - m_to) u): the rescale from one running max to a later one (m_to >= m_from; -inf handled as in
// Softmax::step_t: m_to = -inf gives exponent base 0, m_from = -inf gives 0).
__device__ __forceinline__ float seesaw_rescale(float m_from, float m_to, float u) {
  const float ms = m_to == -INFINITY ? 0.f : m_to * u;
  return ex2(fmaf(m_from, u, -ms));
}

// O half += P V half: V = 4 panels of the stage from vpanel (MN-major), P from registers (RS) or a panel (SS).
__device__ __forceinline__ void seesaw_pv_rs(float (&o)[128], const uint32_t (&pa)[4][4], uint32_t vpanel) {
  const uint64_t dv = sm90::desc_mnmajor(vpanel, kPanelBytes);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    sm90::Wgmma<__nv_bfloat16, 256>::rs<1>(o, pa[kk], desc_plus(dv, uint32_t(kk * 16 * 128)), 1);
}
__device__ __forceinline__ void seesaw_pv_ss(float (&o)[128], uint32_t ppanel, uint32_t vpanel) {
  const uint64_t dp = sm90::desc_kmajor(ppanel), dv = sm90::desc_mnmajor(vpanel, kPanelBytes);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    sm90::Wgmma<__nv_bfloat16, 256>::ss<0, 1>(o, desc_plus(dp, uint32_t(kk * 32)),
                                              desc_plus(dv, uint32_t(kk * 16 * 128)), 1);
}

// The two row sums added after the loop (End barrier, both warpgroups): own = this warpgroup's quad-summed l, mine /
// theirs = its exchange arrays. Returns the total in the same order in both (a + b is commutative in IEEE).
__device__ __forceinline__ void seesaw_total_l(const Rows& rw, float own0, float own1, float* mine, const float* theirs,
                                               float& L0, float& L1) {
  sm90::named_sync(kBarSeeEnd, 256);  // every read of alpha[] / inv[] in the loop is done
  if ((rw.lane & 3) == 0) {
    mine[rw.r0] = own0;
    mine[rw.r1] = own1;
  }
  sm90::named_sync(kBarSeeEnd, 256);
  L0 = own0 + theirs[rw.r0];
  L1 = own1 + theirs[rw.r1];
}

// WG A: S of the even tiles, O[:, 0:256) and the LSE.
__device__ __forceinline__ void seesaw_a_role(const Params& p, const Block& b, const Smem& sm, int warp, int lane) {
  Rows rw;
  rw.init(warp & 3, lane);
  Softmax st;
  st.init(p, b, rw);
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  const int n = b.n_tiles, pairs = (n + 1) / 2;
  const uint64_t dq = sm90::desc_kmajor(sm.q);
  float s[32];
  for (int i = 0; i < pairs; ++i) {
    const int t0 = 2 * i, t1 = t0 + 1;
    const bool has1 = t1 < n;
    sm90::mbar_wait(sm.full(t0), (t0 / kStages) & 1);
    sm90::fence_proxy_async();
    sm90::wg_fence();
    issue_s(dq, sm.stage(t0), s);
    sm90::wg_commit();
    sm90::wg_wait<0>();
    sm90::fence_regs(s);
    sm90::named_arrive(kBarSeeS0Done, 256);
    float al0, al1;
    st.step(s, b.k_begin + t0 * kTileKeys, lane, al0, al1);  // m -> m_a; l_A in m_a's scale
    uint32_t pa[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) sm90::acc_to_a<__nv_bfloat16>(s, kk, pa[kk]);
    if (i > 0) sm90::named_sync(kBarSeeP0Free, 256);  // B's wgmma read P0 of pair i - 1, B read m_a
    seesaw_store_p(sm.p_tile, rw, pa);
    if ((lane & 3) == 0) {
      sm.alpha[rw.r0] = st.m0;
      sm.alpha[rw.r1] = st.m1;
    }
    sm90::fence_proxy_async();  // P0's generic writes, for B's wgmma
    sm90::named_arrive(kBarSeeAReady, 256);
    scale_rows(o, al0, al1);
    sm90::fence_regs(o);
    sm90::wg_fence();
    seesaw_pv_rs(o, pa, sm.stage(t0));  // V(t0) columns 0..255 = panels 0..3
    sm90::wg_commit();
    sm90::wg_wait<0>();
    sm90::fence_regs(o);
    sm90::mbar_arrive(sm.empty(t0));
    if (has1) {
      sm90::named_sync(kBarSeeBReady, 256);
      const float mb0 = sm.inv[rw.r0], mb1 = sm.inv[rw.r1];
      const float f0 = seesaw_rescale(st.m0, mb0, st.u), f1 = seesaw_rescale(st.m1, mb1, st.u);
      st.m0 = mb0;
      st.m1 = mb1;
      st.l0 *= f0;
      st.l1 *= f1;
      scale_rows(o, f0, f1);
      sm90::mbar_wait(sm.full(t1), (t1 / kStages) & 1);  // completed already (B waited); orders the bytes
      sm90::fence_proxy_async();
      sm90::fence_regs(o);
      sm90::wg_fence();
      seesaw_pv_ss(o, sm.stage(t1) + uint32_t((kPanels - 1) * kPanelBytes), sm.stage(t1));
      sm90::wg_commit();
      sm90::wg_wait<0>();
      sm90::fence_regs(o);
      sm90::mbar_arrive(sm.empty(t1));
    }
  }
  float L0, L1;
  seesaw_total_l(rw, ptx::quad_sum(st.l0), ptx::quad_sum(st.l1), sm.alpha, sm.inv, L0, L1);
  const float inv0 = L0 > 0.f ? 1.f / L0 : 0.f, inv1 = L1 > 0.f ? 1.f / L1 : 0.f;
  const float lse0 = L0 > 0.f ? (st.m0 * st.u + log2f(L0)) * 0.6931471805599453f : -INFINITY;
  const float lse1 = L1 > 0.f ? (st.m1 * st.u + log2f(L1)) * 0.6931471805599453f : -INFINITY;
  store_rows(p, b, rw, o, 0, inv0, inv1, true, lse0, lse1);
}

// WG B: S of the odd tiles, O[:, 256:512).
__device__ __forceinline__ void seesaw_b_role(const Params& p, const Block& b, const Smem& sm, int warp, int lane) {
  Rows rw;
  rw.init(warp & 3, lane);
  Softmax st;
  st.init(p, b, rw);
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  const int n = b.n_tiles, pairs = (n + 1) / 2;
  const uint64_t dq = sm90::desc_kmajor(sm.q);
  float s[32];
  for (int i = 0; i < pairs; ++i) {
    const int t0 = 2 * i, t1 = t0 + 1;
    const bool has1 = t1 < n;
    sm90::named_sync(kBarSeeS0Done, 256);
    if (has1) {
      sm90::mbar_wait(sm.full(t1), (t1 / kStages) & 1);
      sm90::fence_proxy_async();
      sm90::wg_fence();
      issue_s(dq, sm.stage(t1), s);
      sm90::wg_commit();
      sm90::wg_wait<0>();
      sm90::fence_regs(s);
    }
    sm90::named_sync(kBarSeeAReady, 256);
    const float ma0 = sm.alpha[rw.r0], ma1 = sm.alpha[rw.r1];
    const float g0 = seesaw_rescale(st.m0, ma0, st.u), g1 = seesaw_rescale(st.m1, ma1, st.u);
    st.m0 = ma0;
    st.m1 = ma1;
    st.l0 *= g0;
    st.l1 *= g1;
    scale_rows(o, g0, g1);
    sm90::mbar_wait(sm.full(t0), (t0 / kStages) & 1);  // completed already (A waited); orders the bytes
    sm90::fence_proxy_async();
    sm90::fence_regs(o);
    sm90::wg_fence();
    seesaw_pv_ss(o, sm.p_tile, sm.stage(t0) + uint32_t(4 * kPanelBytes));  // V(t0) columns 256..511
    sm90::wg_commit();
    uint32_t pa[4][4];
    float al0 = 1.f, al1 = 1.f;
    if (has1) {  // under P0 V_R: the softmax touches s and the row state only, never o
      st.step(s, b.k_begin + t1 * kTileKeys, lane, al0, al1);  // m_a -> m_b; l_B in m_b's scale
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) sm90::acc_to_a<__nv_bfloat16>(s, kk, pa[kk]);
      seesaw_store_p(sm.stage(t1) + uint32_t((kPanels - 1) * kPanelBytes), rw, pa);
      if ((lane & 3) == 0) {
        sm.inv[rw.r0] = st.m0;
        sm.inv[rw.r1] = st.m1;
      }
      sm90::fence_proxy_async();  // P1's generic writes, for A's wgmma
      sm90::named_arrive(kBarSeeBReady, 256);
    }
    sm90::wg_wait<0>();
    sm90::fence_regs(o);
    if (i + 1 < pairs) sm90::named_arrive(kBarSeeP0Free, 256);
    sm90::mbar_arrive(sm.empty(t0));
    if (has1) {
      scale_rows(o, al0, al1);
      sm90::fence_regs(o);
      sm90::wg_fence();
      seesaw_pv_rs(o, pa, sm.stage(t1) + uint32_t(4 * kPanelBytes));
      sm90::wg_commit();
      sm90::wg_wait<0>();
      sm90::fence_regs(o);
      sm90::mbar_arrive(sm.empty(t1));
    }
  }
  float L0, L1;
  seesaw_total_l(rw, ptx::quad_sum(st.l0), ptx::quad_sum(st.l1), sm.inv, sm.alpha, L0, L1);
  const float inv0 = L0 > 0.f ? 1.f / L0 : 0.f, inv1 = L1 > 0.f ? 1.f / L1 : 0.f;
  store_rows(p, b, rw, o, kHalfDv, inv0, inv1, false, 0.f, 0.f);
}

}  // namespace attnserve::cuda::mla90

#endif  // ATTNSERVE_SM90_DEVICE
