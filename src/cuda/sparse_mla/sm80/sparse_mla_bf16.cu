// Sparse MLA instantiations for the bf16 cache (head blocks of 16, 32 and 64); see sparse_mla_kernel.cuh.
#include "cuda/sparse_mla/sm80/kernel.cuh"

namespace attnserve::cuda::sparse_mla_op {

void launch_bf16(const Params& p, int head_block, std::size_t smem_bytes, void* stream) {
  launch_cache<false>(p, head_block, smem_bytes, stream);
}

}  // namespace attnserve::cuda::sparse_mla_op
