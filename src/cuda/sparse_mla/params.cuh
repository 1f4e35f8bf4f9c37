// Parameters of the sparse MLA kernels: plain struct passed by value, filled by the front launcher
// (launch.cu) from the arguments and the plan; the split-K partial-state layout kernel and combine share.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace attnserve::cuda::sparse_mla_op {

struct Params {
  const uint16_t* q;                    // [rows, h_q, 576] bf16
  int64_t q_row_stride, q_head_stride;  // elements
  const uint8_t* kv;                    // [num_slots, 576] bf16 or [num_slots, 656] u8
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
  int num_splits;   // 1: the CTA owns the whole row and writes the final outputs
  int split_tiles;  // tiles per split (the kernel's tile: 32 keys sm80, 64 sm90)
  float* part_o;    // [num_splits, rows, h_q, 512] f32: sum_j 2^(s_j - m) v_j over the split's keys
  float2* part_ml;  // [num_splits, rows, h_q] f32 pairs: (m, l) in base-2 scaled units; m = -inf: empty split
};

// Where the partial states of split `s` of (row, head) live: one layout shared by kernel and combine.
__host__ __device__ inline int64_t part_index(int64_t s, int64_t row, int64_t head, int64_t rows, int h_q) {
  return (s * rows + row) * h_q + head;
}

}  // namespace attnserve::cuda::sparse_mla_op
