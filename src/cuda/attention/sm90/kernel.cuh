// Hopper (sm_90a) paged attention for prefill/extend: wgmma with shared-memory descriptors.
//
// One CTA = (m-block of 128 packed rows, kv head, request); packed row pr = q_row * group + head
// as in the portable kernel, so a K/V tile is read once for all query heads of its KV head.
// Two consumer warpgroups own 64 rows each and every key of a tile (tile_math.cuh: S = Q K^T by
// SS wgmma, online softmax in registers, O += P V by RS wgmma). K/V tiles of N keys (128 up to
// d 128 and at 192/128, 96 at d 192, 64 at d 256: config.h tile_keys) are gathered
// per token through the page table by cp.async (16-byte chunks per token row) into 128-byte
// swizzled panels (tile_load.cuh, common/wgmma.cuh); or, in the producer kernels with Plan::sm90_tma
// (pages of a multiple of 16), whole tiles below k_len by TMA boxes of a page run each
// (tile_load_tma.cuh), the rest still by cp.async; or (the ping-pong's split loaders, opt-in, launch_split)
// K or V of full tiles by TMA and the other by a lean cp.async gather (tile_load_split.cuh).
//
// Kernels (config.h): kCoop, where the consumers also load (2 stages, a CTA barrier per tile);
// kWarpSpecialized, where a producer warpgroup loads (3 stages, full/empty mbarriers); kPingPong
// (the auto choice), the same with the consumers taking turns on the tensor cores and each
// overlapping its softmax with its own P V (FA3's intra-warpgroup overlap).
// cp.async writes are generic-proxy writes that wgmma reads through the async proxy. kCoop: each
// writing thread waits for its copies, runs fence.proxy.async, then a CTA barrier. Producer
// kernels: each producer thread's cp.async.mbarrier.arrive fires when its copies land; the
// consumers run fence.proxy.async after their full-barrier wait, before the wgmmas.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "config.h"
#include "cta.cuh"
#include "cuda/common/sm90/sync.cuh"
#include "tile_load_split.cuh"
#include "tile_load_tma.cuh"
#include "tile_math.cuh"

