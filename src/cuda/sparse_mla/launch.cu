// Front of sparse MLA on CUDA (sparse_mla.h): the checks only CUDA needs (alignment, workspace), the
// Params of a call, and the launch of its plan's kernel (plan.h: the sm80 mma.sync kernel over the bf16
// or the FP8-656 cache, sm80/kernel.cuh, the Hopper wgmma kernel, sm90/kernel.cuh, or the small-head FP8
// kernel, sm90/small_heads.cuh) and, when the
// top-k list is split, the combine (sm80/combine.cu: both kernels leave the same partial states). The dispatcher
// (src/ops/sparse_mla.cpp) validated shapes and dtypes; index values live in device memory and are clamped by the
// kernel (slots outside [0, num_slots) skipped, topk_length clamped).
#include "cuda/common/host_util.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/sparse_mla/sm80/sparse_mla_sm80.h"
#ifdef ATTNSERVE_HAVE_SM90
#include "cuda/sparse_mla/sm90/sparse_mla_sm90.h"
#endif
#include "cuda/sparse_mla/sparse_mla_api.h"

namespace attnserve::cuda::sparse_mla_op {
namespace {
constexpr const char* kOp = "sparse_mla";
}  // namespace

SparseMlaConfig select(const SparseMlaArgs& a, const DeviceCaps& caps, const SparseMlaTuning& tune) {
  return make_plan(problem_of(a), caps, tune);
}

void run(const SparseMlaArgs& a, Workspace ws, Stream stream, const SparseMlaTuning& tune) {
  if (a.q.size(0) == 0 || a.q.size(1) == 0) return;
  DeviceGuard guard(a.q.device);
  run(a, make_plan(problem_of(a), current_device_caps(), tune), ws, stream);
}

void run(const SparseMlaArgs& a, const Plan& plan, Workspace ws, Stream stream) {
  const int64_t rows = a.q.size(0), h_q = a.q.size(1);
  if (rows == 0 || h_q == 0) return;
  // The plan passed can_implement for these shapes; a plan of other shapes would launch a wrong grid.
  ATTNSERVE_CHECK(problem_of(a) == plan.problem, kOp, ": the plan was made for other shapes than these arguments");
  require_rows_aligned(kOp, "q", a.q, 16);
  require_rows_aligned(kOp, "kv", a.kv, 16);
  require_rows_aligned(kOp, "out", a.out, 4);
  DeviceGuard guard(a.q.device);
  const Plan& c = plan;
  ATTNSERVE_CHECK(ws.bytes >= c.ws_bytes, kOp, ": workspace of ", ws.bytes, " bytes is too small, need ", c.ws_bytes,
                  " (sparse_mla_workspace_size: ", c.num_splits, " splits of the top-k list for ", rows, " rows x ",
                  c.head_blocks, " head blocks)");
  if (c.ws_bytes) ATTNSERVE_CHECK(aligned_to(ws.data, 16), kOp, ": the workspace must be 16-byte aligned");

  Params p{};
  p.q = a.q.ptr<const uint16_t>();
  p.q_row_stride = a.q.stride(0);
  p.q_head_stride = a.q.stride(1);
  p.kv = a.kv.ptr<const uint8_t>();
  p.kv_row_bytes = a.kv.stride(0) * int64_t(dtype_size(a.kv.dtype));
  p.num_slots = a.kv.size(0);
  p.indices = a.indices.ptr<const int32_t>();
  p.idx_row_stride = a.indices.stride(0);
  p.idx_col_stride = a.indices.stride(1);
  p.topk = int(a.indices.size(1));
  if (!a.topk_length.empty_view()) {
    p.topk_length = a.topk_length.ptr<const int32_t>();
    p.topk_length_stride = a.topk_length.stride(0);
  }
  if (!a.attn_sink.empty_view()) {
    p.sink = a.attn_sink.ptr<const float>();
    p.sink_stride = a.attn_sink.stride(0);
  }
  p.out = a.out.ptr<uint16_t>();
  p.out_row_stride = a.out.stride(0);
  p.out_head_stride = a.out.stride(1);
  if (!a.lse.empty_view()) {
    p.lse = a.lse.ptr<float>();
    p.lse_row_stride = a.lse.stride(0);
    p.lse_head_stride = a.lse.stride(1);
  }
  if (!a.max_logits.empty_view()) {
    p.max_logits = a.max_logits.ptr<float>();
    p.ml_row_stride = a.max_logits.stride(0);
    p.ml_head_stride = a.max_logits.stride(1);
  }
  p.h_q = int(h_q);
  p.rows = rows;
  p.head_blocks = c.head_blocks;
  p.scale_log2 = a.softmax_scale * 1.4426950408889634f;
  p.stages = c.stages;
  p.num_splits = c.num_splits;
  p.split_tiles = c.split_tiles;
  const WorkspaceLayout w = workspace_layout(c, ws.data);
  p.part_o = w.part_o;
  p.part_ml = reinterpret_cast<float2*>(w.part_ml);
  ATTNSERVE_CHECK(rows * p.head_blocks <= int64_t(0x7fffffff), kOp, ": ", rows, " rows x ", p.head_blocks,
                  " head blocks need more CTAs than a CUDA grid holds");
  switch (c.kernel) {
    case Kernel::sm80_fp8: launch_fp8(p, c.head_block, c.smem, stream.handle); break;
    case Kernel::sm80_bf16: launch_bf16(p, c.head_block, c.smem, stream.handle); break;
    case Kernel::sm90_bf16:
    case Kernel::sm90_fp8:
    case Kernel::sm90_fp8_small:
    case Kernel::sm90_bf16_dense:
    case Kernel::sm90_fp8_dense:
#ifdef ATTNSERVE_HAVE_SM90
      if (c.kernel == Kernel::sm90_fp8) sparse_mla90::launch_fp8(p, static_cast<cudaStream_t>(stream.handle));
      else if (c.kernel == Kernel::sm90_fp8_small) {
        ATTNSERVE_CHECK(p.kv_row_bytes < (int64_t(1) << 31), kOp, ": kv rows of ", p.kv_row_bytes,
                        " bytes are wider than the small-head kernel's 32-bit row stride");
        sparse_mla90::launch_fp8_small(p, c.head_block, c.smem, static_cast<cudaStream_t>(stream.handle));
      } else if (c.kernel == Kernel::sm90_bf16_dense) {
        sparse_mla90::launch_bf16_dense_schedule(p, static_cast<cudaStream_t>(stream.handle));
      } else if (c.kernel == Kernel::sm90_fp8_dense) {
        sparse_mla90::launch_fp8_dense_schedule(p, static_cast<cudaStream_t>(stream.handle));
      } else sparse_mla90::launch_bf16(p, static_cast<cudaStream_t>(stream.handle));
      break;
#else
      ATTNSERVE_CHECK(false, kOp, ": the plan asks for the Hopper kernel, which this build lacks");
#endif
  }
  if (c.num_splits > 1) launch_combine(p, stream.handle);
}

}  // namespace attnserve::cuda::sparse_mla_op

namespace attnserve::cuda {

std::size_t sparse_mla_workspace_size(const SparseMlaArgs& a, const DeviceCaps& caps) {
  if (a.q.size(0) == 0 || a.q.size(1) == 0) return 0;
  return sparse_mla_op::workspace_size(sparse_mla_op::select(a, caps));
}

void sparse_mla(const SparseMlaArgs& a, Workspace ws, Stream stream) { sparse_mla_op::run(a, ws, stream); }
void sparse_mla(const SparseMlaArgs& a, const sparse_mla_op::Plan& plan, Workspace ws, Stream stream) {
  sparse_mla_op::run(a, plan, ws, stream);
}

}  // namespace attnserve::cuda
