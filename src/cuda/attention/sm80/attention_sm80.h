// Internal entry of the portable (sm80+) paged-attention kernel; the front launcher
// (attention/launch.cu) runs it when the plan's kernel is Kernel::sm80.
#pragma once
#include <cuda_runtime.h>

#include "attnserve/dtype.h"
#include "cuda/attention/params.cuh"
#include "cuda/attention/plan.h"
#include "cuda/attention/sm80/config.h"

namespace attnserve::cuda::attn {

// Grid (m_blocks, h_kv * num_splits, batch) of kThreads; dtype bf16 or f16, (d, d_v) in HeadDims.
void launch_sm80(const Params& p, const Plan& plan, int batch, cudaStream_t stream);

// One instantiation per (dtype, q/k head dim, v head dim, fp8 cache, tile rows): instantiations/*.cu.
template <typename T, int D, int DV, bool FP8, int MT>
void launch(const Params& p, const Config& c, int batch, cudaStream_t stream);

}  // namespace attnserve::cuda::attn
