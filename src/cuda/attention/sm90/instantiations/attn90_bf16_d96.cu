// Instantiation of the Hopper paged-attention kernel: bf16, head dim 96.
#include "../kernel.cuh"

namespace attnserve::cuda::attn90 {
template void launch<__nv_bfloat16, 96, 96>(const Params&, int, bool, int, int, cudaStream_t);
}  // namespace attnserve::cuda::attn90
