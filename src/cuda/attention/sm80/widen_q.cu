// fp8 e4m3 q -> bf16 / f16 (exact: every e4m3 value is representable in both), for the portable
// kernel, which reads q in out's dtype. One thread per 4 elements; rows by the source's strides.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attnserve/error.h"
#include "cuda/attention/sm80/attention_sm80.h"
#include "cuda/common/numeric.cuh"
#include "cuda/common/ptx.cuh"

namespace attnserve::cuda::attn {
namespace {

template <typename T>
__global__ void widen_fp8_q_kernel(const uint8_t* q, int64_t q_st, int64_t q_sh, int64_t rows, int h_q, int d, T* dst) {
  const int quads = d / 4;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // quad index over [rows, h_q, d / 4]
  if (i >= rows * h_q * quads) return;
  const int64_t rh = i / quads, row = rh / h_q;
  const int h = int(rh - row * h_q), c = int(i - rh * quads) * 4;
  const uint32_t w = *reinterpret_cast<const uint32_t*>(q + row * q_st + int64_t(h) * q_sh + c);
  const float2 lo = fp8x2_to_float2(uint16_t(w & 0xffffu)), hi = fp8x2_to_float2(uint16_t(w >> 16));
  uint2 out;
  out.x = ptx::pack2<T>(lo.x, lo.y);
  out.y = ptx::pack2<T>(hi.x, hi.y);
  *reinterpret_cast<uint2*>(dst + (rh * d + c)) = out;
}

}  // namespace

void launch_widen_fp8_q(const char* q, int64_t q_st, int64_t q_sh, int total_q, int h_q, int d, void* dst,
                        DType out_dtype, cudaStream_t stream) {
  ATTNSERVE_CHECK(d % 4 == 0, "paged_attention: an fp8 q needs a head dim that is a multiple of 4, got ", d);
  const int64_t n = int64_t(total_q) * h_q * (d / 4);
  if (n == 0) return;
  const int threads = 256;
  const unsigned blocks = unsigned((n + threads - 1) / threads);
  const auto* src = reinterpret_cast<const uint8_t*>(q);
  if (out_dtype == DType::bf16)
    widen_fp8_q_kernel<<<blocks, threads, 0, stream>>>(src, q_st, q_sh, total_q, h_q, d,
                                                       static_cast<__nv_bfloat16*>(dst));
  else widen_fp8_q_kernel<<<blocks, threads, 0, stream>>>(src, q_st, q_sh, total_q, h_q, d, static_cast<__half*>(dst));
}

}  // namespace attnserve::cuda::attn
