// Sparse MLA (sm80 mma.sync path): the kernel's parameters and compile-time shape, shared by the
// launcher (sparse_mla.cu) and the per-cache instantiations (sparse_mla_bf16.cu, sparse_mla_fp8.cu).
#pragma once
#include <cstddef>
#include <cstdint>

namespace attnserve::cuda::sparse_mla_sm80 {

constexpr int kDimQk = 576, kDimV = 512;
constexpr int kThreads = 256;             // 8 warps
constexpr int kTileKeys = 32;             // keys per pipeline stage
constexpr int kRowBytes = 1168;           // one bf16 row of 576 in shared memory, padded by 16 bytes
                                          // (1168 / 4 = 292 words = 4 mod 32: ldmatrix rows hit distinct banks)
constexpr int kFp8TokenBytes = 656;       // Fp8MlaLayout::kBytes
constexpr int kScoreStride = kTileKeys + 8;  // floats per score row in shared memory
constexpr int kMaxStages = 8;

struct Params {
  const uint16_t* q;  // [rows, h_q, 576] bf16
  int64_t q_row_stride, q_head_stride;  // elements
  const uint8_t* kv;  // [num_slots, 576] bf16 or [num_slots, 656] u8
  int64_t kv_row_bytes;
  int64_t num_slots;
  const int32_t* indices;  // [rows, topk]
  int64_t idx_row_stride, idx_col_stride;
  int topk;
  const int32_t* topk_length;  // nullable [rows]
  int64_t topk_length_stride;
  const float* sink;  // nullable [h_q]
  int64_t sink_stride;
  uint16_t* out;  // [rows, h_q, 512] bf16
  int64_t out_row_stride, out_head_stride;
  float* lse;  // nullable [rows, h_q]
  int64_t lse_row_stride, lse_head_stride;
  float* max_logits;  // nullable [rows, h_q]
  int64_t ml_row_stride, ml_head_stride;
  int h_q;
  int64_t rows;
  int head_blocks;
  float scale_log2;  // softmax_scale * log2(e)
  int stages;        // pipeline depth, 2 .. kMaxStages
  // Split-K over the top-k list (grid y = split): split s covers tiles [s * split_tiles, (s + 1) * split_tiles)
  // of the row's clamped length and, when num_splits > 1, writes its unnormalized partial state to the
  // workspace instead of out / lse / max_logits (sparse_mla_combine.cu finishes the row).
  int num_splits;    // 1: the CTA owns the whole row and writes the final outputs
  int split_tiles;   // 32-key tiles per split
  float* part_o;     // [num_splits, rows, h_q, 512] f32: sum_j 2^(s_j - m) v_j over the split's keys
  float2* part_ml;   // [num_splits, rows, h_q] f32 pairs: (m, l) in base-2 scaled units; m = -inf: empty split
};

// Where the partial states of split `s` of (row, head) live: one layout shared by kernel and combine.
__host__ __device__ inline int64_t part_index(int64_t s, int64_t row, int64_t head, int64_t rows, int h_q) {
  return (s * rows + row) * h_q + head;
}

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

// Launches (sparse_mla_bf16.cu / sparse_mla_fp8.cu). head_block is 16, 32 or 64.
void launch_bf16(const Params& p, int head_block, std::size_t smem_bytes, void* stream);
void launch_fp8(const Params& p, int head_block, std::size_t smem_bytes, void* stream);
// The split-K combine (sparse_mla_combine.cu); only for num_splits > 1.
void launch_combine(const Params& p, void* stream);

}  // namespace attnserve::cuda::sparse_mla_sm80
