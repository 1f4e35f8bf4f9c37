// Hopper (sm_90a) dense paged attention for prefill/extend: tile shapes and shared-memory size.
// Host-visible (no device code) so the plan (attention/plan.cpp) can size and choose.
#pragma once
#include <cstddef>

#include "cuda/common/head_dim_list.h"
#include "cuda/common/plan_util.h"

namespace attnserve::cuda::attn90 {

// (q/k, v) head dims of the instantiations (bf16 / f16, K/V of q's dtype); 192/128 is DeepSeek's
// non-absorbed MLA prefill.
using HeadDims = HeadDimList<HeadDimPair<64, 64>, HeadDimPair<96, 96>, HeadDimPair<128, 128>, HeadDimPair<192, 192>,
                             HeadDimPair<192, 128>, HeadDimPair<256, 256>>;

// Two kernels share the tile math (tile_math.cuh) and differ in who loads:
//   kCoop (1): 256 threads = 2 consumer warpgroups that also issue the cp.async loads; a CTA
//              barrier per tile; 2 stages.
//   kWarpSpecialized (2): 384 threads = a producer warpgroup (cp.async, setmaxnreg down; its
//              arrivals on the full mbarriers fire when its copies land, so up to 3 tiles are in
//              flight) and 2 consumer warpgroups (setmaxnreg up) releasing stages through empty
//              mbarriers; 3 stages, so the consumer warpgroups drift apart.
//   kPingPong (3, the auto choice): kWarpSpecialized whose consumers take turns on the tensor
//              cores (named barriers): each issues S of this tile and P V of the previous one
//              as two commit groups, runs the softmax's first half once S lands (while its
//              P V runs), then the other warpgroup's block executes under the rest. Its softmax
//              keeps a stale running max (O rescaled only when a row's max grows by > 2^8), and
//              the rare rescale runs under S(t + 1), before P V(t) is issued.
//   kPingPongEager (4, bench/test A/B only, never chosen): the session-3 ping-pong (exact running
//              max, O rescaled after every tile on the path to the next block).
enum Variant : int { kCoop = 1, kWarpSpecialized = 2, kPingPong = 3, kPingPongEager = 4 };

constexpr int kThreads = 256;
constexpr int kThreadsWs = 384;
constexpr int kRows = 128;      // packed (q_row * group + head) rows per CTA
constexpr int kTileKeys = 128;  // keys per tile of the FP8 kernel (fp8_config.h), and of the bf16 ones up to d 128
constexpr int kStages = 2;      // kCoop: 160 KB at d 128

// 64-column SW128 panels of a head dim (d 96 takes 2: its second panel is half used).
constexpr int panels(int d) { return (d + 63) / 64; }

// Tiles per head-dim pair, from the shared-memory and register budgets (FA3's hopper/tile_size.h
// makes the same trade: smaller key tiles as d grows). Keys per K/V tile = the N of S = Q K^T: 128 up
// to d 128, 64 at 192 and 192/128, 32 at 256, so that the producer kernels keep >= 3 stages: in the
// ping-pong a block holds two stages (S of tile t, P V of tile t - 1), so with 2 stages the next
// tile's loads start only after P V(t - 1) and their latency is exposed on every tile (measured:
// 2-stage tiles at 192/128, 192, 256 took ~1 us longer than the d 128 tile, bench/NOTES.md "Session 5").
// A multiple of 32 (the 256-thread kCoop loader covers 32 rows per pass) and of 16 (P's k-steps).
constexpr int tile_keys(int d, int d_v) { return d <= 128 ? kTileKeys : d <= 192 ? 64 : 32; }
// Pipeline stages of the producer kernels: 3 (224 KB at d 128; 192/128: 169 KB, 192: 193 KB), 4 at
// d 256 (193 KB): its 32-key tiles are short against the gather's latency.
constexpr int ws_stages(int d, int d_v) { return d <= 192 ? 3 : 4; }
constexpr int kProducerRegs = 72;  // setmaxnreg: 128 * 72 + 256 * 216 <= 168 * 384
constexpr int kConsumerRegs = 216;
// setmaxnreg moves registers inside the CTA's launch allocation (168 per thread for 384 threads,
// ptxas's entry count), not the SM's 65536: a split that needs more makes the consumers'
// setmaxnreg.inc wait forever. 48 / 232 did exactly that (a hung run on 2026-12-01).
constexpr int kWsEntryRegs = 168;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= kWsEntryRegs * kThreadsWs,
              "setmaxnreg split exceeds the CTA's registers");
