// CUDA exact top-k per row with the fused slot transforms (topk.h), same ranking as the CPU oracle
// (src/cpu/topk_select.h): larger wins, -0 == +0, -inf below finite, NaN below -inf, every position in
// [0, len) is a candidate, ties at the k-th value -> the lower position.
//
// One CTA per row, or one cluster of plan.cluster CTAs per row (sm_90; grid = rows * cluster, fixed by
// the scores' shape: graph safe, no host sync, no workspace). Two kernels, both exact for any input; the
// plan (cuda/topk/plan.h) picks one:
//   topk_sampled.cuh        one read of the row: sampled threshold, candidates in shared memory, radix
//                           select there; rows it cannot bound (adversarial) go to the global path inside
//                           the same CTA;
//   topk_radix_global.cuh   radix select streaming the row from L2/HBM on every pass (up to 5 reads).
#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/common/host_util.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/topk/plan.h"
#include "cuda/topk/sm80/topk_path.h"
#include "cuda/topk/sm80/topk_sampled.cuh"

namespace attnserve::cuda {
namespace {

using topk_detail::TopkParams;

TopkPath g_topk_path = TopkPath::automatic;
int g_debug_stop = 0;
int g_threads = 0;
int g_cluster = 0;
bool g_direct_emit = false;
TopkEmit g_emit = TopkEmit::automatic;
int g_l2_prefetch = -1;
int g_lean_select = -1;
int g_offset_digit = -1;
int g_stream = -1;
int g_fused_count = -1;
int g_bin_list = -1;

static_assert(topk_op::sampled_smem_bytes(256) == sizeof(topk_detail::SampledSmem<256>) &&
                  topk_op::sampled_smem_bytes(1024) == sizeof(topk_detail::SampledSmem<1024>),
              "the plan's shared-memory count (plan.h) must match the kernel's");
static_assert(topk_op::sampled_stream_smem_bytes(1024) ==
                  sizeof(topk_detail::SampledSmem<1024>) + 1024 * topk_detail::kStreamRing * 16,
              "the streaming kernel's ring (plan.h) must match the kernel's");

// Whether the sampled kernel's code for this device has the cluster path (sm_90 machine code; a build
// for sm_80 only runs its sm_80 code on Hopper, where the path is compiled out).
template <auto kKernel>
bool has_cluster_code() {
  static const bool yes = [] {
    cudaFuncAttributes attr{};
    ATTNSERVE_CUDA_CHECK(cudaFuncGetAttributes(&attr, kKernel));
    return attr.binaryVersion >= 90;
  }();
  return yes;
}

// A launch of `grid` CTAs of `threads` in clusters of (cluster, 1, 1); its one attribute lives in `attr`,
// which must outlive the launch.
cudaLaunchConfig_t cluster_launch(unsigned grid, int threads, int cluster, std::size_t smem, cudaStream_t s,
                                  cudaLaunchAttribute& attr) {
  attr = {};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = unsigned(cluster);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(unsigned(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cfg;
}

// Whether clusters of `cluster` CTAs of this kernel can run on this device (sm_90 code, and a GPC with room
// for them); asked once per kernel and cluster size. Without, the launch is one CTA per row (same result).
template <auto kKernel>
bool cluster_fits(int threads, int cluster, std::size_t smem) {
  static int known[topk_op::kClusterMax + 1] = {};  // 0 not asked yet, 1 fits, -1 not
  int& k = known[std::clamp(cluster, 0, topk_op::kClusterMax)];
  if (k == 0) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = cluster_launch(unsigned(cluster), threads, cluster, smem, nullptr, attr);
    int n = 0;
    const bool ok = has_cluster_code<kKernel>() && cudaOccupancyMaxActiveClusters(&n, kKernel, &cfg) == cudaSuccess;
    if (!ok) (void)cudaGetLastError();  // clear the sticky-free error of the query
    k = ok && n > 0 ? 1 : -1;
  }
  return k > 0;
}

// The dynamic shared memory attribute is set once per kernel (a template argument: the kernels share one
// function type, so a per-type static would set it for the first only); the plan checked the size.
// cluster > 1: a launch with cluster dimensions (cluster, 1, 1), rows * cluster CTAs.
template <auto kKernel>
void launch_with_smem(const TopkParams& p, unsigned rows, int threads, int cluster, std::size_t smem, cudaStream_t s) {
  static const bool configured = [&] {
    ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)configured;
  if (cluster <= 1 || !cluster_fits<kKernel>(threads, cluster, smem)) {
    kKernel<<<rows, threads, smem, s>>>(p);
    return;
  }
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = cluster_launch(rows * unsigned(cluster), threads, cluster, smem, s, attr);
  ATTNSERVE_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kKernel, p));
}

template <int kThreads>
void launch(const topk_op::Plan& plan, const TopkParams& p, unsigned rows, cudaStream_t s) {
  constexpr int kUnroll = 4;
  if (plan.select != topk_op::Select::sampled) {
    topk_detail::topk_global_kernel<kThreads><<<rows, kThreads, 0, s>>>(p);
    return;
  }
  // The emit is a compile-time variant of the one kernel (kKeepMasks; the lean one a runtime flag of it).
  // The streaming filter (plan.stream: 1024 threads, kept masks) is a kernel of its own (kStream).
  if constexpr (kThreads == 1024) {
    if (plan.bin_list) {  // the plan: kept-masks emits only
      if (plan.stream)
        launch_with_smem<topk_detail::topk_sampled_kernel<kThreads, kUnroll, true, true, true>>(
            p, rows, kThreads, plan.cluster, plan.smem, s);
      else
        launch_with_smem<topk_detail::topk_sampled_kernel<kThreads, kUnroll, true, false, true>>(
            p, rows, kThreads, plan.cluster, plan.smem, s);
      return;
    }
    if (plan.stream) {
      launch_with_smem<topk_detail::topk_sampled_kernel<kThreads, kUnroll, true, true>>(p, rows, kThreads, plan.cluster,
                                                                                        plan.smem, s);
      return;
    }
  }
  if (plan.emit == topk_op::Emit::kept_masks || plan.emit == topk_op::Emit::kept_masks_lean)
    launch_with_smem<topk_detail::topk_sampled_kernel<kThreads, kUnroll, true>>(p, rows, kThreads, plan.cluster,
                                                                                plan.smem, s);
  else
    launch_with_smem<topk_detail::topk_sampled_kernel<kThreads, kUnroll, false>>(p, rows, kThreads, plan.cluster,
                                                                                 plan.smem, s);
}

topk_op::Tuning tuning_of(TopkPath path, int threads, int cluster, TopkEmit emit, int l2_prefetch, int lean_select,
                          int offset_digit, int stream, int fused_count, int bin_list) {
  topk_op::Tuning t;
  if (path == TopkPath::global) t.select = topk_op::Select::global;
  if (path == TopkPath::sampled) t.select = topk_op::Select::sampled;
  t.threads = threads;
  t.cluster = cluster;
  t.emit = emit == TopkEmit::kept_masks        ? topk_op::Emit::kept_masks
           : emit == TopkEmit::kept_masks_lean ? topk_op::Emit::kept_masks_lean
           : emit == TopkEmit::recount         ? topk_op::Emit::recount
                                               : topk_op::Emit::automatic;
  t.l2_prefetch = l2_prefetch;
  t.lean_select = lean_select;
  t.offset_digit = offset_digit;
  t.stream = stream;
  t.fused_count = fused_count;
  t.bin_list = bin_list;
  return t;
}

}  // namespace

