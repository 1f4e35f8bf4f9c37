// Hopper sparse MLA over the FP8-656 cache; see kernel.cuh.
#include "kernel.cuh"

namespace attnserve::cuda::sparse_mla90 {
void launch_fp8(const sparse_mla_op::Params& p, cudaStream_t stream) { launch<true>(p, stream); }
}  // namespace attnserve::cuda::sparse_mla90