constexpr std::size_t kAlignSlack = 1024;  // dynamic smem rounded up to the 1024-byte swizzle atom

// The producer kernels' TMA K/V loads (Plan::sm90_tma, kv_tma.h): pages of a multiple of 16 slots, so a
// 16-slot (or larger) box never crosses a page; smaller pages keep the cp.async gather.
constexpr int kTmaMinBoxRows = 16;
constexpr bool tma_applies(long long page_size) { return page_size > 0 && page_size % kTmaMinBoxRows == 0; }

// How the producer kernels load a K/V tile (Tuning::sm90_tma's values; Plan::sm90_kv_load):
//   kKvGather (0): the cp.async gather of tile_load.cuh, every tile.
//   kKvTma (1): whole tiles below k_len by TMA boxes (tile_load_tma.cuh), the rest by the gather.
//   kKvKTma (2), kKvVTma (3), kKvLean (4): the split loaders of tile_load_split.cuh, kPingPong only, at the
//     head dims split_built() lists, on pages of a multiple of 16: a full tile (every key below k_len and
//     inside the page table) loads K (2) or V (3) by TMA boxes and the other by a lean cp.async gather
//     whose page and slot arithmetic is per 16-key row group (uniform over the CTA), not per row; 4 loads
//     both by that lean gather (no TMA: the control that separates the two effects). The other tiles take
//     the gather. bench/NOTES.md "Session 8: Hopper prefill, K by TMA and V by cp.async".
enum KvLoad : int { kKvGather = 0, kKvTma = 1, kKvKTma = 2, kKvVTma = 3, kKvLean = 4 };
constexpr bool is_split_load(int kv) { return kv == kKvKTma || kv == kKvVTma || kv == kKvLean; }
// The head dims with split-loader kernels (their own instantiation TUs, *_split.cu): the d >= 128 shapes
// where whole-tile TMA lost to the gather at page 16.
constexpr bool split_built(int d, int d_v) {
  return (d == 128 && d_v == 128) || (d == 192 && d_v == 128) || (d == 256 && d_v == 256);
}

constexpr bool is_ws(int variant) {
  return variant == kWarpSpecialized || variant == kPingPong || variant == kPingPongEager;
}
constexpr int stages_of(int d, int d_v, int variant) { return is_ws(variant) ? ws_stages(d, d_v) : kStages; }
// kPingPongEager (an A/B baseline) is instantiated at d 64 and 128 only.
constexpr bool variant_built(int d, int d_v, int variant) {
  return variant != kPingPongEager || (d == d_v && (d == 64 || d == 128));
}

// Q tile (panels(d) x kRows x 128 B) + stages x {K (panels(d)), V (panels(d_v))} tiles of
// tile_keys x 128 B panels; + the producer kernels' full/empty mbarriers.
constexpr std::size_t smem_bytes(int d, int d_v, int variant = kCoop) {
  const std::size_t stages = std::size_t(stages_of(d, d_v, variant));
  const std::size_t bars = is_ws(variant) ? 2 * stages * 8 : 0;
  const std::size_t kv_panels = std::size_t(panels(d) + panels(d_v));
  return kAlignSlack + std::size_t(panels(d)) * kRows * 128 +
         stages * kv_panels * std::size_t(tile_keys(d, d_v)) * 128 + bars;
}

// Whether this build carries the sm_90a kernels (CMake defines ATTNSERVE_HAVE_SM90).
#ifdef ATTNSERVE_HAVE_SM90
constexpr bool kBuilt = true;
#else
constexpr bool kBuilt = false;
#endif

}  // namespace attnserve::cuda::attn90
