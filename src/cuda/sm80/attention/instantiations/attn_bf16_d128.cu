// Instantiations of the paged-attention kernel: bf16, head dim 128 (T/fp8 KV x MT 1/4, and the sm_90 bulk-copy decode tiles).
#include "../kernel.cuh"

namespace attnserve::cuda::attn {
// The build holds the bulk-copy kernels for the current device when its machine code (or the PTX it
// was JIT-compiled from) targets sm_90 or later; below that they are trap stubs.
bool bulk_kernels_built() {
  static const bool built = [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, paged_attention_kernel<__nv_bfloat16, 128, false, 1, true>) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return attr.binaryVersion >= 90 && attr.ptxVersion >= 90;
  }();
  return built;
}

template void launch<__nv_bfloat16, 128, false, 1>(const Params&, const Config&, int, cudaStream_t);
template void launch<__nv_bfloat16, 128, false, 4>(const Params&, const Config&, int, cudaStream_t);
template void launch<__nv_bfloat16, 128, true, 1>(const Params&, const Config&, int, cudaStream_t);
template void launch<__nv_bfloat16, 128, true, 4>(const Params&, const Config&, int, cudaStream_t);
template void launch<__nv_bfloat16, 128, false, 1, true>(const Params&, const Config&, int, cudaStream_t);
}  // namespace attnserve::cuda::attn
