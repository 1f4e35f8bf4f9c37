// Instantiation of the Hopper paged-attention ping-pong with the split K/V loaders (tile_load_split.cuh):
// f16, head dim 256.
#include "../kernel.cuh"

namespace attnserve::cuda::attn90 {
template void launch_split<__half, 256, 256>(const Params&, int, int, int, cudaStream_t);
}  // namespace attnserve::cuda::attn90
