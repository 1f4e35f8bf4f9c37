// Internal entries of the Hopper sparse MLA kernels (built only with sm_90a, ATTNSERVE_HAVE_SM90).
// The plan (../plan.cpp) decides when they run; the front launcher (../launch.cu) calls these, and
// the split combine of the portable path finishes split rows (same partial-state layout, params.cuh).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/sparse_mla/params.cuh"

namespace attnserve::cuda::sparse_mla90 {

// Grid (rows x head_blocks, num_splits) of 64-head CTAs; p.split_tiles counts 64-key tiles.
void launch_bf16(const sparse_mla_op::Params& p, cudaStream_t stream);  // bf16 cache
void launch_fp8(const sparse_mla_op::Params& p, cudaStream_t stream);   // FP8-656 cache
// The bf16 cache on the dense MLA decode kernel's schedule (dense_schedule.cuh): the same grid of 64-head CTAs
// (p.split_tiles counts 64-key tiles), mla90::smem_bytes_with_key_mask() of shared memory.
void launch_bf16_dense_schedule(const sparse_mla_op::Params& p, cudaStream_t stream);
// The same over the FP8-656 cache (dequantized in the stage by the producer, as the dense FP8 kernel does).
void launch_fp8_dense_schedule(const sparse_mla_op::Params& p, cudaStream_t stream);
// Small head counts over the FP8-656 cache (small_heads.cuh): grid (rows x head_blocks, num_splits) of
// 16- or 32-head CTAs; p.split_tiles counts 64-key tiles, p.stages is the ring depth.
void launch_fp8_small(const sparse_mla_op::Params& p, int head_block, std::size_t smem_bytes, cudaStream_t stream);

}  // namespace attnserve::cuda::sparse_mla90
