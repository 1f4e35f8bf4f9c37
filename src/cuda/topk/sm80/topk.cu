// CUDA exact top-k per row with the fused slot transforms (topk.h), same ranking as the CPU oracle
// (src/cpu/topk_select.h): larger wins, -0 == +0, -inf below finite, NaN below -inf, every position in
// [0, len) is a candidate, ties at the k-th value -> the lower position.
//
// One CTA per row (grid = rows: fixed by the scores' shape, graph safe, no host sync, no workspace).
// Three kernels, all exact for any input; the plan (cuda/topk/plan.h) picks one:
//   topk_sampled_v4.cuh     one read of the row: sampled threshold, candidates in shared memory, radix
//                           select there; rows it cannot bound (adversarial) go to the global path inside
//                           the same CTA;
//   topk_sampled.cuh        the same algorithm, session 3's measured version (7a32edf);
//   topk_radix_global.cuh   radix select streaming the row from L2/HBM on every pass (up to 5 reads).
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/common/host_util.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/topk/plan.h"
#include "cuda/topk/sm80/topk_path.h"
#include "cuda/topk/sm80/topk_sampled.cuh"
#include "cuda/topk/sm80/topk_sampled_v4.cuh"

namespace attnserve::cuda {
namespace {

using topk_detail::TopkParams;

TopkPath g_topk_path = TopkPath::automatic;
int g_debug_stop = 0;
int g_threads = 0;

static_assert(topk_op::sampled_smem_bytes(256) == sizeof(topk_detail::SampledSmem<256>) &&
                  topk_op::sampled_smem_bytes(1024) == sizeof(topk_detail::SampledSmem<1024>) &&
                  sizeof(topk_detail::SampledSmem<1024>) == sizeof(topk_detail::v4::SampledSmem<1024>) &&
                  sizeof(topk_detail::SampledSmem<256>) == sizeof(topk_detail::v4::SampledSmem<256>),
              "the plan's shared-memory count (plan.h) must match the kernels'");

// The dynamic shared memory attribute is set once per kernel (a template argument: the kernels share one
// function type, so a per-type static would set it for the first only); the plan checked the size.
template <auto kKernel>
void launch_with_smem(const TopkParams& p, unsigned rows, int threads, std::size_t smem, cudaStream_t s) {
  static const bool configured = [&] {
    ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)configured;
  kKernel<<<rows, threads, smem, s>>>(p);
}

template <int kThreads>
void launch(const topk_op::Plan& plan, const TopkParams& p, unsigned rows, cudaStream_t s) {
  constexpr int kUnroll = 4;
  switch (plan.select) {
    case topk_op::Select::sampled_v4:
      launch_with_smem<topk_detail::v4::topk_sampled_kernel<kThreads, kUnroll>>(p, rows, kThreads, plan.smem, s);
      break;
    case topk_op::Select::sampled:
      launch_with_smem<topk_detail::topk_sampled_kernel<kThreads, kUnroll>>(p, rows, kThreads, plan.smem, s);
      break;
    default: topk_detail::topk_global_kernel<kThreads><<<rows, kThreads, 0, s>>>(p);
  }
}

topk_op::Tuning tuning_of(TopkPath path) {
  switch (path) {
    case TopkPath::global: return {.select = topk_op::Select::global};
    case TopkPath::sampled:
    case TopkPath::sampled_prefetch:
    case TopkPath::sampled_match_any: return {.select = topk_op::Select::sampled};
    case TopkPath::sampled_v4: return {.select = topk_op::Select::sampled_v4};
    default: return {};
  }
}
topk_op::Tuning tuning_of(TopkPath path, int threads) {
  topk_op::Tuning t = tuning_of(path);
  t.threads = threads;
  return t;
}

}  // namespace

void set_topk_path(TopkPath path) { g_topk_path = path; }
TopkPath topk_path() { return g_topk_path; }
void set_topk_debug_stop(int stop) { g_debug_stop = stop; }
void set_topk_threads(int threads) { g_threads = threads; }

std::size_t topk_workspace_size(const TopkArgs& a, const DeviceCaps& caps) {
  return topk_op::workspace_size(topk_op::make_plan(topk_op::problem_of(a), caps));
}

void topk(const TopkArgs& a, Workspace, Stream stream) {
  const int64_t rows = a.scores.size(0);
  if (rows == 0) return;
  DeviceGuard guard(a.scores.device);
  const topk_op::Plan plan =
      topk_op::make_plan(topk_op::problem_of(a), current_device_caps(), tuning_of(g_topk_path, g_threads));
  TopkParams p{};
  p.scores = a.scores.ptr<const float>();
  p.score_row_stride = a.scores.stride(0);
  p.width = a.scores.size(1);
  p.lengths = a.lengths.ptr<const int32_t>();
  p.length_stride = a.lengths.stride(0);
  p.row_starts = a.row_starts.empty_view() ? nullptr : a.row_starts.ptr<const int32_t>();
  p.start_stride = a.row_starts.empty_view() ? 0 : a.row_starts.stride(0);
  p.out = a.out.ptr<int32_t>();
  p.out_row_stride = a.out.stride(0);
  p.out_col_stride = a.out.stride(1);
  p.rows = rows;
  p.k = a.topk;
  p.transform = int(a.transform);
  if (a.transform == TopkTransform::decode || a.transform == TopkTransform::prefill) {
    p.table = a.page_table_1.ptr<const int32_t>();
    p.table_row_stride = a.page_table_1.stride(0);
    p.table_col_stride = a.page_table_1.stride(1);
    p.table_width = a.page_table_1.size(1);
  }
  if (a.transform == TopkTransform::prefill) {
    p.cu_seqlens_q = a.cu_seqlens_q.ptr<const int32_t>();
    p.cu_stride = a.cu_seqlens_q.stride(0);
    p.num_requests = a.page_table_1.size(0);
    ATTNSERVE_CHECK(p.num_requests >= 1, "topk: transform 'prefill' needs 'page_table_1' with at least one row");
  }
  if (a.transform == TopkTransform::ragged) {
    p.offsets = a.offsets.ptr<const int32_t>();
    p.offset_stride = a.offsets.stride(0);
  }
  cudaStream_t s = to_cuda(stream);
  // topk_op::make_plan: 1024 threads stream long rows, 256 let several short rows share an SM.
  const bool wide = plan.kernel == topk_op::Kernel::rows_1024;
  // Optional L2 prefetch per row (sampled kernel): ~40 MB over the rows resident at once, at most 1 MB
  // each. Off by default: 128 x 64K took 37.5 us with it against 33.5 without (f1b581d, H200).
  if (g_topk_path == TopkPath::sampled_prefetch) {
    const int64_t resident = std::min<int64_t>(rows, int64_t(current_device_caps().num_sms) * (wide ? 1 : 4));
    p.prefetch_bytes = std::min<int64_t>((int64_t(40) << 20) / std::max<int64_t>(resident, 1), int64_t(1) << 20);
  }
  p.hist_mode = g_topk_path == TopkPath::sampled_match_any ? 1 : 0;
  p.debug_stop = g_debug_stop;
  if (wide) launch<1024>(plan, p, unsigned(rows), s);
  else launch<256>(plan, p, unsigned(rows), s);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace attnserve::cuda
