// The planners' device work in host code: what the CPU device runs, and the reference for the
// CUDA kernels in src/cuda/plan/.
#include <algorithm>

#include "cpu/parallel.h"
#include "plan/plan_device.h"

namespace attnserve::plan_cpu {

using plan_detail::kExpandReqInts;
using plan_detail::kGatherDescInts;

namespace {
// Threads only pay off for large tables: a parallel region costs microseconds (milliseconds on a
// loaded machine), a planner's small batches take less than that serially.
constexpr int64_t kParallelMinElements = int64_t(1) << 16;

template <typename Fn>
void rows_for(int64_t rows, int64_t elements, Fn&& fn) {
  if (elements < kParallelMinElements) {
    for (int64_t i = 0; i < rows; ++i) fn(i);
  } else {
    cpu::parallel_for(rows, fn);
  }
}
}  // namespace

void gather_page_table(const plan_detail::GatherPageTableArgs& a) {
  const int64_t rows = int64_t(a.num_descs) * a.repeat;
  if (rows == 0 || a.width == 0) return;
  rows_for(rows, rows * a.width, [&](int64_t o) {
    const int32_t* d = a.descs + (o / a.repeat) * kGatherDescInts;
    const int32_t pool_row = d[0], first = d[1], num_tokens = d[2], draft_begin = d[3], draft_row = d[4];
    const int32_t* r2t = a.req_to_token + int64_t(pool_row) * a.r2t_row_stride;
    int32_t* out = a.out + o * a.out_row_stride;
    // Columns holding keys: page j starts at token first + j * page_size.
    const int64_t cols = std::min<int64_t>(a.width, (int64_t(num_tokens) + a.page_size - 1) / a.page_size);
    // Columns read from req_to_token: those before the draft positions (never read those: the
    // table need not hold them).
    // (draft_owns_page: the page holding the first draft position comes from the draft slots too.)
    const int64_t draft_col = a.draft_owns_page ? (int64_t(draft_begin) - first) / a.page_size
                                                : (int64_t(draft_begin) - first + a.page_size - 1) / a.page_size;
    const int64_t table_cols = draft_row >= 0 ? std::clamp<int64_t>(draft_col, 0, cols) : cols;
    if (a.page_size == 1) {
      std::copy(r2t + first, r2t + first + table_cols, out);
    } else {
      for (int64_t j = 0; j < table_cols; ++j) out[j] = r2t[first + j * a.page_size] / a.page_size;
    }
    if (draft_row >= 0) {  // draft positions take their slots from draft_slots (or the row's tree path)
      const int32_t* slots = a.draft_slots + int64_t(draft_row) * a.draft_row_stride;
      const int32_t* path = a.path ? a.path + int64_t(draft_row) * a.path_stride : nullptr;
      for (int64_t pos = std::max<int64_t>(draft_begin, first); pos < int64_t(draft_begin) + a.num_draft; ++pos) {
        const int64_t rel = pos - first;
        const bool page_start = rel % a.page_size == 0 || (a.draft_owns_page && pos == draft_begin);
        if (!page_start || rel / a.page_size >= cols) continue;
        const int32_t slot = path ? r2t[draft_begin + path[pos - draft_begin]] : slots[pos - draft_begin];
        out[rel / a.page_size] = slot / a.page_size;
      }
    }
    std::fill(out + cols, out + a.width, 0);
  });
}

void expand_rows(const plan_detail::ExpandRowsArgs& a) {
  if (a.total_rows >= 0) a.nsa_cu_seqlens_k[0] = 0;
  for (int r = 0; r < a.bs; ++r) {
    const int32_t* q = a.reqs + int64_t(r) * kExpandReqInts;
    const int32_t row_start = q[0], q_len = q[1], kv_len = q[2];
    int64_t cu = q[3];
    for (int t = 0; t < q_len; ++t) {
      const int32_t e = std::max(0, kv_len - q_len + 1 + t);
      const int32_t n = std::min(e, a.topk);
      cu += n;
      a.expanded[row_start + t] = e;
      a.nsa_seqlens[row_start + t] = n;
      a.nsa_cu_seqlens_k[row_start + t + 1] = int32_t(cu);
    }
  }
  for (int row = a.live_rows; row < a.total_rows; ++row) {
    a.expanded[row] = 0;
    a.nsa_seqlens[row] = 0;
    a.nsa_cu_seqlens_k[row + 1] = a.nsa_total;
  }
}

void tree_logits(const plan_detail::TreeLogitsArgs& a) {
  for (int i = 0; i < a.rows; ++i) {
    const int32_t* path = a.path + int64_t(i) * a.path_width;
    int n = 0;
    while (n < a.path_width && path[n] >= 0) ++n;
    if (n == 0) continue;
    float* row = a.logits + int64_t(i) * a.logits_stride + (a.row_starts ? a.row_starts[i] : 0) +
                 (a.topk_lengths[i] - n);  // column seq_i
    float moved[64];
    for (int d = 0; d < n; ++d) moved[d] = row[path[d]];
    std::copy(moved, moved + n, row);
  }
}

void transform_index(const TransformIndexArgs& a) {
  const int64_t rows = a.topk_indices.size(0), k = a.topk_indices.size(1);
  const int64_t table_rows = a.page_table_1.size(0), width = a.page_table_1.size(1);
  const int64_t tstride = a.page_table_1.stride(0), istride = a.topk_indices.stride(0), ostride = a.out.stride(0);
  const int32_t* table = a.page_table_1.ptr<int32_t>();
  const int32_t* idx = a.topk_indices.ptr<int32_t>();
  int32_t* out = a.out.ptr<int32_t>();
  const bool prefill = !a.cu_seqlens_q.empty_view();
  const int32_t* cu = prefill ? a.cu_seqlens_q.ptr<int32_t>() : nullptr;
  rows_for(rows, rows * k, [&](int64_t i) {
    int64_t r = i;
    if (prefill) r = (std::upper_bound(cu, cu + table_rows + 1, int32_t(i)) - cu) - 1;  // -1 .. R
    const bool row_ok = r >= 0 && r < table_rows;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t p = idx[i * istride + j];
      out[i * ostride + j] = (row_ok && p >= 0 && p < width) ? table[r * tstride + p] : -1;
    }
  });
}

}  // namespace attnserve::plan_cpu
