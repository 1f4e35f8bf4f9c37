// Host side of the portable MLA kernel: the rows-per-block and cache-format (bf16 | FP8-656) dispatch to
// its instantiations.
#include "attnserve/error.h"
#include "cuda/common/check.cuh"
#include "cuda/mla/sm80/kernel.cuh"
#include "cuda/mla/sm80/mla_sm80.h"

namespace attnserve::cuda::mla {
namespace {

template <int HB, bool FP8>
void launch(const Params& p, dim3 grid, std::size_t smem, cudaStream_t s) {
  static const bool configured = [] {  // once per instantiation: the opt-in shared-memory limit
    int dev = 0, optin = 0;
    ATTNSERVE_CUDA_CHECK(cudaGetDevice(&dev));
    ATTNSERVE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(mla_kernel<HB, FP8>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    return true;
  }();
  (void)configured;
  mla_kernel<HB, FP8><<<grid, kThreads, smem, s>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_sm80(const Params& p, const Plan& plan, int batch, cudaStream_t stream) {
  const dim3 grid(unsigned(plan.m_blocks), unsigned(plan.num_splits), unsigned(batch));
  const bool done = RowsPerBlock::dispatch(plan.rows_per_block, [&](auto hb) {
    if (p.kv_fp8) launch<decltype(hb)::value, true>(p, grid, plan.smem, stream);
    else launch<decltype(hb)::value, false>(p, grid, plan.smem, stream);
  });
  ATTNSERVE_CHECK(done, "mla_attention (sm80): no kernel for ", plan.rows_per_block, " rows per block");
}

}  // namespace attnserve::cuda::mla
