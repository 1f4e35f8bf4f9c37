// Instantiations of the paged-attention kernel: f16, head dim 128 (T/fp8 KV x MT 1/4).
#include "../kernel.cuh"

namespace attnserve::cuda::attn {
template void launch<__half, 128, 128, false, 1>(const Params&, const Config&, int, cudaStream_t);
template void launch<__half, 128, 128, false, 4>(const Params&, const Config&, int, cudaStream_t);
template void launch<__half, 128, 128, true, 1>(const Params&, const Config&, int, cudaStream_t);
template void launch<__half, 128, 128, true, 4>(const Params&, const Config&, int, cudaStream_t);
}  // namespace attnserve::cuda::attn
