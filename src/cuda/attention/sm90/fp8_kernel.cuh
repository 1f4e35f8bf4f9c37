// Hopper (sm_90a) FP8 paged attention for prefill/extend (fp8_config.h): q, K, V e4m3, out bf16/f16.
//
// One CTA = (m-block of 128 packed rows, kv head, request), 384 threads:
//   producer warpgroup: Q, then per tile t: K(t) -> stage t % S (SW128) and V(t) -> staging t % 2 by
//     cp.async, each published through an mbarrier when its copies land (cp.async.mbarrier.arrive);
//     then the transpose of V(t - 1) (staged -> Vt of its stage), fence.proxy.async, arrive on that
//     stage's full-V barrier. A producer named barrier keeps a staging buffer from being refilled
//     before every thread has read it.
//   two consumer warpgroups, ping-pong as the bf16 kPingPong (kernel.cuh): block t = S(t) then
//     P V(t - 1) as two commit groups while holding the turn, the softmax of S(t) under P V(t - 1).
// Barriers per stage s: full_k (128 producer arrivals, copies landed), full_v (128, transposed),
// empty (256 consumer arrivals: K and Vt of the stage read). Staged per staging buffer (128).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cta.cuh"
#include "cuda/common/sm90/sync.cuh"
#include "fp8_config.h"
#include "fp8_tile_math.cuh"

