// Front of the lightning indexer on CUDA (indexer.h): the checks only CUDA needs (alignment), the Params
// of a call from the arguments and its plan (plan.h), and the launch of the plan's kernel (sm80 or sm90 leaf).
#include "cuda/common/host_util.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/indexer/sm80/indexer_sm80.h"
#ifdef ATTNSERVE_HAVE_SM90
#include "cuda/indexer/sm90/indexer_sm90.h"
#endif

namespace attnserve::cuda {
namespace {

using indexer::Params;

Params common_params(const TensorView& q, const TensorView& w, const TensorView& q_scale, const TensorView& logits,
                     const indexer::Plan& plan) {
  Params p{};
  p.rows_per_group = plan.rows_per_group;
  p.num_groups = plan.num_groups;
  p.col_blocks = plan.col_blocks;
  p.cols_per_cta = plan.cols_per_cta;
  p.key_vec16 = plan.key_vec16;
  if (!q_scale.empty_view()) {
    p.q_scale = q_scale.ptr<const float>();
    p.qs_row_stride = q_scale.stride(0);
    p.qs_head_stride = q_scale.stride(1);
  }
  p.q = q.ptr<const uint8_t>();
  p.q_row_stride = q.stride(0);
  p.q_head_stride = q.stride(1);
  p.w = w.ptr<const float>();
  p.w_row_stride = w.stride(0);
  p.w_head_stride = w.stride(1);
  p.heads = int(q.size(1));
  p.rows = q.size(0);
  p.logits = logits.ptr<float>();
  p.logit_row_stride = logits.stride(0);
  p.logit_col_stride = logits.stride(1);
  p.num_cols = logits.size(1);
  return p;
}

void launch(const Params& p, const indexer::Plan& plan, Stream stream) {
#ifdef ATTNSERVE_HAVE_SM90
  if (indexer::is_sm90(plan.kernel)) return indexer::launch_sm90(p, plan, stream);
#endif
  indexer::launch_sm80(p, plan, stream);
}

}  // namespace

void indexer_ragged(const IndexerRaggedArgs& a, Workspace, Stream stream) {
  constexpr const char* op = "indexer_ragged";
  if (a.q.size(0) == 0 || a.k.size(0) == 0) return;
  require_rows_aligned(op, "q", a.q, 16);
  require_rows_aligned(op, "k", a.k, 16);
  DeviceGuard guard(a.q.device);
  const indexer::Plan plan = indexer::make_plan(indexer::problem_of(a), current_device_caps(), indexer::op_tuning());
  Params p = common_params(a.q, a.weights, a.q_scale, a.logits, plan);
  p.k = a.k.ptr<const uint8_t>();
  p.k_row_stride = a.k.stride(0);
  p.k_scale = a.k_scale.ptr<const float>();
  p.k_scale_stride = a.k_scale.stride(0);
  p.ks = a.ks.ptr<const int32_t>();
  p.ks_stride = a.ks.stride(0);
  p.ke = a.ke.ptr<const int32_t>();
  p.ke_stride = a.ke.stride(0);
  launch(p, plan, stream);
}

void indexer_paged(const IndexerPagedArgs& a, Workspace, Stream stream) {
  constexpr const char* op = "indexer_paged";
  if (a.q.size(0) == 0 || a.logits.size(1) == 0) return;
  require_rows_aligned(op, "q", a.q, 16);
  ATTNSERVE_CHECK(aligned_to(a.index_k_cache.data, 16), op,
                  ": argument 'index_k_cache' needs a 16-byte aligned base on CUDA");
  DeviceGuard guard(a.q.device);
  const indexer::Plan plan = indexer::make_plan(indexer::problem_of(a), current_device_caps(), indexer::op_tuning());
  Params p = common_params(a.q, a.weights, a.q_scale, a.logits, plan);
  p.pool = a.index_k_cache.ptr<const uint8_t>();
  p.num_pages = a.index_k_cache.size(0);
  p.page_size = a.page_size;
  p.page_table = a.page_table.ptr<const int32_t>();
  p.pt_row_stride = a.page_table.stride(0);
  p.pt_col_stride = a.page_table.stride(1);
  p.max_pages = a.page_table.size(1);
  p.seqlens = a.seqlens.ptr<const int32_t>();
  p.seqlens_stride = a.seqlens.stride(0);
  launch(p, plan, stream);
}

}  // namespace attnserve::cuda