namespace attnserve::cuda::attn90 {

template <typename T, int D, int DV>
__global__ void __launch_bounds__(kThreads, 1) attention_sm90_kernel(const Params p) {
#if defined(ATTNSERVE_SM90_DEVICE)
  using Tr = Traits<D, DV>;
  char* smem = smem_base();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  Block b;
  if (!b.init(p, Tr::kN)) return;  // uniform over the CTA
  char* sQ = smem;                 // [panels][128 rows][128 B]
  char* sKV = smem + Tr::kQBytes;  // [stages][K [panels(d)], V [panels(d_v)]][N keys][128 B]
  auto sK = [&](int tile) { return sKV + (tile % kStages) * Tr::kStageBytes; };

  // All 256 threads load; page ids of tile t + 1 are read one iteration ahead into registers.
  Loader<D, DV, kThreads> ld(p, b, tid);
  Consumer<T, D, DV> c;
  c.init(p, b, warp >> 2, warp & 3, lane);

  ld.load_q(p, b, sQ);
  if (b.n_tiles > 0) {  // group 0 = Q + tile 0
    ld.read_pages(p, b, 0);
    ld.issue(p, b, 0, sK(0), sK(0) + Tr::kKBytes);
  }
  ptx::cp_async_commit();
  if (b.n_tiles > 1) ld.read_pages(p, b, 1);

  const uint32_t sQa = ptx::smem_addr(sQ) + uint32_t((warp >> 2) * 64 * 128);  // this warpgroup's rows
  for (int t = 0; t < b.n_tiles; ++t) {
    if (t + 1 < b.n_tiles) ld.issue(p, b, t + 1, sK(t + 1), sK(t + 1) + Tr::kKBytes);
    ptx::cp_async_commit();
    if (t + 2 < b.n_tiles) ld.read_pages(p, b, t + 2);
    ptx::cp_async_wait<1>();    // this thread's copies of Q and tile t have landed
    sm90::fence_proxy_async();  // ... and are visible to wgmma's async proxy
    __syncthreads();            // ... for every thread's copies
    const uint32_t sKa = ptx::smem_addr(sK(t));
    c.attend(p, sQa, sKa, sKa + Tr::kKBytes, b.k_begin + t * Tr::kN);
    __syncthreads();  // both warpgroups are done with stage t % 2 before iteration t + 1 refills it
  }
  ptx::cp_async_wait<0>();
  c.store(p, b);
#endif
}

// PINGPONG: kPingPong (LAZY) or kPingPongEager (!LAZY); else kWarpSpecialized (LAZY).
// kv_tma: the caches' tensor maps (Plan::sm90_tma) or box_rows 0 (every tile by cp.async).
// KV: kKvGather, the kernels of launch() (whole tiles by TMA where kv_tma has maps, else the gather); or a
// split loader (kKvKTma, kKvVTma, kKvLean: tile_load_split.cuh, launch_split(), kPingPong only).
template <typename T, int D, int DV, bool PINGPONG, bool LAZY, int KV = kKvGather>
__global__ void __launch_bounds__(kThreadsWs, 1)
    attention_sm90_ws_kernel(const Params p, const __grid_constant__ KvTma kv_tma) {
#if defined(ATTNSERVE_SM90_DEVICE)
  using Tr = Traits<D, DV>;
  constexpr int kStagesWs = Tr::kStagesWs;
  char* smem = smem_base();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warpgroup_index();  // warp-uniform: the Q descriptor stays in uniform registers
  Block b;
  if (!b.init(p, Tr::kN)) return;  // uniform over the CTA
  char* sQ = smem;
  char* sKV = smem + Tr::kQBytes;  // [kStagesWs][K [panels(d)], V [panels(d_v)]][N keys][128 B]
  const uint32_t bars = ptx::smem_addr(sKV + kStagesWs * Tr::kStageBytes);
  auto full = [&](int s) { return bars + uint32_t(s * 8); };                 // producer -> consumers
  auto empty = [&](int s) { return bars + uint32_t((kStagesWs + s) * 8); };  // consumers -> producer
  auto stage_k = [&](int t) { return ptx::smem_addr(sKV + (t % kStagesWs) * Tr::kStageBytes); };
  if (tid == 0)
    for (int s = 0; s < kStagesWs; ++s) {
      sm90::mbar_init(full(s), 128);   // every producer thread, when its copies of the stage land
      sm90::mbar_init(empty(s), 256);  // every consumer thread, after its wgmmas read the stage
    }
  __syncthreads();
  const int n = b.n_tiles;

  if (wg == 0) {
    // Producer: tile t goes into stage t % 3 once the consumers released tile t - 3. Each thread
    // publishes its copies of a tile through cp.async.mbarrier.arrive (the arrival happens when
    // they land), so it never waits on its own copies and up to three tiles are in flight. The
    // consumers fence the landed bytes into the async proxy after their full-barrier wait.
    // TMA tiles (tile_load_tma.cuh, kv_tma.box_rows > 0): warp 0 issues the boxes, lane 0 announcing
    // the bytes; the other threads only arrive. The rest, and every tile without maps, by cp.async.
    sm90::setmaxnreg_dec<kProducerRegs>();
    Loader<D, DV, 128> ld(p, b, tid);
    ld.load_q(p, b, sQ);
    if (n > 0) sm90::cp_async_mbar_arrive_inc(full(0));  // Q's copies, as an extra arrival on tile 0's phase
    auto produce = [&](auto pow2) {
      constexpr bool kPow2 = decltype(pow2)::value;
      for (int t = 0; t < n; ++t) {
        const int s = t % kStagesWs;
        const bool tma = tma_tile<Tr::kN>(p, b, kv_tma, t);
        if (!tma) ld.template read_pages_t<kPow2>(p, b, t);  // page-id loads in flight during the wait below
        if (t >= kStagesWs) sm90::mbar_wait(empty(s), ((t / kStagesWs) - 1) & 1);
        char* dK = sKV + s * Tr::kStageBytes;
        if (tma) {
          if (warp == 0) {
            const uint32_t sK = ptx::smem_addr(dK);
            issue_tile_tma<D, DV>(p, b, kv_tma, t, sK, sK + Tr::kKBytes, full(s), lane);
            if (lane != 0) sm90::mbar_arrive(full(s));
          } else {
            sm90::mbar_arrive(full(s));
          }
        } else {
          ld.template issue_t<kPow2>(p, b, t, dK, dK + Tr::kKBytes);
          sm90::cp_async_mbar_arrive(full(s));
        }
      }
    };
    if constexpr (is_split_load(KV)) {
      // Full tiles by the split loader (lane 0 of each warp issues its TMA boxes first, if any), the rest
      // by the gather; every producer thread arrives once per tile either way (tile_load_split.cuh).
      SplitLoader<D, DV, KV> sl(p, b, tid);
      auto produce_split = [&](auto pow2) {
        constexpr bool kPow2 = decltype(pow2)::value;
        for (int t = 0; t < n; ++t) {
          const int s = t % kStagesWs;
          const bool full_tile = sl.template full_tile<kPow2>(p, b, kv_tma, t);
          if (full_tile) sl.template read_pages<kPow2>(p, b, t);
          else ld.template read_pages_t<kPow2>(p, b, t);
          if (t >= kStagesWs) sm90::mbar_wait(empty(s), ((t / kStagesWs) - 1) & 1);
          char* dK = sKV + s * Tr::kStageBytes;
          int slot[SplitLoader<D, DV, KV>::kGroups];
          if (full_tile && sl.template slots<kPow2>(p, b, t, slot)) {
            const uint32_t sK = ptx::smem_addr(dK), sV = sK + uint32_t(Tr::kKBytes);
            if constexpr (KV != kKvLean) sl.issue_tma(b, kv_tma, warp, KV == kKvKTma ? sK : sV, full(s));
            sl.issue(p, slot, sK, sV);
          } else {
            if (full_tile) ld.template read_pages_t<kPow2>(p, b, t);  // an invalid page id: the gather's zeros
            ld.template issue_t<kPow2>(p, b, t, dK, dK + Tr::kKBytes);
          }
          sm90::cp_async_mbar_arrive(full(s));
        }
      };
      if (p.page_shift >= 0) produce_split(std::true_type{});
      else produce_split(std::false_type{});
    } else {
      if (p.page_shift >= 0) produce(std::true_type{});
      else produce(std::false_type{});
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }

  sm90::setmaxnreg_inc<kConsumerRegs>();
  const int w = wg - 1;  // consumer warpgroup: rows 64 w ..
  Consumer<T, D, DV, LAZY> c;
  c.init(p, b, w, warp & 3, lane);
  const uint32_t sQa = ptx::smem_addr(sQ) + uint32_t(w * 64 * 128);
  if constexpr (!PINGPONG) {
    for (int t = 0; t < n; ++t) {
      sm90::mbar_wait(full(t % kStagesWs), (t / kStagesWs) & 1);
      sm90::fence_proxy_async();  // the producer's cp.async bytes, seen through the async proxy
      const uint32_t sKa = stage_k(t);
      c.attend(p, sQa, sKa, sKa + Tr::kKBytes, b.k_begin + t * Tr::kN);
      sm90::mbar_arrive(empty(t % kStagesWs));
    }
  } else if (n > 0) {
    // Block t (t = 0..n) = P V of tile t - 1 and S of tile t, issued while holding the turn:
    // named barrier 1 + w is warpgroup w's turn; after issuing, it hands the turn to the other.
    // Warpgroup 1 grants the first turn and skips its last hand-over, so each barrier sees as many
    // arrivals as syncs (n + 1). Blocks 0 and n are peeled: a wgmma under a condition makes
    // ptxas serialize every wgmma of the kernel (C7520).
    float s[Tr::kSAcc];
    uint32_t pa[Tr::kN / 16][4];
    float al0, al1;  // O's rescale for the tile whose P is in pa
    auto pin = [&] {
#pragma unroll
      for (int kk = 0; kk < Tr::kN / 16; ++kk) sm90::fence_regs(pa[kk]);
      sm90::fence_regs(c.o);
    };
    if (w == 1) sm90::named_arrive(1, 256);
    sm90::mbar_wait(full(0), 0);
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
    // Block t: S of tile t, then P V of tile t - 1, as two commit groups (FA3's intra-warpgroup
    // overlap): the softmax's first half (max, exponents, sums) on S(t) runs while P V(t - 1) is
    // still in flight; P's conversion waits for it. O's rescale for tile t - 1: LAZY, between the
    // S(t) and P V(t - 1) issues, under S(t) (FA3's RescaleOBeforeGemm), rarely needed at all;
    // !LAZY, after P V(t - 1) lands, on the path to the next block (the session-3 order).
    for (int t = 1; t < n; ++t) {
      sm90::mbar_wait(full(t % kStagesWs), (t / kStagesWs) & 1);
      sm90::fence_proxy_async();
      sm90::named_sync(1 + w, 256);
      pin();
      sm90::wg_fence();
      c.issue_s(sQa, stage_k(t), s);
      sm90::wg_commit();
      if constexpr (LAZY) {
        c.rescale_o(al0, al1);
        pin();
        sm90::wg_fence();  // O's registers changed since the last fence
      }
      c.issue_pv(stage_k(t - 1) + Tr::kKBytes, pa);
      sm90::wg_commit();
      sm90::named_arrive(2 - w, 256);
      sm90::wg_wait<1>();  // S(t) is done (groups complete in order)
      sm90::fence_regs(s);
      c.scores(s, b.k_begin + t * Tr::kN, al0, al1);
      sm90::wg_wait<0>();  // P V(t - 1) is done
      pin();
      sm90::mbar_arrive(empty((t - 1) % kStagesWs));  // K and V of tile t - 1 are read
      if constexpr (!LAZY) c.rescale_o(al0, al1);
      c.to_a(s, pa);
    }
    sm90::named_sync(1 + w, 256);
    if constexpr (LAZY) c.rescale_o(al0, al1);
    pin();
    sm90::wg_fence();
    c.issue_pv(stage_k(n - 1) + Tr::kKBytes, pa);
    sm90::wg_commit();
    if (w == 0) sm90::named_arrive(2, 256);
    sm90::wg_wait<0>();
    sm90::fence_regs(c.o);
    sm90::mbar_arrive(empty((n - 1) % kStagesWs));
  }
  c.store(p, b);
#endif
}

// tma: the producer kernels load whole K/V tiles by TMA where the cache allows it (kv_tma.h).
template <typename T, int D, int DV>
void launch(const Params& p, int variant, bool tma, int m_blocks, int batch, cudaStream_t stream) {
  const dim3 grid(unsigned(m_blocks), unsigned(p.h_kv), unsigned(batch));
  if (is_ws(variant)) {
    KvTma maps{};
    if (tma) encode_kv_tma(p, D, DV, Traits<D, DV>::kN, maps);  // box_rows stays 0 where it fails
    // kPingPongEager where it is not instantiated (the plan never picks it there): kPingPong's kernel.
    constexpr bool kEagerLazy = !variant_built(D, DV, kPingPongEager);
    auto kernel = variant == kPingPong        ? attention_sm90_ws_kernel<T, D, DV, true, true>
                  : variant == kPingPongEager ? attention_sm90_ws_kernel<T, D, DV, true, kEagerLazy>
                                              : attention_sm90_ws_kernel<T, D, DV, false, true>;
    const int smem = int(smem_bytes(D, DV, variant));
    static const bool configured = [&] {
      for (auto k :
           {attention_sm90_ws_kernel<T, D, DV, true, true>, attention_sm90_ws_kernel<T, D, DV, true, kEagerLazy>,
            attention_sm90_ws_kernel<T, D, DV, false, true>})
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      return true;
    }();
    (void)configured;
    kernel<<<grid, kThreadsWs, smem, stream>>>(p, maps);
  } else {
    auto kernel = attention_sm90_kernel<T, D, DV>;
    static const bool configured = [&] {
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes(D, DV, kCoop)));
      return true;
    }();
    (void)configured;
    kernel<<<grid, kThreads, smem_bytes(D, DV, kCoop), stream>>>(p);
  }
}

