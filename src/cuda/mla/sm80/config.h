// Portable (sm80+) MLA kernel: what it supports, its tile shapes and shared-memory size. Host-visible
// (plain C++): the plan (../plan.cpp) sizes and chooses with it, the kernel (kernel.cuh) is built from it.
#pragma once
#include <cstddef>

#include "cuda/common/plan_util.h"

namespace attnserve::cuda::mla {

using RowsPerBlock = IntList<16, 32, 64>;  // HB: packed rows per CTA of the instantiations

constexpr int kDv = 512, kDr = 64, kDqk = kDv + kDr;
constexpr int kThreads = 256;  // 8 warps
constexpr int kTileKeys = 32;
constexpr int kRowBytes = 1168;         // 576 bf16 padded by 16 bytes: 292 words = 4 mod 32, so the 8
                                        // rows of an ldmatrix hit distinct banks
constexpr int kChunks = kDqk * 2 / 16;  // 72 16-byte chunks per row
constexpr int kTileBytes = kTileKeys * kRowBytes;
constexpr int kScoreStride = kTileKeys + 8;     // floats per score row
constexpr int kChains = 4, kStepsPerChain = 9;  // the canonical score sum tree (36 k-steps of 16)
constexpr int kDeterministicSplitKeys = 1024;
constexpr int kMaxStages = 8;

constexpr int key_groups_of(int hb) { return hb == 64 ? 1 : 2; }
constexpr int k_splits_of(int hb) { return 8 / (hb / 16 * key_groups_of(hb)); }

// FP8-656 cache: the ring holds the raw tokens (cp.async), dequantized per tile into one bf16 tile.
constexpr int kRawTileBytes = kTileKeys * 656;

constexpr std::size_t smem_bytes(int hb, int stages, bool fp8 = false) {
  const std::size_t ring = fp8 ? kTileBytes + std::size_t(stages) * kRawTileBytes : std::size_t(stages) * kTileBytes;
  return std::size_t(hb) * kRowBytes + ring + std::size_t(k_splits_of(hb)) * hb * kScoreStride * 4;
}

}  // namespace attnserve::cuda::mla
