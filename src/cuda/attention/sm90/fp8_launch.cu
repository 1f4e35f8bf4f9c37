// Host side of the Hopper FP8 paged-attention kernel: output dtype x head-dim dispatch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention_sm90_fp8.h"
#include "attnserve/error.h"
#include "fp8_config.h"

namespace attnserve::cuda::attn90 {

template <typename TO>
void launch_fp8(const attn::Params& p, int m_blocks, int batch, cudaStream_t stream);

void launch_paged_attention_fp8(const attn::Params& p, DType out_dtype, int d, int m_blocks, int batch,
                                cudaStream_t stream) {
  ATTNSERVE_CHECK(out_dtype == DType::bf16 || out_dtype == DType::f16, "paged_attention (sm90 fp8): out bf16 or f16");
  ATTNSERVE_CHECK(Fp8HeadDims::contains(d), "paged_attention (sm90 fp8): head dims ", Fp8HeadDims::str(), ", got ", d);
  if (out_dtype == DType::bf16) launch_fp8<__nv_bfloat16>(p, m_blocks, batch, stream);
  else launch_fp8<__half>(p, m_blocks, batch, stream);
}

}  // namespace attnserve::cuda::attn90
