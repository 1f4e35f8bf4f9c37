// Hopper sparse MLA over the bf16 cache on the dense MLA decode kernel's schedule; see dense_schedule.cuh.
#include "dense_schedule.cuh"
#include "sparse_mla_sm90.h"

namespace attnserve::cuda::sparse_mla90 {

void launch_bf16_dense_schedule(const sparse_mla_op::Params& p, cudaStream_t stream) {
  auto* kernel = dense_schedule::sparse_mla90_dense_kernel;
  constexpr int kSmem = int(mla90::smem_bytes_with_key_mask());
  static const bool configured = [&] {
    ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned(p.rows * p.head_blocks), unsigned(p.num_splits));
  kernel<<<grid, mla90::kThreads, kSmem, stream>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace attnserve::cuda::sparse_mla90
