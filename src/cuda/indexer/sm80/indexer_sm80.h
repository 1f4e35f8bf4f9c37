// Internal entry of the portable (sm80+) lightning-indexer kernel; the front launcher
// (indexer/launch.cu) runs it.
#pragma once
#include "attnserve/runtime.h"
#include "cuda/indexer/params.cuh"
#include "cuda/indexer/plan.h"

namespace attnserve::cuda::indexer {

// Grid plan.ctas() of kWarps-warp CTAs (nothing when empty); the kernel variant is plan.kernel.
void launch_sm80(const Params& p, const Plan& plan, Stream stream);

}  // namespace attnserve::cuda::indexer
