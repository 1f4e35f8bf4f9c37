// Definitions of the Hopper indexer's per-shape launchers (launchers.h), included by instantiations/*.cu.
#pragma once
#include "cuda/common/host_util.cuh"
#include "cuda/indexer/sm90/kernel.cuh"
#include "cuda/indexer/sm90/launchers.h"
#include "cuda/indexer/sm90/ws_kernel.cuh"

namespace attnserve::cuda::indexer90 {

template <int kKeyWgs, int kRowsPerWg, int kStages, bool kPaged, bool kQScale, bool kVec16>
void launch_kernel(const Params& p, const indexer::Plan& plan, cudaStream_t s) {
  constexpr Shape shape{kKeyWgs, kRowsPerWg, kStages};
  auto* kernel = indexer_sm90_kernel<kKeyWgs, kRowsPerWg, kStages, kPaged, kQScale, kVec16>;
  const std::size_t smem = smem_bytes(shape);
  static const bool attr_set = [&] {
    ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)attr_set;
  kernel<<<dim3(unsigned(plan.ctas())), dim3(kThreads), smem, s>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

template <int kNextN, bool kQScale>
void launch_paged(const Params& p, const indexer::Plan& plan, cudaStream_t s) {
  constexpr Shape shape = paged_shape(kNextN);
  if (plan.key_vec16) launch_kernel<shape.key_wgs, shape.rows_per_wg, shape.stages, true, kQScale, true>(p, plan, s);
  else launch_kernel<shape.key_wgs, shape.rows_per_wg, shape.stages, true, kQScale, false>(p, plan, s);
}

template <bool kQScale>
void launch_ragged(const Params& p, const indexer::Plan& plan, cudaStream_t s) {
  constexpr Shape shape = ragged_shape();
  launch_kernel<shape.key_wgs, shape.rows_per_wg, shape.stages, false, kQScale, true>(p, plan, s);
}

template <int kRows, bool kPaged, bool kQScale, bool kVec16>
void launch_ws_kernel(const Params& p, const indexer::Plan& plan, cudaStream_t s) {
  auto* kernel = indexer_ws_kernel<kRows, kPaged, kQScale, kVec16>;
  const std::size_t smem = ws_smem_bytes(kRows);
  static const bool attr_set = [&] {
    ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)attr_set;
  kernel<<<dim3(unsigned(plan.ctas())), dim3(kWsThreads), smem, s>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

template <int kNextN, bool kQScale>
void launch_ws_paged(const Params& p, const indexer::Plan& plan, cudaStream_t s) {
  if (plan.key_vec16) launch_ws_kernel<kNextN, true, kQScale, true>(p, plan, s);
  else launch_ws_kernel<kNextN, true, kQScale, false>(p, plan, s);
}

template <bool kQScale>
void launch_ws_ragged(const Params& p, const indexer::Plan& plan, cudaStream_t s) {
  launch_ws_kernel<kWsRaggedRows, false, kQScale, true>(p, plan, s);
}

}  // namespace attnserve::cuda::indexer90
