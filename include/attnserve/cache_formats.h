// Byte layouts of the quantized caches, shared by stores, kernels and tests.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "attnserve/numeric.h"

namespace attnserve {

// ---- DeepSeek-V3.2 FP8 MLA cache: 656 bytes per token.
//   [0, 512)    512 fp8 e4m3 values of the latent c_kv (4 tiles of 128)
//   [512, 528)  4 f32 scales, one per 128-value tile (value = fp8 * scale)
//   [528, 656)  64 bf16 rope values (not quantized)
struct Fp8MlaLayout {
  static constexpr int kNope = 512;
  static constexpr int kRope = 64;
  static constexpr int kTile = 128;
  static constexpr int kTiles = kNope / kTile;
  static constexpr std::size_t kScaleOffset = kNope;
  static constexpr std::size_t kRopeOffset = kNope + kTiles * 4;
  static constexpr std::size_t kBytes = kRopeOffset + kRope * 2;  // 656
};
static_assert(Fp8MlaLayout::kBytes == 656);

// Quantize one token: nope[512], rope[64] (floats) -> 656 bytes. Scale per tile is
// fp8_pow2_scale(amax): a power of two, finite for an all-zero tile.
inline void encode_fp8_mla_token(const float* nope, const float* rope, uint8_t* dst) {
  for (int t = 0; t < Fp8MlaLayout::kTiles; ++t) {
    float amax = 0.f;
    for (int i = 0; i < Fp8MlaLayout::kTile; ++i) amax = std::fmax(amax, std::fabs(nope[t * 128 + i]));
    float scale = fp8_pow2_scale(amax);
    for (int i = 0; i < Fp8MlaLayout::kTile; ++i) dst[t * 128 + i] = to_fp8_e4m3(nope[t * 128 + i] / scale).bits;
    std::memcpy(dst + Fp8MlaLayout::kScaleOffset + 4 * t, &scale, 4);
  }
  for (int i = 0; i < Fp8MlaLayout::kRope; ++i) {
    bf16_t b = to_bf16(rope[i]);
    std::memcpy(dst + Fp8MlaLayout::kRopeOffset + 2 * i, &b, 2);
  }
}

// Dequantize one token to 576 floats (512 latent then 64 rope).
inline void decode_fp8_mla_token(const uint8_t* src, float* out576) {
  for (int t = 0; t < Fp8MlaLayout::kTiles; ++t) {
    float scale;
    std::memcpy(&scale, src + Fp8MlaLayout::kScaleOffset + 4 * t, 4);
    for (int i = 0; i < 128; ++i) out576[t * 128 + i] = to_float(fp8_e4m3_t{src[t * 128 + i]}) * scale;
  }
  for (int i = 0; i < Fp8MlaLayout::kRope; ++i) {
    bf16_t b;
    std::memcpy(&b, src + Fp8MlaLayout::kRopeOffset + 2 * i, 2);
    out576[512 + i] = to_float(b);
  }
}

// ---- Indexer key cache (DeepSeek-V3.2 lightning indexer), per page:
//   [page_size x 128 fp8 bytes | page_size x 4-byte f32 scales]
struct IndexerKeyLayout {
  static constexpr int kDim = 128;
  static constexpr std::size_t bytes_per_page(int page_size) { return std::size_t(page_size) * (kDim + 4); }
  // Offsets within the whole pool (a [num_pages, page_size * 132] byte array) for a token slot.
  static constexpr std::size_t key_offset(int64_t slot, int page_size) {
    return std::size_t(slot / page_size) * bytes_per_page(page_size) + std::size_t(slot % page_size) * kDim;
  }
  static constexpr std::size_t scale_offset(int64_t slot, int page_size) {
    return std::size_t(slot / page_size) * bytes_per_page(page_size) + std::size_t(page_size) * kDim +
           std::size_t(slot % page_size) * 4;
  }
};

}  // namespace attnserve
