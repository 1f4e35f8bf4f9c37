// Host-side conversions for the narrow float types (bf16, f16, fp8 e4m3).
// Round-to-nearest-even everywhere; fp8 e4m3 saturates to +-448 (the "fn" variant: no inf).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace attnserve {

struct bf16_t {
  uint16_t bits;
};
struct f16_t {
  uint16_t bits;
};
struct fp8_e4m3_t {
  uint8_t bits;
};

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float to_float(bf16_t x) { return bits_f32(uint32_t(x.bits) << 16); }
inline bf16_t to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu)) return {uint16_t((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return {uint16_t(u >> 16)};
}

inline float to_float(f16_t x) {
  uint32_t sign = uint32_t(x.bits & 0x8000u) << 16, exp = (x.bits >> 10) & 0x1f, man = x.bits & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));
  if (exp == 0) return (sign ? -1.f : 1.f) * std::ldexp(float(man), -24);
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}
inline f16_t to_f16(float f) {
  uint32_t u = f32_bits(f), sign = (u >> 16) & 0x8000u;
  float a = std::fabs(f);
  if (std::isnan(f)) return {uint16_t(sign | 0x7e00u)};
  if (a >= 65520.f) return {uint16_t(sign | 0x7c00u)};
  if (a < 6.103515625e-05f) {  // subnormal: multiples of 2^-24
    return {uint16_t(sign | uint16_t(std::nearbyint(a * 16777216.f)))};
  }
  uint32_t au = u & 0x7fffffffu;
  au += 0xfffu + ((au >> 13) & 1u);
  return {uint16_t(sign | ((au - (112u << 23)) >> 13))};
}

// fp8 e4m3fn: bias 7, max 448, min normal 2^-6, subnormals multiples of 2^-9. NaN = 0x7f.
inline float to_float(fp8_e4m3_t x) {
  uint32_t sign = x.bits & 0x80u, exp = (x.bits >> 3) & 0xfu, man = x.bits & 0x7u;
  float v;
  if (exp == 0xf && man == 0x7) return std::nanf("");
  if (exp == 0) v = std::ldexp(float(man), -9);
  else v = std::ldexp(1.f + float(man) / 8.f, int(exp) - 7);
  return sign ? -v : v;
}
inline fp8_e4m3_t to_fp8_e4m3(float f) {
  if (std::isnan(f)) return {0x7f};
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fabs(f);
  if (a >= 448.f) return {uint8_t(sign | 0x7e)};  // saturate (satfinite)
  if (a < std::ldexp(1.f, -6)) {                  // subnormal range: step 2^-9
    int m = int(std::nearbyint(a * 512.f));       // m in [0, 8]; 8 becomes the smallest normal
    return {uint8_t(sign | m)};
  }
  int e;
  float fr = std::frexp(a, &e);  // a = fr * 2^e, fr in [0.5, 1)
  int exp = e - 1 + 7;           // biased exponent of 1.xxx form
  float mant = (fr * 2.f - 1.f) * 8.f;
  int m = int(std::nearbyint(mant));
  if (m == 8) {
    m = 0;
    ++exp;
  }
  if (exp > 15 || (exp == 15 && m == 7)) return {uint8_t(sign | 0x7e)};
  return {uint8_t(sign | (exp << 3) | m)};
}

constexpr float kFp8E4m3Max = 448.f;

// Power-of-two scale for FP8 quantization: max(amax, floor)/448 rounded UP to a power of two,
// so x/scale never exceeds 448, and an all-zero tile still gets a finite, nonzero scale.
inline float fp8_pow2_scale(float amax, float floor_value = 1e-4f) {
  float s = std::fmax(amax, floor_value) / kFp8E4m3Max;
  int e;
  float fr = std::frexp(s, &e);  // s = fr * 2^e, fr in [0.5,1)
  return fr == 0.5f ? s : std::ldexp(1.f, e);
}

}  // namespace attnserve
