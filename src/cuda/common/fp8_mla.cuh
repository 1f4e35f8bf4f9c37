// Device helpers of the FP8-656 MLA token (attnserve/cache_formats.h: 512 e4m3 latent values, 4 f32
// scales, one per 128 values, then 64 bf16 rope values), shared by the dense MLA kernels' producers.
// Dequantization is fp8 * scale in f32, rounded to bf16 once (the sparse kernels' rule; exact for the
// power-of-two scales the store writes).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/common/numeric.cuh"
#include "cuda/common/ptx.cuh"

namespace attnserve::cuda {

constexpr int kFp8MlaBytes = 656;        // Fp8MlaLayout::kBytes
constexpr int kFp8MlaScaleOffset = 512;  // 4 f32 scales
constexpr int kFp8MlaRopeOffset = 528;   // 64 bf16 rope values (8 chunks of 16 bytes)

// 16 e4m3 values (one 16-byte chunk) times `scale` -> 16 bf16 (two 16-byte chunks, lo = values 0..7).
__device__ __forceinline__ void fp8x16_to_bf16x16(const uint4 u, float scale, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
  uint32_t o[8];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 f0 = fp8x2_to_float2(uint16_t(w[e] & 0xffffu));
    const float2 f1 = fp8x2_to_float2(uint16_t(w[e] >> 16));
    o[2 * e] = ptx::pack2<__nv_bfloat16>(f0.x * scale, f0.y * scale);
    o[2 * e + 1] = ptx::pack2<__nv_bfloat16>(f1.x * scale, f1.y * scale);
  }
  lo = make_uint4(o[0], o[1], o[2], o[3]);
  hi = make_uint4(o[4], o[5], o[6], o[7]);
}

}  // namespace attnserve::cuda
