// The Hopper lightning-indexer kernels' launch: the plan's kernel and next_n to the per-shape launchers
// (launchers.h; instantiated in instantiations/).
#include "cuda/common/host_util.cuh"
#include "cuda/indexer/sm90/config.h"
#include "cuda/indexer/sm90/indexer_sm90.h"
#include "cuda/indexer/sm90/launchers.h"

namespace attnserve::cuda::indexer {
namespace {

template <bool kQScale, bool kBatched>
void launch_ws_paged_any(const Params& p, const Plan& plan, cudaStream_t s) {
  switch (plan.rows_per_group) {
    case 1: indexer90::launch_ws_paged<1, kQScale, kBatched>(p, plan, s); break;
    case 2: indexer90::launch_ws_paged<2, kQScale, kBatched>(p, plan, s); break;
    case 3: indexer90::launch_ws_paged<3, kQScale, kBatched>(p, plan, s); break;
    case 4: indexer90::launch_ws_paged<4, kQScale, kBatched>(p, plan, s); break;
    default: ATTNSERVE_CHECK(false, "indexer_paged: the Hopper kernel has no next_n ", plan.rows_per_group);
  }
}

// The ws kernel with four math warpgroups (the plan gives kWsQuadMode only where it is instantiated).
template <bool kQScale>
void launch_ws_quad(const Params& p, const Plan& plan, cudaStream_t s) {
  if (!plan.problem.paged) return indexer90::launch_ws_ragged_quad<kQScale>(p, plan, s);
  switch (plan.rows_per_group) {
    case 2: indexer90::launch_ws_paged_quad<2, kQScale>(p, plan, s); break;
    case 4: indexer90::launch_ws_paged_quad<4, kQScale>(p, plan, s); break;
    default: ATTNSERVE_CHECK(false, "indexer_paged: the quad ws kernel has no next_n ", plan.rows_per_group);
  }
}

// The ws kernel: four math warpgroups (ws_mode bit kWsQuad), the batched epilogue (bit kWsBatched) or the
// per-row one.
template <bool kQScale>
void launch_ws(const Params& p, const Plan& plan, cudaStream_t s) {
  if ((plan.ws_mode & indexer90::kWsQuad) != 0) return launch_ws_quad<kQScale>(p, plan, s);
  const bool batched = (plan.ws_mode & indexer90::kWsBatched) != 0;
  if (plan.problem.paged) {
    if (batched) launch_ws_paged_any<kQScale, true>(p, plan, s);
    else launch_ws_paged_any<kQScale, false>(p, plan, s);
  } else {
    if (batched) indexer90::launch_ws_ragged<kQScale, true>(p, plan, s);
    else indexer90::launch_ws_ragged<kQScale, false>(p, plan, s);
  }
}

}  // namespace

void launch_sm90(const Params& p, const Plan& plan, Stream stream) {
  if (plan.ctas() == 0) return;
  cudaStream_t s = to_cuda(stream);
  switch (plan.kernel) {
    case Kernel::sm90_ragged: indexer90::launch_ragged<false>(p, plan, s); break;
    case Kernel::sm90_ragged_q_scale: indexer90::launch_ragged<true>(p, plan, s); break;
    case Kernel::sm90ws_paged:
    case Kernel::sm90ws_ragged: launch_ws<false>(p, plan, s); break;
    case Kernel::sm90ws_paged_q_scale:
    case Kernel::sm90ws_ragged_q_scale: launch_ws<true>(p, plan, s); break;
    default: ATTNSERVE_CHECK(false, "indexer: launch_sm90 given a portable kernel");
  }
}

}  // namespace attnserve::cuda::indexer
