// Internal entry of the portable (sm80+) MLA kernel; the front launcher (mla/launch.cu) runs it.
#pragma once
#include <cuda_runtime.h>

#include "cuda/mla/params.h"
#include "cuda/mla/plan.h"

namespace attnserve::cuda::mla {

// Grid (m_blocks, num_splits, batch) of 8-warp CTAs with plan.rows_per_block packed rows each.
void launch_sm80(const Params& p, const Plan& plan, int batch, cudaStream_t stream);

}  // namespace attnserve::cuda::mla
