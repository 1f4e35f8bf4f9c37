// Device-side element conversions matching include/attnserve/numeric.h bit for bit:
// round-to-nearest-even everywhere, fp8 e4m3 saturating to +-448, power-of-two FP8 scales.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cstdint>

namespace attnserve::cuda {

template <typename T>
__device__ __forceinline__ float to_f32(T x);
template <>
__device__ __forceinline__ float to_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ __forceinline__ float to_f32<__half>(__half x) {
  return __half2float(x);
}
template <>
__device__ __forceinline__ float to_f32<__nv_fp8_e4m3>(__nv_fp8_e4m3 x) {
  return float(x);
}

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_fp8_e4m3 from_f32<__nv_fp8_e4m3>(float x) {
  __nv_fp8_e4m3 r;
  r.__x = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
  return r;
}

__device__ __forceinline__ uint8_t fp8_bits(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }

// Two fp8 e4m3 (low byte first) -> two floats (exact).
__device__ __forceinline__ float2 fp8x2_to_float2(uint16_t two) {
  __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(two, __NV_E4M3);
  return __half22float2(*reinterpret_cast<__half2*>(&h));
}

// Two e4m3 bytes (low byte first) -> f16x2 holding the same values exactly (e4m3 is a subset of f16).
__device__ __forceinline__ uint32_t fp8x2_to_f16x2(uint16_t two) {
  __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}
// Four e4m3 bytes of a word -> two f16x2 words (bytes 0,1 -> lo; bytes 2,3 -> hi).
__device__ __forceinline__ void fp8x4_to_f16x4(uint32_t w, uint32_t& lo, uint32_t& hi) {
  lo = fp8x2_to_f16x2(uint16_t(w & 0xffffu));
  hi = fp8x2_to_f16x2(uint16_t(w >> 16));
}
// float -> e4m3 bits as numeric.h's to_fp8_e4m3: nearest even, saturating to +-448, NaN -> 0x7f.
__device__ __forceinline__ uint8_t float_to_fp8_bits(float x) { return isnan(x) ? uint8_t(0x7f) : fp8_bits(x); }

// fp8_pow2_scale (numeric.h): max(amax, floor) / 448 rounded up to a power of two.
__device__ __forceinline__ float fp8_pow2_scale(float amax, float floor_value = 1e-4f) {
  float s = fmaxf(amax, floor_value) / 448.f;
  uint32_t u = __float_as_uint(s);
  if ((u & 0x007fffffu) == 0u) return s;                    // already a power of two (normal)
  return __uint_as_float((u & 0x7f800000u) + 0x00800000u);  // next power of two
}

}  // namespace attnserve::cuda
