// Instantiation of the Hopper paged-attention kernel: bf16, head dim 192.
#include "../kernel.cuh"

namespace attnserve::cuda::attn90 {
template void launch<__nv_bfloat16, 192, 192>(const Params&, int, bool, int, int, cudaStream_t);
}  // namespace attnserve::cuda::attn90
