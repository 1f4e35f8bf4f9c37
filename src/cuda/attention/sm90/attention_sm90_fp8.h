// Internal entry of the Hopper FP8 paged-attention kernel (built only with sm_90a, ATTNSERVE_HAVE_SM90).
// The plan (attention/plan.cpp: Kernel::sm90_fp8) decides when it runs; this only launches.
#pragma once
#include <cuda_runtime.h>

#include "attnserve/tensor.h"
#include "cuda/attention/params.cuh"

namespace attnserve::cuda::attn90 {

// Launches grid (m_blocks, h_kv, batch) of 128-row CTAs: q, K, V fp8_e4m3, out_dtype bf16 or f16,
// d in fp8_config.h's Fp8HeadDims.
void launch_paged_attention_fp8(const attn::Params& p, DType out_dtype, int d, int m_blocks, int batch,
                                cudaStream_t stream);

}  // namespace attnserve::cuda::attn90
