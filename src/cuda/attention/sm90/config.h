// Hopper (sm_90a) dense paged attention for prefill/extend: tile shapes and shared-memory size.
// Host-visible (no device code) so the plan (attention/plan.cpp) can size and choose.
#pragma once
#include <cstddef>

#include "cuda/common/plan_util.h"

namespace attnserve::cuda::attn90 {

using HeadDims = IntList<64, 128>;  // head dims of the instantiations (bf16 / f16, K/V of q's dtype)

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
constexpr int kRows = 128;         // packed (q_row * group + head) rows per CTA
constexpr int kTileKeys = 128;     // keys per pipeline stage: the N of S = Q K^T (m64n128k16)
constexpr int kStages = 2;         // kCoop: 160 KB at d 128
constexpr int kStagesWs = 3;       // kWarpSpecialized: 224 KB at d 128 (the producer signals one tile late)
constexpr int kProducerRegs = 72;  // setmaxnreg: 128 * 72 + 256 * 216 <= 168 * 384
constexpr int kConsumerRegs = 216;
// setmaxnreg moves registers inside the CTA's launch allocation (168 per thread for 384 threads,
// ptxas's entry count), not the SM's 65536: a split that needs more makes the consumers'
// setmaxnreg.inc wait forever. 48 / 232 did exactly that (a hung run on 2026-12-01).
constexpr int kWsEntryRegs = 168;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= kWsEntryRegs * kThreadsWs,
              "setmaxnreg split exceeds the CTA's registers");
constexpr std::size_t kAlignSlack = 1024;  // dynamic smem rounded up to the 1024-byte swizzle atom

constexpr bool is_ws(int variant) {
  return variant == kWarpSpecialized || variant == kPingPong || variant == kPingPongEager;
}
constexpr int stages_of(int variant) { return is_ws(variant) ? kStagesWs : kStages; }

// Q tile + stages x {K, V} tiles, each d/64 SW128 panels of rows x 128 bytes; + mbarriers.
constexpr std::size_t smem_bytes(int d, int variant = kCoop) {
  const std::size_t panel_rows = std::size_t(d / 64) * 128;
  const std::size_t bars = is_ws(variant) ? 2 * kStagesWs * 8 : 0;
  return kAlignSlack + std::size_t(kRows) * panel_rows + std::size_t(stages_of(variant)) * 2 * kTileKeys * panel_rows +
         bars;
}

// Whether this build carries the sm_90a kernels (CMake defines ATTNSERVE_HAVE_SM90).
#ifdef ATTNSERVE_HAVE_SM90
constexpr bool kBuilt = true;
#else
constexpr bool kBuilt = false;
#endif

}  // namespace attnserve::cuda::attn90
