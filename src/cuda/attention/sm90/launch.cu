// Host side of the Hopper paged-attention kernel: dtype x head-dim dispatch to the instantiations.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention_sm90.h"
#include "attnserve/error.h"

namespace attnserve::cuda::attn90 {

template <typename T, int D>
void launch(const attn::Params& p, int variant, int m_blocks, int batch, cudaStream_t stream);

void launch_paged_attention(const attn::Params& p, DType dtype, int d, int variant, int m_blocks, int batch,
                            cudaStream_t stream) {
  ATTNSERVE_CHECK(d == 64 || d == 128, "paged_attention (sm90): head dim 64 or 128, got ", d);
  ATTNSERVE_CHECK(dtype == DType::bf16 || dtype == DType::f16, "paged_attention (sm90): bf16 or f16");
  if (dtype == DType::bf16) {
    if (d == 128) launch<__nv_bfloat16, 128>(p, variant, m_blocks, batch, stream);
    else launch<__nv_bfloat16, 64>(p, variant, m_blocks, batch, stream);
  } else {
    if (d == 128) launch<__half, 128>(p, variant, m_blocks, batch, stream);
    else launch<__half, 64>(p, variant, m_blocks, batch, stream);
  }
}

}  // namespace attnserve::cuda::attn90
