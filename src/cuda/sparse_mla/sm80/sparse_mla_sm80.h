// Internal entries of the portable (sm80+) sparse MLA kernels; the front launcher (sparse_mla/launch.cu)
// runs them.
#pragma once
#include <cstddef>

#include "cuda/sparse_mla/params.cuh"
#include "cuda/sparse_mla/sm80/config.h"

namespace attnserve::cuda::sparse_mla_op {

// Launches (sparse_mla_bf16.cu / sparse_mla_fp8.cu). head_block is 16, 32 or 64.
void launch_bf16(const Params& p, int head_block, std::size_t smem_bytes, void* stream);
void launch_fp8(const Params& p, int head_block, std::size_t smem_bytes, void* stream);
// The split-K combine (sparse_mla_combine.cu); only for num_splits > 1.
void launch_combine(const Params& p, void* stream);

}  // namespace attnserve::cuda::sparse_mla_op
