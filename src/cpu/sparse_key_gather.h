// Private to the CPU sparse MLA kernel: gathers a row's valid top-k slots of the MLA cache into a
// contiguous [count, 576] array of floats (or doubles), so the head loops read plain arrays.
// Each needed token is dequantized once per row, not once per head.
#pragma once
#include <array>
#include <cstdint>
#include <cstring>

#include "attnserve/cache_formats.h"
#include "attnserve/numeric.h"
#include "attnserve/tensor.h"

namespace attnserve::cpu::sparse {

constexpr int kDimQk = 576;  // 512 latent + 64 rope
constexpr int kDimV = 512;   // the latent

// fp8 e4m3 byte -> float, the same values as to_float(fp8_e4m3_t), looked up instead of computed.
inline const std::array<float, 256>& fp8_e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[b] = to_float(fp8_e4m3_t{uint8_t(b)});
    return t;
  }();
  return table;
}

// One FP8-656 token -> 576 values; equal to decode_fp8_mla_token (fp8 * power-of-two scale is exact).
template <typename T>
inline void decode_fp8_token(const uint8_t* src, T* dst) {
  const auto& lut = fp8_e4m3_table();
  for (int t = 0; t < Fp8MlaLayout::kTiles; ++t) {
    float scale;
    std::memcpy(&scale, src + Fp8MlaLayout::kScaleOffset + 4 * t, 4);
    for (int i = 0; i < Fp8MlaLayout::kTile; ++i) {
      const int k = t * Fp8MlaLayout::kTile + i;
      dst[k] = T(lut[src[k]] * scale);
    }
  }
  for (int i = 0; i < Fp8MlaLayout::kRope; ++i) {
    bf16_t b;
    std::memcpy(&b, src + Fp8MlaLayout::kRopeOffset + 2 * i, 2);
    dst[Fp8MlaLayout::kNope + i] = T(to_float(b));
  }
}

template <typename T>
inline void decode_bf16_token(const bf16_t* src, T* dst) {
  for (int i = 0; i < kDimQk; ++i) dst[i] = T(to_float(src[i]));
}

// Copies the keys of slots[0 .. n) that lie in [0, num_slots) into dst (row after row of 576),
// skipping the others; duplicates are copied as often as they appear. Returns the count written.
// kv is [num_slots, 576] bf16 or [num_slots, 656] u8, contiguous in its last dim.
template <typename T>
inline int64_t gather_row_keys(const TensorView& kv, const int32_t* slots, int64_t slot_stride, int64_t n, T* dst) {
  const int64_t num_slots = kv.size(0);
  const bool fp8 = kv.dtype == DType::u8;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = slots[i * slot_stride];
    if (slot < 0 || slot >= num_slots) continue;
    T* key = dst + count * kDimQk;
    if (fp8) {
      decode_fp8_token(kv.ptr<const uint8_t>() + slot * kv.strides[0], key);
    } else {
      decode_bf16_token(kv.ptr<const bf16_t>() + slot * kv.strides[0], key);
    }
    ++count;
  }
  return count;
}

}  // namespace attnserve::cpu::sparse
