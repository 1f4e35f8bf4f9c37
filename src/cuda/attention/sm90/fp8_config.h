// Hopper (sm_90a) FP8 paged prefill/extend: q, K and V fp8_e4m3 on FP8 wgmma. Host-visible (no device
// code) so the plan (attention/plan.cpp) can size and choose it.
//
// The kernel (fp8_kernel.cuh) is the bf16 ping-pong's structure (config.h kPingPong): a producer
// warpgroup gathering paged K/V by cp.async, two consumer warpgroups of 64 rows taking turns on the
// tensor cores, each issuing S(t) = Q K(t)^T and O += P(t - 1) V(t - 1) as two commit groups. What FP8
// changes: FP8 wgmma reads both operands K-major, so V [keys][d] is transposed in shared memory by the
// producer (staged by cp.async, then LDS / byte permutes / STS into Vt [d][keys]); P is converted to
// e4m3 in registers, and the transposed V's keys are stored in the order of P's register fragment (no
// register shuffles on the consumer side).
#pragma once
#include <cstddef>

#include "cuda/attention/sm90/config.h"
#include "cuda/common/plan_util.h"

namespace attnserve::cuda::attn90 {

using Fp8HeadDims = IntList<128>;  // q/k = v head dims of the FP8 instantiations (d 128: one 128-byte row)

constexpr int kFp8Stages = 4;       // K + Vt stages (32 KB each at d 128)
constexpr int kFp8VStaging = 2;     // V tiles as loaded, before the transpose
constexpr int kFp8ProducerBar = 3;  // named barrier of the producer warpgroup (1, 2: the consumers' turns)

// Q tile + stages x {K, Vt} + V staging, each rows x d bytes (d 128: 128 x 128 B), + mbarriers
// (full K, full V, empty per stage; staged per staging buffer).
constexpr std::size_t fp8_smem_bytes(int d) {
  const std::size_t tile = std::size_t(kTileKeys) * std::size_t(d);
  const std::size_t bars = std::size_t(3 * kFp8Stages + kFp8VStaging) * 8;
  return kAlignSlack + std::size_t(kRows) * std::size_t(d) + std::size_t(kFp8Stages) * 2 * tile +
         std::size_t(kFp8VStaging) * tile + bars;
}

}  // namespace attnserve::cuda::attn90
