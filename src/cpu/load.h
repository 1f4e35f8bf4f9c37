// Reading/writing any float dtype as float on the CPU.
#pragma once
#include <cstdint>

#include "attnserve/numeric.h"
#include "attnserve/tensor.h"

namespace attnserve::cpu {

inline float load_as_float(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f64: return float(static_cast<const double*>(base)[i]);
    case DType::bf16: return to_float(static_cast<const bf16_t*>(base)[i]);
    case DType::f16: return to_float(static_cast<const f16_t*>(base)[i]);
    case DType::fp8_e4m3: return to_float(static_cast<const fp8_e4m3_t*>(base)[i]);
    case DType::i32: return float(static_cast<const int32_t*>(base)[i]);
    case DType::i64: return float(static_cast<const int64_t*>(base)[i]);
    case DType::u8: return float(static_cast<const uint8_t*>(base)[i]);
  }
  return 0.f;
}

inline void store_from_float(void* base, DType t, int64_t i, float v) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[i] = v; break;
    case DType::f64: static_cast<double*>(base)[i] = v; break;
    case DType::bf16: static_cast<bf16_t*>(base)[i] = to_bf16(v); break;
    case DType::f16: static_cast<f16_t*>(base)[i] = to_f16(v); break;
    case DType::fp8_e4m3: static_cast<fp8_e4m3_t*>(base)[i] = to_fp8_e4m3(v); break;
    default: break;
  }
}

// Integer index element (i32 or i64) as int64.
inline int64_t load_index(const void* base, DType t, int64_t i) {
  return t == DType::i64 ? static_cast<const int64_t*>(base)[i] : static_cast<const int32_t*>(base)[i];
}

// Element offset of a multi-index in a strided view.
inline int64_t offset_of(const TensorView& t, int64_t i0) { return i0 * t.strides[0]; }
inline int64_t offset_of(const TensorView& t, int64_t i0, int64_t i1) { return i0 * t.strides[0] + i1 * t.strides[1]; }
inline int64_t offset_of(const TensorView& t, int64_t i0, int64_t i1, int64_t i2) {
  return i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2];
}
inline int64_t offset_of(const TensorView& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2] + i3 * t.strides[3];
}

}  // namespace attnserve::cpu
