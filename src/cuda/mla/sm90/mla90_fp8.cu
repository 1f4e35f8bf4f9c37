// Host side and the one instantiation of the Hopper MLA decode kernel (bf16 q, FP8-656 cache: producer_fp8.cuh).
#include "attnserve/error.h"
#include "cuda/common/check.cuh"
#include "kernel.cuh"
#include "mla_sm90.h"

namespace attnserve::cuda::mla90 {

void launch_mla_sm90_fp8(const mla::Params& p, int m_blocks, int batch, cudaStream_t stream) {
  static const bool configured = [] {  // once: the dynamic shared-memory limit
    ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(mla_sm90_kernel<Fill::kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              int(smem_bytes())));
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned(m_blocks), unsigned(p.num_splits), unsigned(batch));
  mla_sm90_kernel<Fill::kFp8><<<grid, kThreads, smem_bytes(), stream>>>(p, CUtensorMap{});
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace attnserve::cuda::mla90
