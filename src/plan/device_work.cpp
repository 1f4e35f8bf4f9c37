// Dispatch of the planners' device work (CPU host loops or CUDA kernels), and the public index
// transform with its argument checks.
#include <algorithm>

#include "plan/plan_device.h"

namespace attnserve::plan_detail {

void run_gather_page_table(const GatherPageTableArgs& a, Device device, Stream stream) {
  if (int64_t(a.num_descs) * a.repeat == 0 || a.width == 0) return;
  if (device.is_cpu()) plan_cpu::gather_page_table(a);
  else plan_cuda::gather_page_table(a, stream);
}

void run_expand_rows(const ExpandRowsArgs& a, Device device, Stream stream) {
  if (device.is_cpu()) plan_cpu::expand_rows(a);
  else plan_cuda::expand_rows(a, stream);
}

void run_tree_logits(const TreeLogitsArgs& a, Device device, Stream stream) {
  if (a.rows == 0 || a.path_width == 0) return;
  if (device.is_cpu()) plan_cpu::tree_logits(a);
  else plan_cuda::tree_logits(a, stream);
}

}  // namespace attnserve::plan_detail

namespace attnserve {

void transform_index_page_table(const TransformIndexArgs& a, Stream stream) {
  constexpr const char* op = "transform_index_page_table";
  check_tensor(op, "page_table_1", a.page_table_1, {DType::i32}, {-1, -1});
  check_tensor(op, "topk_indices", a.topk_indices, {DType::i32}, {-1, -1});
  check_tensor(op, "out", a.out, {DType::i32}, {a.topk_indices.size(0), a.topk_indices.size(1)});
  check_output(op, "out", a.out);
  check_optional_tensor(op, "cu_seqlens_q", a.cu_seqlens_q, {DType::i32}, {a.page_table_1.size(0) + 1});
  check_same_device(op, {&a.page_table_1, &a.topk_indices, &a.out});
  if (!a.cu_seqlens_q.empty_view()) {
    check_same_device(op, {&a.page_table_1, &a.cu_seqlens_q});
    ATTNSERVE_CHECK(a.cu_seqlens_q.is_contiguous(), op, ": argument 'cu_seqlens_q' must be contiguous");
  } else {
    ATTNSERVE_CHECK(a.page_table_1.size(0) == a.topk_indices.size(0), op,
                    ": decode rows (no 'cu_seqlens_q') need one 'page_table_1' row per query row: 'page_table_1' has ",
                    a.page_table_1.size(0), " rows, 'topk_indices' ", a.topk_indices.size(0));
  }
  check_last_dim_contiguous(op, "page_table_1", a.page_table_1);
  check_last_dim_contiguous(op, "topk_indices", a.topk_indices);
  check_last_dim_contiguous(op, "out", a.out);
  if (a.out.numel() == 0) return;
  if (a.out.device.is_cpu()) plan_cpu::transform_index(a);
  else plan_cuda::transform_index(a, stream);
}

}  // namespace attnserve
