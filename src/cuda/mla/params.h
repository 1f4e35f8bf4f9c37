// Parameters of the MLA (absorbed) paged-attention kernel: plain struct passed by value, filled by
// the front launcher (launch.cu) from the arguments and the plan.
#pragma once
#include <cstdint>

namespace attnserve::cuda::mla {

struct Params {
  const char* q_nope;  // [total_q, h_q, 512] bf16
  int64_t qn_st, qn_sh;
  const char* q_rope;  // [total_q, h_q, 64]
  int64_t qr_st, qr_sh;
  const char* kv;  // pool, token slot stride in bytes
  int64_t kv_stok;
  int kv_fp8;  // 1: FP8-656 tokens (656 bytes: e4m3 latent, f32 scales, bf16 rope), 0: 576 bf16
  const int* page_table;
  int64_t pt_st;
  const int* cache_seqlens;
  const int* cu_seqlens_q;
  char* out;  // [total_q, h_q, 512] bf16
  int64_t o_st, o_sh;
  float* lse;
  int64_t lse_st, lse_sh;
  float* part_o;    // [splits, total_q, h_q, 512]
  float* part_lse;  // [splits, total_q, h_q]
  int total_q, h_q, page_size, num_pages, max_pages;
  int num_splits, split_keys, stages;
  float scale_log2, softcap;
  int causal, window_left, window_right;
};

}  // namespace attnserve::cuda::mla
