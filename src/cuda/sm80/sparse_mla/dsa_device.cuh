// Device helpers of the DeepSeek sparse-attention kernels (indexer, top-k, sparse MLA, FP8
// quantization): cp.async, ldmatrix, mma.sync m16n8k16 (bf16 / f16, f32 accumulate), fp8 e4m3
// conversions matching include/attnserve/numeric.h bit for bit, and the top-k ranking key.
// Own copy (namespace attnserve::cuda::dsa) so it can later be merged into src/cuda/common/.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace attnserve::cuda::dsa {

constexpr unsigned kFullMask = 0xffffffffu;

// ---- cp.async ---------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared; src_bytes 0 writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// Waits until at most n groups are pending (n is a runtime pipeline depth; n >= 7 waits for 7).
__device__ __forceinline__ void cp_async_wait_dyn(int n) {
  switch (n) {
    case 0: cp_async_wait<0>(); break;
    case 1: cp_async_wait<1>(); break;
    case 2: cp_async_wait<2>(); break;
    case 3: cp_async_wait<3>(); break;
    case 4: cp_async_wait<4>(); break;
    case 5: cp_async_wait<5>(); break;
    case 6: cp_async_wait<6>(); break;
    default: cp_async_wait<7>(); break;
  }
}

// ---- ldmatrix / mma ---------------------------------------------------------------------------

__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += A(16x16 row-major) * B(16x8 col-major), bf16 inputs, f32 accumulators.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Same with f16 inputs.
__device__ __forceinline__ void mma_f16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// ---- fp8 e4m3 ---------------------------------------------------------------------------------

// Two e4m3 bytes (low byte first) -> f16x2 holding the same values exactly (e4m3 is a subset of
// f16: 3 mantissa bits, exponents 2^-9 .. 2^8). NaN codes stay NaN. Hardware on sm_89+.
__device__ __forceinline__ uint32_t fp8x2_to_f16x2(uint16_t two) {
  __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  return uint32_t(h.x) | (uint32_t(h.y) << 16);
}
// Four e4m3 bytes of a word -> two f16x2 words (bytes 0,1 -> lo; bytes 2,3 -> hi).
__device__ __forceinline__ void fp8x4_to_f16x4(uint32_t w, uint32_t& lo, uint32_t& hi) {
  lo = fp8x2_to_f16x2(uint16_t(w & 0xffffu));
  hi = fp8x2_to_f16x2(uint16_t(w >> 16));
}
__device__ __forceinline__ float2 fp8x2_to_float2(uint16_t two) {
  const uint32_t h = fp8x2_to_f16x2(two);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// float -> e4m3 bits as numeric.h's to_fp8_e4m3: round to nearest even, saturate to +-448, NaN -> 0x7f.
__device__ __forceinline__ uint8_t float_to_fp8_bits(float x) {
  if (isnan(x)) return 0x7f;
  return uint8_t(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

// numeric.h fp8_pow2_scale: max(amax, floor) / 448 rounded up to a power of two.
__device__ __forceinline__ float fp8_pow2_scale(float amax, float floor_value = 1e-4f) {
  const float s = fmaxf(amax, floor_value) / 448.f;
  const uint32_t u = __float_as_uint(s);
  if ((u & 0x007fffffu) == 0u) return s;                   // already a power of two
  return __uint_as_float((u & 0x7f800000u) + 0x00800000u);  // the next one up
}

// ---- top-k ranking key ------------------------------------------------------------------------

// Monotone float -> uint32 (src/cpu/topk_select.h topk_key): larger float => larger key, -0 == +0,
// NaN -> 0 (below -inf, whose key is 0x007fffff).
__device__ __forceinline__ uint32_t topk_key(float f) {
  uint32_t u = __float_as_uint(f);
  const uint32_t mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) return 0u;  // NaN
  if (mag == 0u) u = 0u;             // -0 -> +0
  const uint32_t flip = uint32_t(int32_t(u) >> 31) | 0x80000000u;
  return u ^ flip;
}

}  // namespace attnserve::cuda::dsa
