// Internal: the planners' device work, as plain structs of raw pointers (no CUDA headers).
//   gather_page_table  page ids (or token slots) of a row's keys from req_to_token, with the
//                      draft-decode slots overriding their positions; 0 past the row's keys
//   expand_rows        per query row: expanded lengths, min(expanded, topk), their prefix sums
//   tree_logits        draft trees: each verify row's path logits moved to its path positions
//   transform_index    top-k positions -> token slots (plan.h TransformIndexArgs)
// plan_cpu:: runs them in host code (the CPU device); plan_cuda:: as kernels on the caller's stream,
// defined in src/cuda/plan/*.cu, with fallbacks in plan_cuda_fallback.cpp for builds without CUDA.
// run_*() pick one by device.
#pragma once
#include <cstddef>
#include <cstdint>

#include "attnserve/plan.h"

#ifdef __CUDACC__
#define ATTNSERVE_HOST_DEVICE __host__ __device__
#else
#define ATTNSERVE_HOST_DEVICE
#endif

namespace attnserve::plan_detail {

// One gather row descriptor (5 i32s in device memory):
//   pool_row     row of req_to_token
//   first_token  position of the row's first key (a multiple of page_size)
//   num_tokens   keys of the row: positions first_token .. first_token + num_tokens - 1
//   draft_begin  positions draft_begin .. draft_begin + num_draft - 1 take their slots from
//   draft_row    draft_slots[draft_row * draft_row_stride + (pos - draft_begin)]; draft_row < 0: none
constexpr int kGatherDescInts = 5;

struct GatherPageTableArgs {
  const int32_t* req_to_token = nullptr;  // [pool_size, r2t_row_stride]
  int64_t r2t_row_stride = 0;
  const int32_t* descs = nullptr;  // [num_descs, kGatherDescInts]
  int num_descs = 0;
  int repeat = 1;                        // output row o uses descriptor o / repeat
  const int32_t* draft_slots = nullptr;  // [*, draft_row_stride]
  int draft_row_stride = 0;
  int num_draft = 0;
  // Draft trees, target_verify (page_size 1): with `path` set, a draft position takes the slot of the
  // draft token path[draft_row * path_stride + (pos - draft_begin)] (a column of req_to_token:
  // r2t[draft_begin + path value]) instead of a draft_slots entry: the row lists its path in order.
  const int32_t* path = nullptr;
  int path_stride = 0;
  // Draft trees, draft decode (page_size > 1): a page holding any draft position takes its id from the
  // first draft position in it (the branch's own page, which holds a copy of the prefix's partial last
  // page, as the engine duplicates it for each branch) instead of from req_to_token.
  bool draft_owns_page = false;
  int32_t* out = nullptr;  // [num_descs * repeat, out_row_stride]
  int64_t out_row_stride = 0;
  int width = 0;      // columns written per row (page j: token first + j * page)
  int page_size = 1;  // out = slot / page_size
};

// Per request r (4 i32s in device memory): row_start, q_len, kv_len, nsa_cu_base (the prefix sum of
// min(expanded, topk) over the rows before row_start). Row row_start + t gets
//   expanded = max(0, kv_len - q_len + 1 + t), nsa = min(expanded, topk),
//   nsa_cu_seqlens_k[row + 1] = nsa_cu_base + sum of nsa over the request's rows 0..t.
// Rows live_rows .. total_rows - 1 (graph padding) get 0, 0 and nsa_total; nsa_cu_seqlens_k[0] = 0.
constexpr int kExpandReqInts = 4;

struct ExpandRowsArgs {
  const int32_t* reqs = nullptr;  // [bs, kExpandReqInts]
  int bs = 0;
  int topk = 0;
  int live_rows = 0;
  int total_rows = 0;
  int32_t nsa_total = 0;
  int32_t* expanded = nullptr;          // [total_rows]
  int32_t* nsa_seqlens = nullptr;       // [total_rows]
  int32_t* nsa_cu_seqlens_k = nullptr;  // [total_rows + 1]
};

// sum_{t=0}^{n-1} min(max(a + t, 0), k): the prefix sums of nsa_cache_seqlens in closed form, so the
// host stays O(batch size) and each device thread computes its row's prefix sum on its own.
ATTNSERVE_HOST_DEVICE inline int64_t clipped_ramp_sum(int64_t a, int64_t n, int64_t k) {
  if (n <= 0) return 0;
  // S(x) = sum_{v=1}^{x} min(v, k) for x >= 0, and the sum is S(a + n - 1) - S(a - 1).
  auto S = [k](int64_t x) -> int64_t {
    if (x <= 0) return 0;
    if (x <= k) return x * (x + 1) / 2;
    return k * (k + 1) / 2 + (x - k) * k;
  };
  return S(a + n - 1) - S(a - 1);
}

// Draft trees, target_verify (topk_transform): each row's path logits moved to the columns of its
// path positions, in place: logits[i, s + seq_i + d] = old logits[i, s + seq_i + path[i, d]] for d <
// path_len_i (s = row_starts[i] or 0; seq_i = topk_lengths[i] - path_len_i, path_len_i = the path's
// entries >= 0). Columns past seq_i + path_len_i keep whatever they hold (the top-k never reads them).
struct TreeLogitsArgs {
  float* logits = nullptr;  // [rows, logits_stride]
  int64_t logits_stride = 0;
  const int32_t* row_starts = nullptr;  // optional [rows]
  const int32_t* path = nullptr;        // [rows, path_width]
  int path_width = 0;
  const int32_t* topk_lengths = nullptr;  // [rows]
  int rows = 0;
};

void run_gather_page_table(const GatherPageTableArgs& a, Device device, Stream stream);
void run_expand_rows(const ExpandRowsArgs& a, Device device, Stream stream);
void run_tree_logits(const TreeLogitsArgs& a, Device device, Stream stream);

}  // namespace attnserve::plan_detail

namespace attnserve::plan_cpu {
void gather_page_table(const plan_detail::GatherPageTableArgs& a);
void expand_rows(const plan_detail::ExpandRowsArgs& a);
void tree_logits(const plan_detail::TreeLogitsArgs& a);
void transform_index(const TransformIndexArgs& a);  // validated
}  // namespace attnserve::plan_cpu

namespace attnserve::plan_cuda {
// Staging support (src/cuda/plan/staging.cu): pinned host memory and events.
void* pinned_alloc(std::size_t bytes);
void pinned_free(void* p);
void* event_create();
void event_destroy(void* event);
void event_record(void* event, Stream stream);
void event_synchronize(void* event);  // returns at once if the event completed or was never recorded

void gather_page_table(const plan_detail::GatherPageTableArgs& a, Stream stream);
void expand_rows(const plan_detail::ExpandRowsArgs& a, Stream stream);
void tree_logits(const plan_detail::TreeLogitsArgs& a, Stream stream);
void transform_index(const TransformIndexArgs& a, Stream stream);  // validated
}  // namespace attnserve::plan_cuda
