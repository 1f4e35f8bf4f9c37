// Host side of the Hopper paged-attention kernel: dtype x head-dim dispatch to the instantiations.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention_sm90.h"
#include "attnserve/error.h"
#include "config.h"

namespace attnserve::cuda::attn90 {

template <typename T, int D, int DV>
void launch(const attn::Params& p, int variant, bool tma, int m_blocks, int batch, cudaStream_t stream);
template <typename T, int D, int DV>
void launch_split(const attn::Params& p, int kv, int m_blocks, int batch, cudaStream_t stream);

void launch_paged_attention(const attn::Params& p, DType dtype, int d, int d_v, int variant, int kv_load, int m_blocks,
                            int batch, cudaStream_t stream) {
  ATTNSERVE_CHECK(dtype == DType::bf16 || dtype == DType::f16, "paged_attention (sm90): bf16 or f16");
  const bool split = is_split_load(kv_load) && variant == kPingPong && tma_applies(p.page_size);
  const bool launched = HeadDims::dispatch(d, d_v, [&](auto dims) {
    using Dims = decltype(dims);
    if constexpr (split_built(Dims::d, Dims::d_v)) {
      if (split) {
        if (dtype == DType::bf16) launch_split<__nv_bfloat16, Dims::d, Dims::d_v>(p, kv_load, m_blocks, batch, stream);
        else launch_split<__half, Dims::d, Dims::d_v>(p, kv_load, m_blocks, batch, stream);
        return;
      }
    }
    const bool tma = kv_load == kKvTma;
    if (dtype == DType::bf16) launch<__nv_bfloat16, Dims::d, Dims::d_v>(p, variant, tma, m_blocks, batch, stream);
    else launch<__half, Dims::d, Dims::d_v>(p, variant, tma, m_blocks, batch, stream);
  });
  ATTNSERVE_CHECK(launched, "paged_attention (sm90): head dims ", HeadDims::str(), ", got ", d, "/", d_v);
}

}  // namespace attnserve::cuda::attn90
