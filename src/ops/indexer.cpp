// Dispatchers for the lightning-indexer ops: quantize_fp8_groups, indexer_ragged, indexer_paged.
// Shapes and dtypes are checked for every device; index values (windows, lengths, page ids) are
// checked only when they live on the CPU, where reading them costs nothing.
#include <algorithm>

#include "attnserve/cache_formats.h"
#include "attnserve/ops/indexer.h"
#include "cpu/cpu_ops.h"
#include "cuda/cuda_ops.h"

namespace attnserve {
namespace {

int32_t at_i32(const TensorView& t, int64_t i) { return t.ptr<int32_t>()[i * t.strides[0]]; }
int32_t at_i32(const TensorView& t, int64_t i, int64_t j) {
  return t.ptr<int32_t>()[i * t.strides[0] + j * t.strides[1]];
}

constexpr int kIndexDim = IndexerKeyLayout::kDim;

// q_scale is optional: [rows, n_heads] f32 on q's device when given.
void check_optional_q_scale(const char* op, const TensorView& q_scale, const TensorView& q) {
  if (q_scale.empty_view()) return;
  check_tensor(op, "q_scale", q_scale, {DType::f32}, {q.size(0), q.size(1)});
  check_same_device(op, {&q, &q_scale});
}

}  // namespace

void quantize_fp8_groups(const QuantizeFp8Args& a, Stream stream) {
  constexpr const char* op = "quantize_fp8_groups";
  ATTNSERVE_CHECK(a.group >= 1, op, ": 'group' must be >= 1, got ", a.group);
  check_tensor(op, "x", a.x, {DType::bf16, DType::f16, DType::f32}, {-1, -1});
  const int64_t rows = a.x.size(0), dim = a.x.size(1);
  ATTNSERVE_CHECK(dim % a.group == 0, op, ": 'x' dim ", dim, " is not a multiple of 'group' ", a.group);
  check_tensor(op, "out", a.out, {DType::fp8_e4m3}, {rows, dim});
  check_output(op, "out", a.out);
  check_tensor(op, "scales", a.scales, {DType::f32}, {rows, dim / a.group});
  check_output(op, "scales", a.scales);
  check_same_device(op, {&a.x, &a.out, &a.scales});
  check_last_dim_contiguous(op, "x", a.x);
  check_last_dim_contiguous(op, "out", a.out);
  if (a.x.device.is_cpu()) cpu::quantize_fp8_groups(a);
  else {
    require_cuda_device("quantize_fp8_groups");
    cuda::quantize_fp8_groups(a, stream);
  }
}

void indexer_ragged(const IndexerRaggedArgs& a, Workspace ws, Stream stream) {
  constexpr const char* op = "indexer_ragged";
  check_tensor(op, "q", a.q, {DType::fp8_e4m3}, {-1, -1, kIndexDim});
  const int64_t rows = a.q.size(0), n_heads = a.q.size(1);
  ATTNSERVE_CHECK(n_heads >= 1, op, ": 'q' needs at least one index head, shape ", a.q.shape_string());
  check_tensor(op, "weights", a.weights, {DType::f32}, {rows, n_heads});
  check_tensor(op, "k", a.k, {DType::fp8_e4m3}, {-1, kIndexDim});
  const int64_t num_keys = a.k.size(0);
  check_tensor(op, "k_scale", a.k_scale, {DType::f32}, {num_keys});
  check_tensor(op, "ks", a.ks, {DType::i32}, {rows});
  check_tensor(op, "ke", a.ke, {DType::i32}, {rows});
  check_tensor(op, "logits", a.logits, {DType::f32}, {rows, num_keys});
  check_output(op, "logits", a.logits);
  check_same_device(op, {&a.q, &a.weights, &a.k, &a.k_scale, &a.ks, &a.ke, &a.logits});
  check_optional_q_scale(op, a.q_scale, a.q);
  check_last_dim_contiguous(op, "q", a.q);
  check_last_dim_contiguous(op, "k", a.k);
  if (a.q.device.is_cpu()) {
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t ks = at_i32(a.ks, i), ke = at_i32(a.ke, i);
      ATTNSERVE_CHECK(0 <= ks && ks <= ke && ke <= num_keys, op, ": row ", i, " has key window 'ks' = ", ks,
                      ", 'ke' = ", ke, ", expected 0 <= ks <= ke <= num_keys = ", num_keys);
    }
    cpu::indexer_ragged(a);
  } else {
    require_cuda_device("indexer_ragged");
    cuda::indexer_ragged(a, ws, stream);
  }
}

