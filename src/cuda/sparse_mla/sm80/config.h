// Sparse MLA (sm80 mma.sync path): the kernel's compile-time shape and shared-memory layout. Host-visible
// (plain C++): the plan (../plan.cpp) sizes and chooses with it, the kernel (kernel.cuh) is built from it.
#pragma once
#include <cstddef>
#include <cstdint>

#include "cuda/common/plan_util.h"

namespace attnserve::cuda::sparse_mla_op {

constexpr int kDimQk = 576, kDimV = 512;
constexpr int kThreads = 256;                // 8 warps
constexpr int kTileKeys = 32;                // keys per pipeline stage
constexpr int kRowBytes = 1168;              // one bf16 row of 576 in shared memory, padded by 16 bytes
                                             // (1168 / 4 = 292 words = 4 mod 32: ldmatrix rows hit distinct banks)
constexpr int kFp8TokenBytes = 656;          // Fp8MlaLayout::kBytes
constexpr int kScoreStride = kTileKeys + 8;  // floats per score row in shared memory
constexpr int kMaxStages = 8;
using HeadBlocks = IntList<16, 32, 64>;  // heads per CTA of the instantiations

// Shared memory of one CTA: Q block, the key ring (bf16 rows, or raw FP8-656 tokens plus one bf16
// tile they are dequantized into), partial scores of every k-split, per-stage validity masks.
struct SmemLayout {
  std::size_t q_off, ring_off, tile_off, score_off, mask_off, total;
  std::size_t stage_bytes;
};

constexpr int k_splits_of(int head_block) { return 8 / (head_block / 16 * 2); }

constexpr SmemLayout smem_layout(int head_block, bool fp8, int stages) {
  SmemLayout l{};
  l.q_off = 0;
  l.ring_off = l.q_off + std::size_t(head_block) * kRowBytes;
  l.stage_bytes = std::size_t(kTileKeys) * (fp8 ? kFp8TokenBytes : kRowBytes);
  l.tile_off = l.ring_off + std::size_t(stages) * l.stage_bytes;
  l.score_off = l.tile_off + (fp8 ? std::size_t(kTileKeys) * kRowBytes : 0);
  l.mask_off = l.score_off + std::size_t(k_splits_of(head_block)) * head_block * kScoreStride * 4;
  l.total = l.mask_off + kMaxStages * 4;
  return l;
}

}  // namespace attnserve::cuda::sparse_mla_op
