// Internal entry of the portable (sm80+) paged-attention kernel; the front launcher
// (attention/launch.cu) runs it when the plan's kernel is Kernel::sm80.
#pragma once
#include <cuda_runtime.h>

#include "attnserve/dtype.h"
#include "cuda/attention/params.cuh"
#include "cuda/attention/plan.h"
#include "cuda/attention/sm80/config.h"

namespace attnserve::cuda::attn {

// Grid (m_blocks, h_kv * num_splits, batch) of kThreads; q/out dtype bf16 or f16 (plan.problem.out_dtype:
// an fp8 q is widened first), (d, d_v) in HeadDims.
void launch_sm80(const Params& p, const Plan& plan, int batch, cudaStream_t stream);

// fp8 q -> out's dtype (bf16 | f16, exact) into a contiguous [total_q, h_q, d] buffer (element strides
// q_st, q_sh of the fp8 source), for the portable kernel (q_descale is applied there, with k_descale).
void launch_widen_fp8_q(const char* q, int64_t q_st, int64_t q_sh, int total_q, int h_q, int d, void* dst,
                        DType out_dtype, cudaStream_t stream);

// One instantiation per (dtype, q/k head dim, v head dim, fp8 cache, tile rows): instantiations/*.cu.
template <typename T, int D, int DV, bool FP8, int MT>
void launch(const Params& p, const Config& c, int batch, cudaStream_t stream);

}  // namespace attnserve::cuda::attn
