// Hopper sparse MLA over the bf16 cache; see kernel.cuh.
#include "kernel.cuh"

namespace attnserve::cuda::sparse_mla90 {
void launch_bf16(const sparse_mla_op::Params& p, cudaStream_t stream) { launch<false>(p, stream); }
}  // namespace attnserve::cuda::sparse_mla90
