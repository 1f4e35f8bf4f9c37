// Front of MLA (absorbed) attention on CUDA: the checks that need pointers and strides, the Params of
// a call, and the launch of its plan's kernel (plan.h) plus the split-KV combine. The kernels live in
// the sm80 leaf (portable) and the sm90 leaf (Hopper, sm_90a builds only).
#include "cuda/common/host_util.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/merge/merge.cuh"
#include "cuda/mla/mla_api.h"
#include "cuda/mla/sm80/mla_sm80.h"
#ifdef ATTNSERVE_HAVE_SM90
#include "cuda/mla/sm90/mla_sm90.h"
#endif

namespace attnserve::cuda::mla {
namespace {

constexpr const char* kOp = "mla_attention";

// What the plan cannot see: strides and alignment of the views.
void check_views(const MlaAttentionArgs& a) {
  require_rows16(kOp, "q_nope", a.q_nope);
  require_rows16(kOp, "q_rope", a.q_rope);
  require_rows16(kOp, "kv_cache", a.kv_cache);
  require_rows16(kOp, "out", a.out);
  const int64_t ps = a.kv_cache.size(1);
  ATTNSERVE_CHECK(a.kv_cache.stride(0) == ps * a.kv_cache.stride(1), kOp,
                  ": on CUDA the pages of kv_cache must be contiguous runs of token slots");
  ATTNSERVE_CHECK(a.page_table.stride(1) == 1 || a.page_table.size(1) <= 1, kOp,
                  ": page_table rows must be contiguous on CUDA");
}

}  // namespace

MlaConfig select(const MlaAttentionArgs& a, const DeviceCaps& caps, const MlaTuning& tune) {
  return make_plan(problem_of(a), caps, tune);
}

void run(const MlaAttentionArgs& a, Workspace ws, Stream stream, const MlaTuning& tune) {
  run(a, make_plan(problem_of(a), current_device_caps(), tune), ws, stream);
}

void run(const MlaAttentionArgs& a, const Plan& plan, Workspace ws, Stream stream) {
  // The plan passed can_implement for these shapes; a plan of other shapes would launch a wrong grid.
  ATTNSERVE_CHECK(problem_of(a) == plan.problem, kOp, ": the plan was made for other shapes than these arguments");
  check_views(a);
  const int total_q = int(a.q_nope.size(0));
  const int b = int(a.cache_seqlens.size(0));
  if (total_q == 0 || b == 0) return;
  const Plan& c = plan;
  ATTNSERVE_CHECK(ws.bytes >= c.ws_bytes, kOp, ": workspace of ", ws.bytes, " bytes is too small, need ", c.ws_bytes,
                  " (mla_attention_workspace_size)");
  const int h_q = int(a.q_nope.size(1));
  Params p{};
  p.q_nope = static_cast<const char*>(a.q_nope.data);
  p.qn_st = a.q_nope.stride(0);
  p.qn_sh = a.q_nope.stride(1);
  p.q_rope = static_cast<const char*>(a.q_rope.data);
  p.qr_st = a.q_rope.stride(0);
  p.qr_sh = a.q_rope.stride(1);
  p.kv = static_cast<const char*>(a.kv_cache.data);
  p.kv_fp8 = a.kv_cache.dtype == DType::u8 ? 1 : 0;
  p.kv_stok = a.kv_cache.stride(1) * (p.kv_fp8 ? 1 : 2);  // bytes per token slot
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
  p.total_q = total_q;
  p.h_q = h_q;
  p.page_size = int(a.kv_cache.size(1));
  p.num_pages = int(a.kv_cache.size(0));
  p.max_pages = int(a.page_table.size(1));
  p.num_splits = c.num_splits;
  p.split_keys = c.split_keys;
  p.stages = c.stages;
  p.scale_log2 = a.softmax_scale * 1.4426950408889634f;
  p.softcap = a.softcap;
  p.causal = a.causal ? 1 : 0;
  p.window_left = a.window_left;
  p.window_right = a.window_right;
  const int64_t rows = int64_t(total_q) * h_q;
  const WorkspaceLayout w = workspace_layout(c, ws.data);
  p.part_o = w.part_o;
  p.part_lse = w.part_lse;
  cudaStream_t s = to_cuda(stream);
  switch (c.kernel) {
    case Kernel::sm80: launch_sm80(p, c, b, s); break;
    case Kernel::sm90:
#ifdef ATTNSERVE_HAVE_SM90
      if (p.kv_fp8) mla90::launch_mla_sm90_fp8(p, c.m_blocks, b, c.sm90_tma, s);
      else mla90::launch_mla_sm90(p, c.m_blocks, b, c.sm90_tma, s);
#else
      ATTNSERVE_CHECK(false, kOp, ": the plan chose the Hopper kernel, which this build does not carry");
#endif
      break;
  }
  if (c.num_splits > 1) {
    const int dv = c.problem.d_v;
    MergeInput in{p.part_o, rows * dv,    int64_t(h_q) * dv, dv, p.part_lse, rows, h_q,
                  1,        c.num_splits, p.cu_seqlens_q,    b};
    MergeOutput out{a.out.data, a.out.stride(0), a.out.stride(1), p.lse, p.lse_st, p.lse_sh};
    launch_merge_states(in, DType::f32, out, DType::bf16, total_q, h_q, dv, s);
  }
}

}  // namespace attnserve::cuda::mla

namespace attnserve::cuda {

std::size_t mla_attention_workspace_size(const MlaAttentionArgs& a, const DeviceCaps& caps) {
  return mla::workspace_size(mla::select(a, caps, {}));
}

void mla_attention(const MlaAttentionArgs& a, Workspace ws, Stream stream) { mla::run(a, ws, stream, {}); }
void mla_attention(const MlaAttentionArgs& a, const mla::Plan& plan, Workspace ws, Stream stream) {
  mla::run(a, plan, ws, stream);
}

}  // namespace attnserve::cuda
