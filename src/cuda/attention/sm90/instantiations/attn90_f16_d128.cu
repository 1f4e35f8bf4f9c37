// Instantiation of the Hopper paged-attention kernel: f16, head dim 128.
#include "../kernel.cuh"

namespace attnserve::cuda::attn90 {
template void launch<__half, 128, 128>(const Params&, int, bool, int, int, cudaStream_t);
}  // namespace attnserve::cuda::attn90
