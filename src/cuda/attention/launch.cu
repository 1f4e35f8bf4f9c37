// Front of paged attention on CUDA: the argument checks that need pointers and strides, the Params
// of a call, and the launch of its plan's kernel (plan.h: Kernel) plus the split-KV combine. The
// kernels live in the arch leaves sm80/ and sm90/; only this file knows there is more than one.
#include "cuda/attention/attention_api.h"
#include "cuda/attention/sm80/attention_sm80.h"
#include "cuda/common/host_util.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/merge/merge.cuh"
#ifdef ATTNSERVE_HAVE_SM90
#include "cuda/attention/sm90/attention_sm90.h"
#include "cuda/attention/sm90/attention_sm90_fp8.h"
#endif

namespace attnserve::cuda::attn {
namespace {

constexpr const char* kOp = "paged_attention";

// What the plan cannot see: strides and alignment of the views.
void check_views(const PagedAttentionArgs& a) {
  require_rows16(kOp, "q", a.q);
  require_rows16(kOp, "out", a.out);
  require_rows16(kOp, "k_cache", a.k_cache);
  require_rows16(kOp, "v_cache", a.v_cache);
  const int64_t ps = a.k_cache.size(1);
  ATTNSERVE_CHECK(a.k_cache.stride(0) == ps * a.k_cache.stride(1) && a.v_cache.stride(0) == ps * a.v_cache.stride(1),
                  kOp,
                  ": on CUDA the pages of k_cache/v_cache must be contiguous runs of token slots "
                  "(stride(0) == page_size * stride(1))");
  ATTNSERVE_CHECK(a.page_table.stride(1) == 1 || a.page_table.size(1) <= 1, kOp,
                  ": page_table rows must be contiguous on CUDA");
}

}  // namespace

Plan select(const PagedAttentionArgs& a, const DeviceCaps& caps, const Tuning& tune) {
  return make_plan(problem_of(a), caps, tune);
}

void run(const PagedAttentionArgs& a, Workspace ws, Stream stream, const Tuning& tune) {
  run(a, make_plan(problem_of(a), current_device_caps(), tune), ws, stream);
}

void run(const PagedAttentionArgs& a, const Plan& plan, Workspace ws, Stream stream) {
  // The plan passed can_implement for these shapes; a plan of other shapes would launch a wrong grid.
  ATTNSERVE_CHECK(problem_of(a) == plan.problem, kOp, ": the plan was made for other shapes than these arguments");
  check_views(a);
  const int total_q = int(a.q.size(0));
  const int b = int(a.cache_seqlens.size(0));
  if (total_q == 0 || b == 0) return;
  const Plan& c = plan;
  ATTNSERVE_CHECK(ws.bytes >= c.ws_bytes, kOp, ": workspace of ", ws.bytes, " bytes is too small, need ", c.ws_bytes,
                  " (paged_attention_workspace_size)");

  const int d = int(a.q.size(2)), d_v = int(a.v_cache.size(3));
  const int h_q = int(a.q.size(1)), h_kv = int(a.k_cache.size(2));
  const int64_t kes = int64_t(dtype_size(a.k_cache.dtype));

  Params p{};
  p.q = static_cast<const char*>(a.q.data);
  p.q_st = a.q.stride(0);
  p.q_sh = a.q.stride(1);
  p.k = static_cast<const char*>(a.k_cache.data);
  p.v = static_cast<const char*>(a.v_cache.data);
  p.k_stok = a.k_cache.stride(1) * kes;
  p.k_sh = a.k_cache.stride(2) * kes;
  p.v_stok = a.v_cache.stride(1) * kes;
  p.v_sh = a.v_cache.stride(2) * kes;
  p.page_table = static_cast<const int*>(a.page_table.data);
  p.pt_st = a.page_table.stride(0);
  p.cache_seqlens = static_cast<const int*>(a.cache_seqlens.data);
  p.cu_seqlens_q = static_cast<const int*>(a.cu_seqlens_q.data);
  p.out = static_cast<char*>(a.out.data);
  p.o_st = a.out.stride(0);
  p.o_sh = a.out.stride(1);
  if (!a.lse.empty_view()) {
    p.lse = static_cast<float*>(a.lse.data);
    p.lse_st = a.lse.stride(0);
    p.lse_sh = a.lse.stride(1);
  }
  if (!a.k_descale.empty_view()) {
    p.k_descale = static_cast<const float*>(a.k_descale.data);
    p.kds_sb = a.k_descale.stride(0);
    p.kds_sh = a.k_descale.stride(1);
  }
  if (!a.v_descale.empty_view()) {
    p.v_descale = static_cast<const float*>(a.v_descale.data);
    p.vds_sb = a.v_descale.stride(0);
    p.vds_sh = a.v_descale.stride(1);
  }
  if (!a.q_descale.empty_view()) {
    p.q_descale = static_cast<const float*>(a.q_descale.data);
    p.qds_sb = a.q_descale.stride(0);
    p.qds_sh = a.q_descale.stride(1);
  }
  p.total_q = total_q;
  p.h_q = h_q;
  p.h_kv = h_kv;
  p.group = h_q / h_kv;
  p.page_size = int(a.k_cache.size(1));
  p.num_pages = int(a.k_cache.size(0));
  p.max_pages = int(a.page_table.size(1));
  p.num_splits = c.num_splits;
  p.split_keys = c.split_keys;
  p.stages = c.stages;
  p.page_shift = -1;
  for (int sh = 0; sh < 31 && c.page_shifts; ++sh)
    if ((1 << sh) == p.page_size) p.page_shift = sh;
  p.page_runs = c.page_runs;
  p.lane_pages = c.lane_pages;
  p.scale_log2 = a.softmax_scale * 1.4426950408889634f;
  p.softcap = a.softcap;
  p.causal = a.causal ? 1 : 0;
  p.window_left = a.window_left;
  p.window_right = a.window_right;
  const WorkspaceLayout w = workspace_layout(c, ws.data);
  p.part_o = w.part_o;
  p.part_lse = w.part_lse;
  cudaStream_t s = to_cuda(stream);
  if (c.kernel == Kernel::sm80 && a.q.dtype == DType::fp8_e4m3) {
    // The portable kernel reads q in out's dtype: widen it (exact) into the workspace; q_descale
    // stays a per-(request, kv head) factor the kernel folds into k_descale's.
    launch_widen_fp8_q(p.q, p.q_st, p.q_sh, total_q, h_q, d, w.q_wide, a.out.dtype, s);
    ATTNSERVE_CUDA_CHECK_LAUNCH();
    p.q = static_cast<const char*>(w.q_wide);
    p.q_st = int64_t(h_q) * d;
    p.q_sh = d;
  }
  switch (c.kernel) {
    case Kernel::sm80: launch_sm80(p, c, b, s); break;
    case Kernel::sm90_fp8:
#ifdef ATTNSERVE_HAVE_SM90
      attn90::launch_paged_attention_fp8(p, a.out.dtype, d, c.m_blocks, b, s);
      ATTNSERVE_CUDA_CHECK_LAUNCH();
      return;
#else
      ATTNSERVE_FAIL(kOp, ": the plan runs ", kernel_name(c.kernel), ", which this build does not carry");
#endif
    case Kernel::sm90_coop:
    case Kernel::sm90_warp_specialized:
    case Kernel::sm90_ping_pong:
    case Kernel::sm90_ping_pong_eager:
#ifdef ATTNSERVE_HAVE_SM90
      attn90::launch_paged_attention(p, a.q.dtype, d, d_v, c.sm90(), c.sm90_kv_load, c.m_blocks, b, s);
      ATTNSERVE_CUDA_CHECK_LAUNCH();
      return;
#else
      ATTNSERVE_FAIL(kOp, ": the plan runs ", kernel_name(c.kernel), ", which this build does not carry");
#endif
  }
  ATTNSERVE_CUDA_CHECK_LAUNCH();

  if (c.num_splits > 1) {
    const int64_t rows = int64_t(total_q) * h_q;
    MergeInput in{p.part_o, rows * d_v,   int64_t(h_q) * d_v, d_v, p.part_lse, rows, h_q,
                  1,        c.num_splits, p.cu_seqlens_q,     b};
    MergeOutput out{a.out.data, a.out.stride(0), a.out.stride(1), p.lse, p.lse_st, p.lse_sh};
    launch_merge_states(in, DType::f32, out, a.out.dtype, total_q, h_q, d_v, s);
  }
}

}  // namespace attnserve::cuda::attn

namespace attnserve::cuda {

std::size_t paged_attention_workspace_size(const PagedAttentionArgs& a, const DeviceCaps& caps) {
  return attn::workspace_size(attn::select(a, caps));
}

void paged_attention(const PagedAttentionArgs& a, Workspace ws, Stream stream) { attn::run(a, ws, stream, {}); }
void paged_attention(const PagedAttentionArgs& a, const attn::Plan& plan, Workspace ws, Stream stream) {
  attn::run(a, plan, ws, stream);
}

}  // namespace attnserve::cuda
