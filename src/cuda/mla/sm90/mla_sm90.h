// Internal entry of the Hopper MLA decode kernel (built only with sm_90a, ATTNSERVE_HAVE_SM90). The plan
// (../plan.cpp) decides when it runs; the front launcher (../launch.cu) fills the Params and calls this.
#pragma once
#include <cuda_runtime.h>

#include "cuda/mla/params.h"

namespace attnserve::cuda::mla90 {

// Grid (m_blocks, num_splits, batch) of 384-thread CTAs with 64 packed rows each (config.h). tma
// (Plan::sm90_tma): whole tiles by TMA boxes where the cache allows it (page_size % 64 == 0, 16-byte
// aligned slots), else the cp.async producer.
void launch_mla_sm90(const mla::Params& p, int m_blocks, int batch, bool tma, cudaStream_t stream);
// The same kernel over an FP8-656 cache (p.kv_fp8), dequantized by its producer (producer_fp8.cuh).
// tma: the raw tokens of whole tiles by TMA boxes where the cache allows it (page_size % 64 == 0), else cp.async.
void launch_mla_sm90_fp8(const mla::Params& p, int m_blocks, int batch, bool tma, cudaStream_t stream);

}  // namespace attnserve::cuda::mla90