// The split loaders (kv: kKvKTma, kKvVTma or kKvLean), on the ping-pong only; instantiated in their own
// TUs (instantiations/*_split.cu) so that the default kernels' TUs are unchanged.
template <typename T, int D, int DV>
void launch_split(const Params& p, int kv, int m_blocks, int batch, cudaStream_t stream) {
  static_assert(split_built(D, DV), "config.h split_built lists the instantiated head dims");
  const dim3 grid(unsigned(m_blocks), unsigned(p.h_kv), unsigned(batch));
  KvTma maps{};
  if (kv != kKvLean) encode_kv_tma(p, D, DV, Traits<D, DV>::kN, maps);  // box_rows 0 where it fails: the gather
  auto kernel = kv == kKvKTma   ? attention_sm90_ws_kernel<T, D, DV, true, true, kKvKTma>
                : kv == kKvVTma ? attention_sm90_ws_kernel<T, D, DV, true, true, kKvVTma>
                                : attention_sm90_ws_kernel<T, D, DV, true, true, kKvLean>;
  const int smem = int(smem_bytes(D, DV, kPingPong));
  static const bool configured = [&] {
    for (auto k : {attention_sm90_ws_kernel<T, D, DV, true, true, kKvKTma>,
                   attention_sm90_ws_kernel<T, D, DV, true, true, kKvVTma>,
                   attention_sm90_ws_kernel<T, D, DV, true, true, kKvLean>})
      cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    return true;
  }();
  (void)configured;
  kernel<<<grid, kThreadsWs, smem, stream>>>(p, maps);
}

}  // namespace attnserve::cuda::attn90
