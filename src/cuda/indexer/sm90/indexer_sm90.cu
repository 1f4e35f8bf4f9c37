// The Hopper lightning-indexer kernel's instantiations and launch (kernel.cuh): paged next_n 1..4 with
// 16-byte or 4-byte key copies, ragged; each with and without q_scale.
#include "cuda/common/host_util.cuh"
#include "cuda/indexer/sm90/indexer_sm90.h"
#include "cuda/indexer/sm90/kernel.cuh"

namespace attnserve::cuda::indexer {
namespace {

using indexer90::kThreads;
using indexer90::Shape;

template <int kKeyWgs, int kRowsPerWg, int kStages, bool kPaged, bool kQScale, bool kVec16>
void launch_one(const Params& p, const Plan& plan, cudaStream_t s) {
  constexpr Shape shape{kKeyWgs, kRowsPerWg, kStages};
  auto* kernel = indexer90::indexer_sm90_kernel<kKeyWgs, kRowsPerWg, kStages, kPaged, kQScale, kVec16>;
  const std::size_t smem = indexer90::smem_bytes(shape);
  static const bool attr_set = [&] {
    ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)attr_set;
  kernel<<<dim3(unsigned(plan.ctas())), dim3(kThreads), smem, s>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

template <int kNextN, bool kQScale>
void launch_paged(const Params& p, const Plan& plan, cudaStream_t s) {
  constexpr Shape shape = indexer90::paged_shape(kNextN);
  if (plan.key_vec16) launch_one<shape.key_wgs, shape.rows_per_wg, shape.stages, true, kQScale, true>(p, plan, s);
  else launch_one<shape.key_wgs, shape.rows_per_wg, shape.stages, true, kQScale, false>(p, plan, s);
}

template <bool kQScale>
void launch_paged_any(const Params& p, const Plan& plan, cudaStream_t s) {
  switch (plan.rows_per_group) {
    case 1: launch_paged<1, kQScale>(p, plan, s); break;
    case 2: launch_paged<2, kQScale>(p, plan, s); break;
    case 3: launch_paged<3, kQScale>(p, plan, s); break;
    case 4: launch_paged<4, kQScale>(p, plan, s); break;
    default: ATTNSERVE_CHECK(false, "indexer_paged: the Hopper kernel has no next_n ", plan.rows_per_group);
  }
}

}  // namespace

void launch_sm90(const Params& p, const Plan& plan, Stream stream) {
  if (plan.ctas() == 0) return;
  cudaStream_t s = to_cuda(stream);
  constexpr Shape ragged = indexer90::ragged_shape();
  switch (plan.kernel) {
    case Kernel::sm90_paged: launch_paged_any<false>(p, plan, s); break;
    case Kernel::sm90_paged_q_scale: launch_paged_any<true>(p, plan, s); break;
    case Kernel::sm90_ragged:
      launch_one<ragged.key_wgs, ragged.rows_per_wg, ragged.stages, false, false, true>(p, plan, s);
      break;
    case Kernel::sm90_ragged_q_scale:
      launch_one<ragged.key_wgs, ragged.rows_per_wg, ragged.stages, false, true, true>(p, plan, s);
      break;
    default: ATTNSERVE_CHECK(false, "indexer: launch_sm90 given a portable kernel");
  }
}

}  // namespace attnserve::cuda::indexer
