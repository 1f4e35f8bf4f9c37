// Sparse MLA instantiations for the FP8-656 cache (head blocks of 16, 32 and 64); see sparse_mla_kernel.cuh.
#include "cuda/common/check.cuh"
#include "cuda/sm80/sparse_mla/sparse_mla_kernel.cuh"

namespace attnserve::cuda::sparse_mla_sm80 {
namespace {

template <int HB>
void launch_block(const Params& p, std::size_t smem_bytes, cudaStream_t stream) {
  auto* kernel = sparse_mla_kernel<HB, true>;
  ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes)));
  // All of L1 as shared memory: two split-K CTAs of HB 16 (2 x 106 KB) share an SM only in the largest
  // carveout; the driver would otherwise pick the smallest that holds one CTA.
  ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, int(cudaSharedmemCarveoutMaxShared)));
  const dim3 grid(unsigned(p.rows * p.head_blocks), unsigned(p.num_splits));  // y: split of the top-k list
  kernel<<<grid, kThreads, smem_bytes, stream>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_fp8(const Params& p, int head_block, std::size_t smem_bytes, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (head_block) {
    case 16: launch_block<16>(p, smem_bytes, s); break;
    case 32: launch_block<32>(p, smem_bytes, s); break;
    default: launch_block<64>(p, smem_bytes, s); break;
  }
}

}  // namespace attnserve::cuda::sparse_mla_sm80
