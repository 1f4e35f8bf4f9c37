// Sparse MLA over the FP8-656 cache for small head counts (h_q <= 32: DeepSeek-V3.2 under 4- and 8-way
// tensor parallelism): the kernel's compile-time shape and shared-memory layout. Host-visible (plain
// C++): the plan (../plan.cpp) sizes and chooses with it, small_heads.cuh is built from it.
//
// At 16 heads a row's math is small (16 x 2048 x 1088 x 2 FLOP) and the call is a gather of
// rows x top-k x 656 bytes: raw tokens land in a ring of 64-key stages by cp.async and are read by the
// tensor cores' register fragments straight from the raw bytes (no dequantized copy in shared memory).
// Measured (bench/NOTES.md, session 5), the time per tile is set by each warp's chain of dependent
// instructions, not by the bytes in flight: HB 16 runs two CTAs per SM on 2-stage rings (16 warps),
// HB 32 one CTA on the deepest ring that fits.
#pragma once
#include <cstddef>

#include "cuda/common/plan_util.h"

namespace attnserve::cuda::sparse_mla90 {

using SmallHeadBlocks = IntList<16, 32>;  // heads per CTA: 1 or 2 m-tiles of 16
constexpr int kSmallThreads = 256;        // 8 warps
constexpr int kSmallTileKeys = 64;        // keys per ring stage
constexpr int kSmallMaxStages = 4;
constexpr int kSmallTokenBytes = 656;                                // Fp8MlaLayout::kBytes
constexpr int kSmallStageBytes = kSmallTileKeys * kSmallTokenBytes;  // 41984: raw tokens, unpadded
constexpr int kSmallPartStride = 72;  // f32 per row of partial scores (72 * 4 = 32 mod 128: no bank conflicts)
constexpr int kSmallPStride = 72;     // f16 per row of P (144 bytes: ldmatrix rows on distinct banks)

struct SmallSmemLayout {
  std::size_t ring, part, p, max, smax, lsum, ids, total;
};

// ring   [stages][64 keys][656]            raw FP8-656 tokens (zeros for invalid slots)
// part   [4 blocks][HB][72] f32            QK partial scores, one per 128-dim latent block (+ rope k-step)
// p      [4 blocks][HB][72] f16            P scaled per latent block, the A operand of P V
// max    [HB][8 warps] f32                 row maxima of the tile, one per warp's 8 keys
// smax   [8 warps][4] f32                  the tile's largest FP8 scale per latent block
// lsum   [HB][8 warps] f32                 row sums exchanged at the end
// ids    [2 * stages][64] i32              slot ids of the tiles in flight (-1: invalid or past the length)
constexpr SmallSmemLayout small_smem_layout(int head_block, int stages) {
  SmallSmemLayout l{};
  l.ring = 0;
  l.part = l.ring + std::size_t(stages) * kSmallStageBytes;
  l.p = l.part + std::size_t(4) * head_block * kSmallPartStride * 4;
  l.max = l.p + std::size_t(4) * head_block * kSmallPStride * 2;
  l.smax = l.max + std::size_t(head_block) * 8 * 4;
  l.lsum = l.smax + 8 * 4 * 4;
  l.ids = l.lsum + std::size_t(head_block) * 8 * 4;
  l.total = l.ids + std::size_t(2) * stages * kSmallTileKeys * 4;
  return l;
}
static_assert(small_smem_layout(32, kSmallMaxStages).total <= 232448, "H200: 227 KB per block");

}  // namespace attnserve::cuda::sparse_mla90
