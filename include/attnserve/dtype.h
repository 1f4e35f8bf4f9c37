// Element types understood by attnserve.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace attnserve {

enum class DType : uint8_t { bf16, f16, f32, f64, fp8_e4m3, i32, i64, u8 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::bf16:
    case DType::f16: return 2;
    case DType::f32:
    case DType::i32: return 4;
    case DType::f64:
    case DType::i64: return 8;
    case DType::fp8_e4m3:
    case DType::u8: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::fp8_e4m3: return "fp8_e4m3";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

constexpr bool is_float(DType t) {
  return t == DType::bf16 || t == DType::f16 || t == DType::f32 || t == DType::f64 || t == DType::fp8_e4m3;
}
constexpr bool is_index(DType t) { return t == DType::i32 || t == DType::i64; }

}  // namespace attnserve