void indexer_paged(const IndexerPagedArgs& a, Workspace ws, Stream stream) {
  constexpr const char* op = "indexer_paged";
  ATTNSERVE_CHECK(a.page_size >= 1, op, ": 'page_size' must be >= 1, got ", a.page_size);
  ATTNSERVE_CHECK(a.next_n >= 1, op, ": 'next_n' must be >= 1, got ", a.next_n);
  check_tensor(op, "q", a.q, {DType::fp8_e4m3}, {-1, -1, kIndexDim});
  const int64_t rows = a.q.size(0), n_heads = a.q.size(1);
  ATTNSERVE_CHECK(n_heads >= 1, op, ": 'q' needs at least one index head, shape ", a.q.shape_string());
  ATTNSERVE_CHECK(rows % a.next_n == 0, op, ": 'q' rows ", rows, " is not a multiple of 'next_n' ", a.next_n);
  const int64_t b = rows / a.next_n;
  check_tensor(op, "weights", a.weights, {DType::f32}, {rows, n_heads});
  check_tensor(op, "index_k_cache", a.index_k_cache, {DType::u8},
               {-1, int64_t(IndexerKeyLayout::bytes_per_page(a.page_size))});
  ATTNSERVE_CHECK(a.index_k_cache.is_contiguous(), op, ": 'index_k_cache' must be contiguous (page layout)");
  check_tensor(op, "page_table", a.page_table, {DType::i32}, {b, -1});
  check_tensor(op, "seqlens", a.seqlens, {DType::i32}, {b});
  check_tensor(op, "logits", a.logits, {DType::f32}, {rows, -1});
  check_output(op, "logits", a.logits);
  check_same_device(op, {&a.q, &a.weights, &a.index_k_cache, &a.page_table, &a.seqlens, &a.logits});
  check_optional_q_scale(op, a.q_scale, a.q);
  check_last_dim_contiguous(op, "q", a.q);
  if (a.q.device.is_cpu()) {
    const int64_t max_context = a.logits.size(1), max_pages = a.page_table.size(1);
    const int64_t num_pages = a.index_k_cache.size(0);
    for (int64_t r = 0; r < b; ++r) {
      const int64_t len = at_i32(a.seqlens, r);
      ATTNSERVE_CHECK(0 <= len && len <= max_context, op, ": 'seqlens'[", r, "] = ", len,
                      ", expected 0 <= seqlens <= max_context (logits width) = ", max_context);
      // The next_n query rows of a request are its last next_n tokens, so a live request has at least
      // next_n of them (0 = a padding request: all -inf). Shorter ones would fill rows with -inf silently.
      ATTNSERVE_CHECK(len == 0 || len >= a.next_n, op, ": 'seqlens'[", r, "] = ", len,
                      " is shorter than 'next_n' = ", a.next_n,
                      " (its next_n query rows are its last tokens; 0 marks a padding request)");
      const int64_t pages = (len + a.page_size - 1) / a.page_size;
      ATTNSERVE_CHECK(pages <= max_pages, op, ": 'seqlens'[", r, "] = ", len, " needs ", pages,
                      " pages but 'page_table' has ", max_pages, " columns");
      for (int64_t p = 0; p < pages; ++p) {
        const int64_t page = at_i32(a.page_table, r, p);
        ATTNSERVE_CHECK(0 <= page && page < num_pages, op, ": 'page_table'[", r, ", ", p, "] = ", page,
                        " is outside the pool of ", num_pages, " pages ('index_k_cache')");
      }
    }
    cpu::indexer_paged(a);
  } else {
    require_cuda_device("indexer_paged");
    cuda::indexer_paged(a, ws, stream);
  }
}

}  // namespace attnserve