void set_topk_path(TopkPath path) { g_topk_path = path; }
TopkPath topk_path() { return g_topk_path; }
void set_topk_debug_stop(int stop) { g_debug_stop = stop; }
void set_topk_threads(int threads) { g_threads = threads; }
void set_topk_cluster(int ctas) { g_cluster = ctas; }
void set_topk_direct_emit(bool direct) { g_direct_emit = direct; }
void set_topk_emit(TopkEmit emit) { g_emit = emit; }
void set_topk_l2_prefetch(int mode) { g_l2_prefetch = mode; }
void set_topk_lean_select(int mode) { g_lean_select = mode; }
void set_topk_offset_digit(int mode) { g_offset_digit = mode; }
void set_topk_stream(int mode) { g_stream = mode; }
void set_topk_fused_count(int mode) { g_fused_count = mode; }
void set_topk_bin_list(int mode) { g_bin_list = mode; }

std::size_t topk_workspace_size(const TopkArgs& a, const DeviceCaps& caps) {
  return topk_op::workspace_size(topk_op::make_plan(topk_op::problem_of(a), caps));
}

void topk(const TopkArgs& a, Workspace, Stream stream) {
  const int64_t rows = a.scores.size(0);
  if (rows == 0) return;
  DeviceGuard guard(a.scores.device);
  const topk_op::Plan plan =
      topk_op::make_plan(topk_op::problem_of(a), current_device_caps(),
                         tuning_of(g_topk_path, g_threads, g_cluster, g_emit, g_l2_prefetch, g_lean_select,
                                   g_offset_digit, g_stream, g_fused_count, g_bin_list));
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
  p.direct_emit = g_direct_emit ? 1 : 0;
  p.debug_stop = g_debug_stop;
  p.l2_prefetch = plan.l2_prefetch ? 1 : 0;
  p.lean_emit = plan.emit == topk_op::Emit::kept_masks_lean ? 1 : 0;
  p.lean_select = plan.lean_select ? 1 : 0;
  p.offset_digit = plan.offset_digit ? 1 : 0;
  p.fused_count = plan.fused_count ? 1 : 0;
  if (wide) launch<1024>(plan, p, unsigned(rows), s);
  else launch<256>(plan, p, unsigned(rows), s);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace attnserve::cuda