namespace attnserve::cuda::attn90 {

template <typename TO>
__global__ void __launch_bounds__(kThreadsWs, 1) attention_sm90_fp8_kernel(const Params p) {
#if defined(ATTNSERVE_SM90_DEVICE)
  constexpr int S = kFp8Stages, kTile = Fp8Loader::kTileBytes;
  char* smem = smem_base();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warpgroup_index();
  Block b;
  if (!b.init(p)) return;            // uniform over the CTA
  char* sQ = smem;                   // [128 rows][128 B]
  char* sKV = smem + kRows * 128;    // [S][K, Vt][128][128 B]
  char* sStg = sKV + S * 2 * kTile;  // [2][128 keys][128 B]
  const uint32_t bars = ptx::smem_addr(sStg + kFp8VStaging * kTile);
  auto full_k = [&](int s) { return bars + uint32_t(s * 8); };
  auto full_v = [&](int s) { return bars + uint32_t((S + s) * 8); };
  auto empty = [&](int s) { return bars + uint32_t((2 * S + s) * 8); };
  auto staged = [&](int v) { return bars + uint32_t((3 * S + v) * 8); };
  auto stage_k = [&](int t) { return ptx::smem_addr(sKV + (t % S) * 2 * kTile); };
  auto stage_vt = [&](int t) { return ptx::smem_addr(sKV + (t % S) * 2 * kTile + kTile); };
  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      sm90::mbar_init(full_k(s), 128);
      sm90::mbar_init(full_v(s), 128);
      sm90::mbar_init(empty(s), 256);
    }
    for (int v = 0; v < kFp8VStaging; ++v) sm90::mbar_init(staged(v), 128);
  }
  __syncthreads();
  const int n = b.n_tiles;

  if (wg == 0) {
    sm90::setmaxnreg_dec<kProducerRegs>();
    Fp8Loader ld(p, b, tid);
    ld.load_q(p, b, sQ);  // tracked by tile 0's full_k arrival
    // Transposes V(u) once its copies (every producer thread's) have landed, publishes Vt(u).
    auto transpose = [&](int u) {
      sm90::mbar_wait(staged(u % kFp8VStaging), (u / kFp8VStaging) & 1);
      transpose_v(ptx::smem_addr(sStg + (u % kFp8VStaging) * kTile), stage_vt(u), tid);
      sm90::fence_proxy_async();  // the st.shared bytes, seen by the consumers' wgmma (async proxy)
      sm90::mbar_arrive(full_v(u % S));
    };
    auto produce = [&](auto pow2) {
      constexpr bool kPow2 = decltype(pow2)::value;
      for (int t = 0; t < n; ++t) {
        const int s = t % S;
        ld.template read_pages_t<kPow2>(p, b, t);
        if (t >= S) sm90::mbar_wait(empty(s), ((t / S) - 1) & 1);  // K and Vt of tile t - S are read
        ld.template slots_t<kPow2>(p, b, t);
        ld.issue_k(p, sKV + s * 2 * kTile);
        sm90::cp_async_mbar_arrive(full_k(s));  // fires when this thread's copies so far (Q, K(t)) land
        // staging t % 2 held V(t - 2), transposed by every producer thread in iteration t - 1
        if (t >= kFp8VStaging) sm90::named_sync(kFp8ProducerBar, 128);
        ld.issue_v(p, sStg + (t % kFp8VStaging) * kTile);
        sm90::cp_async_mbar_arrive(staged(t % kFp8VStaging));
        if (t > 0) transpose(t - 1);
      }
      if (n > 0) transpose(n - 1);
    };
    if (p.page_shift >= 0) produce(std::true_type{});
    else produce(std::false_type{});
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }

  sm90::setmaxnreg_inc<kConsumerRegs>();
  const int w = wg - 1;  // consumer warpgroup: rows 64 w ..
  Fp8Consumer<TO> c;
  c.init(p, b, w, warp & 3, lane);
  const uint32_t sQa = ptx::smem_addr(sQ) + uint32_t(w * 64 * 128);
  if (n > 0) {
    // Turns as kernel.cuh's kPingPong: named barrier 1 + w is warpgroup w's; warpgroup 1 grants the
    // first and skips its last hand-over. Blocks 0 and n peeled (no wgmma under a condition: C7520).
    float s[64];
    uint32_t pa[Fp8Consumer<TO>::kSteps][4];
    float al0, al1;
    auto pin = [&] {
#pragma unroll
      for (int kk = 0; kk < Fp8Consumer<TO>::kSteps; ++kk) sm90::fence_regs(pa[kk]);
      sm90::fence_regs(c.o);
    };
    if (w == 1) sm90::named_arrive(1, 256);
    sm90::mbar_wait(full_k(0), 0);
    sm90::fence_proxy_async();
    sm90::named_sync(1 + w, 256);
    sm90::wg_fence();
    c.issue_s(sQa, stage_k(0), s);
    sm90::wg_commit();
    sm90::named_arrive(2 - w, 256);
    sm90::wg_wait<0>();
    sm90::fence_regs(s);
    c.scores(s, b.k_begin, al0, al1);
    c.rescale = false;  // O is still 0
    c.to_a(s, pa);
    for (int t = 1; t < n; ++t) {
      sm90::mbar_wait(full_k(t % S), (t / S) & 1);
      sm90::mbar_wait(full_v((t - 1) % S), ((t - 1) / S) & 1);
      sm90::fence_proxy_async();
      sm90::named_sync(1 + w, 256);
      pin();
      sm90::wg_fence();
      c.issue_s(sQa, stage_k(t), s);
      sm90::wg_commit();
      c.rescale_o(al0, al1);  // under S(t), before P V(t - 1) reads O
      pin();
      sm90::wg_fence();
      c.issue_pv(stage_vt(t - 1), pa);
      sm90::wg_commit();
      sm90::named_arrive(2 - w, 256);
      sm90::wg_wait<1>();  // S(t) is done
      sm90::fence_regs(s);
      c.scores(s, b.k_begin + t * kTileKeys, al0, al1);
      sm90::wg_wait<0>();  // P V(t - 1) is done
      pin();
      sm90::mbar_arrive(empty((t - 1) % S));
      c.to_a(s, pa);
    }
    sm90::mbar_wait(full_v((n - 1) % S), ((n - 1) / S) & 1);
    sm90::fence_proxy_async();
    sm90::named_sync(1 + w, 256);
    c.rescale_o(al0, al1);
    pin();
    sm90::wg_fence();
    c.issue_pv(stage_vt(n - 1), pa);
    sm90::wg_commit();
    if (w == 0) sm90::named_arrive(2, 256);
    sm90::wg_wait<0>();
    sm90::fence_regs(c.o);
    sm90::mbar_arrive(empty((n - 1) % S));
  }
  c.store(p, b);
#endif
}

template <typename TO>
void launch_fp8(const Params& p, int m_blocks, int batch, cudaStream_t stream) {
  const dim3 grid(unsigned(m_blocks), unsigned(p.h_kv), unsigned(batch));
  const std::size_t smem = fp8_smem_bytes(128);
  static const bool configured = [&] {
    cudaFuncSetAttribute(attention_sm90_fp8_kernel<TO>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    return true;
  }();
  (void)configured;
  attention_sm90_fp8_kernel<TO><<<grid, kThreadsWs, smem, stream>>>(p);
}

}  // namespace attnserve::cuda::attn90
