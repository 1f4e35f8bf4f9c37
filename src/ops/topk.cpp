// Dispatcher for the exact per-row top-k (with the fused slot transforms).
// Shapes and dtypes are checked for every device; lengths, starts, cu_seqlens_q and the transform's
// column range are checked only when they live on the CPU.
#include <climits>

#include "attnserve/ops/topk.h"
#include "cpu/cpu_ops.h"
#include "cuda/cuda_ops.h"

namespace attnserve {
namespace {

constexpr const char* kOp = "topk";

int32_t at_i32(const TensorView& t, int64_t i) { return t.ptr<int32_t>()[i * t.strides[0]]; }

const char* transform_name(TopkTransform t) {
  switch (t) {
    case TopkTransform::none: return "none";
    case TopkTransform::decode: return "decode";
    case TopkTransform::prefill: return "prefill";
    case TopkTransform::ragged: return "ragged";
  }
  return "?";
}

void require_absent(const TensorView& t, const char* arg, TopkTransform transform) {
  ATTNSERVE_CHECK(t.empty_view(), kOp, ": argument '", arg, "' is not used by transform '", transform_name(transform),
                  "' (leave it empty or pick the transform that uses it)");
}

void validate(const TopkArgs& a) {
  ATTNSERVE_CHECK(a.topk >= 1, kOp, ": 'topk' must be >= 1, got ", a.topk);
  check_tensor(kOp, "scores", a.scores, {DType::f32}, {-1, -1});
  const int64_t rows = a.scores.size(0);
  check_last_dim_contiguous(kOp, "scores", a.scores);
  check_tensor(kOp, "lengths", a.lengths, {DType::i32}, {rows});
  check_tensor(kOp, "out", a.out, {DType::i32}, {rows, a.topk});
  check_output(kOp, "out", a.out);
  check_optional_tensor(kOp, "row_starts", a.row_starts, {DType::i32}, {rows});
  switch (a.transform) {
    case TopkTransform::none:
      require_absent(a.page_table_1, "page_table_1", a.transform);
      require_absent(a.cu_seqlens_q, "cu_seqlens_q", a.transform);
      require_absent(a.offsets, "offsets", a.transform);
      break;
    case TopkTransform::decode:
      check_tensor(kOp, "page_table_1", a.page_table_1, {DType::i32}, {rows, -1});
      require_absent(a.cu_seqlens_q, "cu_seqlens_q", a.transform);
      require_absent(a.offsets, "offsets", a.transform);
      break;
    case TopkTransform::prefill:
      check_tensor(kOp, "page_table_1", a.page_table_1, {DType::i32}, {-1, -1});
      check_tensor(kOp, "cu_seqlens_q", a.cu_seqlens_q, {DType::i32}, {a.page_table_1.size(0) + 1});
      require_absent(a.offsets, "offsets", a.transform);
      break;
    case TopkTransform::ragged:
      check_tensor(kOp, "offsets", a.offsets, {DType::i32}, {rows});
      require_absent(a.page_table_1, "page_table_1", a.transform);
      require_absent(a.cu_seqlens_q, "cu_seqlens_q", a.transform);
      break;
  }
  check_same_device(kOp, {&a.scores, &a.lengths, &a.out, &a.row_starts, &a.page_table_1, &a.cu_seqlens_q, &a.offsets});
}

// Index values, on the CPU: every row's window inside the scores, every emitted column inside the table.
void validate_values(const TopkArgs& a) {
  const int64_t rows = a.scores.size(0), width = a.scores.size(1);
  if (a.transform == TopkTransform::prefill) {
    const int64_t b = a.page_table_1.size(0);
    ATTNSERVE_CHECK(at_i32(a.cu_seqlens_q, 0) == 0, kOp, ": 'cu_seqlens_q'[0] = ", at_i32(a.cu_seqlens_q, 0),
                    ", expected 0");
    for (int64_t r = 0; r < b; ++r)
      ATTNSERVE_CHECK(at_i32(a.cu_seqlens_q, r) <= at_i32(a.cu_seqlens_q, r + 1), kOp, ": 'cu_seqlens_q' decreases at ",
                      r, " (", at_i32(a.cu_seqlens_q, r), " > ", at_i32(a.cu_seqlens_q, r + 1), ")");
    ATTNSERVE_CHECK(at_i32(a.cu_seqlens_q, b) == rows, kOp, ": 'cu_seqlens_q'[b] = ", at_i32(a.cu_seqlens_q, b),
                    ", expected the number of score rows ", rows);
  }
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t start = a.row_starts.empty_view() ? 0 : at_i32(a.row_starts, row);
    const int64_t len = at_i32(a.lengths, row);
    ATTNSERVE_CHECK(len >= 0, kOp, ": 'lengths'[", row, "] = ", len, " is negative");
    ATTNSERVE_CHECK(start >= 0, kOp, ": 'row_starts'[", row, "] = ", start, " is negative");
    ATTNSERVE_CHECK(start + len <= width, kOp, ": row ", row, ": 'row_starts' + 'lengths' = ", start, " + ", len,
                    " exceeds the scores width ", width);
    if (a.transform == TopkTransform::decode || a.transform == TopkTransform::prefill) {
      ATTNSERVE_CHECK(len <= a.page_table_1.size(1), kOp, ": 'lengths'[", row, "] = ", len,
                      " exceeds the 'page_table_1' width ", a.page_table_1.size(1));
    }
    if (a.transform == TopkTransform::ragged && len > 0) {
      const int64_t last = int64_t(at_i32(a.offsets, row)) + len - 1;
      ATTNSERVE_CHECK(last <= INT32_MAX && last >= INT32_MIN, kOp, ": 'offsets'[", row,
                      "] + 'lengths' overflows int32");
    }
  }
}

}  // namespace

std::size_t topk_workspace_size(const TopkArgs& a, const DeviceCaps& caps) {
  validate(a);
  if (a.scores.device.is_cpu()) return 0;  // the CPU kernel keeps its scratch per thread
  return cuda::topk_workspace_size(a, caps);
}

void topk(const TopkArgs& a, Workspace ws, Stream stream) {
  validate(a);
  if (a.scores.device.is_cpu()) {
    validate_values(a);
    cpu::topk(a);
  } else {
    require_cuda_device("topk");
    cuda::topk(a, ws, stream);
  }
}

}  // namespace attnserve
