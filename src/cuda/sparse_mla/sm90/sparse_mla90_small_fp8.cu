// Sparse MLA over the FP8-656 cache for small head counts (16- and 32-head CTAs); see small_heads.cuh.
#include "cuda/common/check.cuh"
#include "small_heads.cuh"

namespace attnserve::cuda::sparse_mla90 {

void launch_fp8_small(const sparse_mla_op::Params& p, int head_block, std::size_t smem_bytes, cudaStream_t stream) {
  const bool done = SmallHeadBlocks::dispatch(
      head_block, [&](auto hb) { launch_small_block<decltype(hb)::value / 16>(p, smem_bytes, stream); });
  ATTNSERVE_CHECK(done, "sparse_mla (sm90 small heads): no kernel for a head block of ", head_block);
}

}  // namespace attnserve::cuda::sparse_mla90
