// Internal entry of the Hopper paged-attention kernel (built only with sm_90a, ATTNSERVE_HAVE_SM90).
// The selector in attention/launch.cu decides when it runs; this only launches.
#pragma once
#include <cuda_runtime.h>

#include "attnserve/tensor.h"
#include "cuda/attention/params.cuh"

namespace attnserve::cuda::attn90 {

// Launches grid (m_blocks, h_kv, batch) of 128-row CTAs; dtype bf16 or f16, (d, d_v) in config.h's
// HeadDims; variant: config.h's Variant (one that variant_built() lists for the head dims); kv_load: config.h's
// KvLoad for the producer kernels (kKvTma: whole K/V tiles by TMA where the cache allows it, kv_tma.h; the split
// loaders kKvKTma / kKvVTma / kKvLean on kPingPong at split_built() head dims, pages of a multiple of 16;
// anything else: the cp.async gather).
void launch_paged_attention(const attn::Params& p, DType dtype, int d, int d_v, int variant, int kv_load, int m_blocks,
                            int batch, cudaStream_t stream);

}  // namespace attnserve::cuda::attn90
