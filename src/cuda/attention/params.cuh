// Parameters of the paged-attention kernels (sm80 portable and sm90 Hopper leaves; decode, verify,
// draft, extend, prefill). Plain struct passed by value; everything a CTA needs, with live lengths
// read from device memory. Filled by the front launcher (launch.cu) from the arguments and the plan.
#pragma once
#include <cstdint>

namespace attnserve::cuda::attn {

struct Params {
  const char* q;       // [total_q, h_q, D] T (the FP8 kernel: fp8_e4m3)
  int64_t q_st, q_sh;  // element strides
  const char* k;       // pool [num_pages, page_size, h_kv, D], bytes addressed
  const char* v;
  int64_t k_stok, k_sh, v_stok, v_sh;  // byte strides (token slot, head); slot = page * ps + j % ps
  const int* page_table;               // [b, max_pages]
  int64_t pt_st;
  const int* cache_seqlens;  // [b]
  const int* cu_seqlens_q;   // [b + 1]
  char* out;                 // [total_q, h_q, D] T
  int64_t o_st, o_sh;
  float* lse;  // [total_q, h_q] or null
  int64_t lse_st, lse_sh;
  const float* k_descale;  // [b, h_kv] or null
  const float* v_descale;
  int64_t kds_sb, kds_sh, vds_sb, vds_sh;
  const float* q_descale;  // [b, h_kv] or null (fp8 q)
  int64_t qds_sb, qds_sh;
  float* part_o;    // [num_splits, total_q, h_q, D] f32 (num_splits > 1)
  float* part_lse;  // [num_splits, total_q, h_q]
  int total_q, h_q, h_kv, group, page_size, num_pages, max_pages;
  int num_splits;    // grid.y = h_kv * num_splits
  int split_keys;    // > 0: fixed split size in keys (deterministic); 0: even split
  int stages;        // cp.async pipeline depth, 2..kMaxStages
  int page_shift;    // log2(page_size) for shift addressing, or -1 (integer division)
  int page_runs;     // sm80: 1 = one page-table entry per run of a thread's rows in a page (shifts only)
  int lane_pages;    // sm80: 1 = below page runs, one lane per key row looks up its page id (shuffled)
  float scale_log2;  // softmax_scale * log2(e)
  float softcap;     // 0: off
  int causal, window_left, window_right;
};

}  // namespace attnserve::cuda::attn
