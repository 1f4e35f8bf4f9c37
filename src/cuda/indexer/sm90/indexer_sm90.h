// Internal entry of the Hopper (sm_90a) lightning-indexer kernel; the front launcher (indexer/launch.cu)
// runs it when the plan chose it (plan.kernel is one of the sm90_* kernels).
#pragma once
#include "attnserve/runtime.h"
#include "cuda/indexer/params.cuh"
#include "cuda/indexer/plan.h"

namespace attnserve::cuda::indexer {

// Grid plan.ctas() of indexer90::kThreads-thread CTAs (nothing when empty).
void launch_sm90(const Params& p, const Plan& plan, Stream stream);

}  // namespace attnserve::cuda::indexer
