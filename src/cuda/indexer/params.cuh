// Parameters of the lightning-indexer kernel: plain struct passed by value, filled by the front
// launcher (launch.cu) from the arguments and the plan.
#pragma once
#include <cstdint>

namespace attnserve::cuda::indexer {

struct Params {
  const uint8_t* q;  // [rows, heads, 128] fp8
  int64_t q_row_stride, q_head_stride;
  const float* w;  // [rows, heads]
  int64_t w_row_stride, w_head_stride;
  const float* q_scale;  // [rows, heads] or null: multiplies w
  int64_t qs_row_stride, qs_head_stride;
  int heads;
  int64_t rows;
  float* logits;  // [rows, num_cols]
  int64_t logit_row_stride, logit_col_stride, num_cols;
  int64_t num_groups;
  int rows_per_group;  // paged: next_n; ragged: kRaggedGroupRows
  int64_t col_blocks;
  int64_t cols_per_cta;  // logit columns per CTA (the column block)
  bool key_vec16;        // keys are 16-byte aligned (else 4-byte loads)
  // ragged
  const uint8_t* k;  // [num_cols, 128] fp8
  int64_t k_row_stride;
  const float* k_scale;
  int64_t k_scale_stride;
  const int32_t* ks;
  int64_t ks_stride;
  const int32_t* ke;
  int64_t ke_stride;
  // paged
  const uint8_t* pool;  // [num_pages, page_size * 132]
  int64_t num_pages;
  int64_t page_size;
  const int32_t* page_table;  // [b, max_pages]
  int64_t pt_row_stride, pt_col_stride, max_pages;
  const int32_t* seqlens;
  int64_t seqlens_stride;
};

}  // namespace attnserve::cuda::indexer
