// CPU top-k per row over score[row, start : start + len], with the fused slot transforms
// (decode: page_table_1[row, j]; prefill: page_table_1[request of row, j]; ragged: j + offsets[row]).
// Rows are independent: one thread per row. The selection, its ranking of ties, -0, -inf and NaN, and
// its output order (ascending positions) are described in topk_select.h. Padding (-1) is never transformed.
#include "cpu/cpu_ops.h"
#include "cpu/load.h"
#include "cpu/parallel.h"
#include "cpu/topk_select.h"

namespace attnserve::cpu {
namespace {

int32_t load_i32(const TensorView& t, int64_t i) { return t.ptr<int32_t>()[offset_of(t, i)]; }

// The request of a prefill row: the last r with cu_seqlens_q[r] <= row (skips empty requests).
int64_t request_of_row(const TensorView& cu_seqlens_q, int64_t row) {
  int64_t lo = 0, hi = cu_seqlens_q.size(0) - 1;  // answer in [0, b)
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (load_i32(cu_seqlens_q, mid) <= row) lo = mid;
    else hi = mid;
  }
  return lo;
}

}  // namespace

void topk(const TopkArgs& a) {
  const int64_t rows = a.scores.size(0), k = a.topk;
  auto one_row = [&](int64_t row) {
    const int64_t start = a.row_starts.empty_view() ? 0 : load_i32(a.row_starts, row);
    const int64_t len = load_i32(a.lengths, row);
    int32_t* out = a.out.ptr<int32_t>() + offset_of(a.out, row, 0);
    const int64_t out_stride = a.out.stride(1);

    // Position j (relative to start) -> the value written out.
    const int64_t request = a.transform == TopkTransform::prefill ? request_of_row(a.cu_seqlens_q, row) : 0;
    auto value_of = [&](int64_t j) -> int32_t {
      switch (a.transform) {
        case TopkTransform::none: return int32_t(j);
        case TopkTransform::decode: return a.page_table_1.ptr<int32_t>()[offset_of(a.page_table_1, row, j)];
        case TopkTransform::prefill: return a.page_table_1.ptr<int32_t>()[offset_of(a.page_table_1, request, j)];
        case TopkTransform::ragged: return int32_t(j + load_i32(a.offsets, row));
      }
      return -1;
    };

    int64_t c = 0;
    if (len <= k) {
      for (; c < len; ++c) out[c * out_stride] = value_of(c);
    } else {
      thread_local TopkScratch scratch;
      topk_select_row(a.scores.ptr<float>() + offset_of(a.scores, row, start), len, k, scratch);
      for (; c < k; ++c) out[c * out_stride] = value_of(scratch.selected[size_t(c)]);
    }
    for (; c < k; ++c) out[c * out_stride] = -1;
  };
  // A single row (decode with one request) runs inline: a parallel region would only add its start-up.
  if (rows == 1) one_row(0);
  else parallel_for(rows, one_row);
}

}  // namespace attnserve::cpu
