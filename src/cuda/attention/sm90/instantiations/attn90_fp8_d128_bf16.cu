// Instantiation of the Hopper FP8 paged-attention kernel: q/K/V e4m3, head dim 128, out bf16.
#include "../fp8_kernel.cuh"

namespace attnserve::cuda::attn90 {
template void launch_fp8<__nv_bfloat16>(const Params&, int, int, cudaStream_t);
}  // namespace attnserve::cuda::attn90
