// The direct FP8 kernel's MMA operands (kernel.cuh, DIRECT = true): mma.m16n8k16 f16 fragments made in
// registers from ldmatrix reads of the raw e4m3 tiles, with no widening pass through shared memory.
//
// Fragments of mma.m16n8k16 (PTX ISA "Matrix Fragments for mma.m16n8k16"), lane = 4 g + t:
//   A (16 x 16, row): a0 = (row g, k 2t, 2t+1), a1 = (g + 8, 2t..), a2 = (g, 2t+8, 2t+9), a3 = (g + 8, 2t+8..)
//   B (16 x 8, col):  b0 = (k 2t, 2t+1; n g), b1 = (k 2t+8, 2t+9; n g);  C: c0, c1 = (g, 2t, 2t+1), c2, c3 = (g + 8,
//   ..)
// ldmatrix (b16) of an 8 x 16-byte matrix gives lane (g, t) the bytes 4t..4t+3 of row g; .trans gives it b16
// column g of rows 2t and 2t+1 (low half: row 2t).
//
// S = Q K^T (k = head dim d). One 16-byte chunk c of a key's e4m3 row is one k-block of 16 d: ldmatrix gives
// lane (g, t) d = 16c + 4t .. 4t+3 of key g, two cvt make b0 = d (4t, 4t+1) and b1 = d (4t+2, 4t+3). So the
// k-block's logical k (2t + e) is d 4t + e and (2t + 8 + e) is d 4t + 2 + e: a permutation of d inside the
// chunk, the same for Q's A fragments (q_fragments: a0 / a1 = row g / g + 8 at d 4t, 4t+1; a2 / a3 at 4t+2,
// 4t+3: one 8-byte read per row). The dot product is the same sum in another order of its 16-term blocks.
//
// O += P V (k = key, n = d). ldmatrix.trans on a chunk c of 8 keys' rows gives lane (g, t) the word
// [k0 d0, k0 d1, k1 d0, k1 d1] (bytes, low first; k0 = 2t, k1 = 2t+1, d0 = 16c + 2g, d1 = d0 + 1); one prmt
// makes [k0 d0, k1 d0 | k0 d1, k1 d1] and two cvt the B registers of two n-tiles: the "even" tile of chunk c
// (logical column g = d 16c + 2g) and the "odd" one (d 16c + 2g + 1). Accumulators: o[2c] (even), o[2c + 1]
// (odd); lane (g, t)'s c0 / c1 of the two are d 16c + 4t + {0, 2} / {1, 3}: the epilogue writes
// (even c0, odd c0, even c1, odd c1) as the 4 consecutive columns 16c + 4t .. 4t+3 (undoing the permutation
// before the slice combine, the split-KV partials and the output, which see the natural order).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/numeric.cuh"

namespace attnserve::cuda::attn {

// Byte offset of 16-byte chunk `c` of row `r` in a raw e4m3 tile of ROW_BYTES rows (64 or 128 here; the
// widening kernel's raw rows are not swizzled). ldmatrix reads one chunk of 8 consecutive rows per phase: on
// 128-byte rows the chunk XOR the row's low 3 bits, on 64-byte rows (two rows per 128 bytes) the chunk XOR
// bits 1..2 of the row put the 8 reads on 8 distinct 16-byte bank groups.
template <int ROW_BYTES>
__device__ __forceinline__ uint32_t fp8_swz(int r, int c) {
  static_assert(ROW_BYTES == 64 || ROW_BYTES % 128 == 0, "raw e4m3 rows of 64 bytes or multiples of 128");
  if constexpr (ROW_BYTES == 64) return uint32_t(r * 64 + ((c ^ ((r >> 1) & 3)) << 4));
  else return uint32_t(r * ROW_BYTES + ((c ^ (r & 7)) << 4));
}

// Two T (bf16 or f16) of a word -> f16x2; bf16 rounds to nearest, saturating at +-65504 (NaN stays NaN). bf16's
// 8-bit significand fits f16's 11 bits: exact for |x| in f16's normal range [2^-14, 65504].
template <typename T>
__device__ __forceinline__ uint32_t to_f16x2_sat(uint32_t w) {
  if constexpr (std::is_same_v<T, __half>) {
    return w;
  } else {
    const float lo = __uint_as_float(w << 16), hi = __uint_as_float(w & 0xffff0000u);
    uint32_t d;
    asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));  // first source -> upper half
    return d;
  }
}

// Q's A fragments of the 16-d block kk (f16, the d order of the K fragments above) from the swizzled T tile
// at `sq` (rows of ROW_BYTES, 16-byte chunks XOR row & 7): rows row0 + g and row0 + g + 8.
template <typename T, int ROW_BYTES>
__device__ __forceinline__ void q_fragments(const char* sq, int row0, int kk, int lane, uint32_t (&a)[4]) {
  const int g = lane >> 2, t = lane & 3;
  const int chunk = 2 * kk + (t >> 1), in_chunk = (t & 1) * 8;  // T element 16 kk + 4t: chunk of 8, byte offset
  const int r0 = row0 + g, r1 = r0 + 8;
  const uint2 lo = *reinterpret_cast<const uint2*>(sq + r0 * ROW_BYTES + ((chunk ^ (r0 & 7)) << 4) + in_chunk);
  const uint2 hi = *reinterpret_cast<const uint2*>(sq + r1 * ROW_BYTES + ((chunk ^ (r1 & 7)) << 4) + in_chunk);
  a[0] = to_f16x2_sat<T>(lo.x);
  a[1] = to_f16x2_sat<T>(hi.x);
  a[2] = to_f16x2_sat<T>(lo.y);
  a[3] = to_f16x2_sat<T>(hi.y);
}

// K's B fragment (b0, b1) of one n-tile and k-block from one ldmatrix word (4 e4m3 of one key).
__device__ __forceinline__ void k_fragment(uint32_t w, uint32_t& b0, uint32_t& b1) {
  b0 = fp8x2_to_f16x2(uint16_t(w & 0xffffu));
  b1 = fp8x2_to_f16x2(uint16_t(w >> 16));
}

// V: one ldmatrix.trans word [k0 d0, k0 d1, k1 d0, k1 d1] -> f16x2 (k0, k1) at d0 (`even`) and at d1 (`odd`).
__device__ __forceinline__ void v_pairs(uint32_t w, uint32_t& even, uint32_t& odd) {
  uint32_t r;
  asm("prmt.b32 %0, %1, %1, 0x3120;\n" : "=r"(r) : "r"(w));  // bytes 0 2 1 3
  even = fp8x2_to_f16x2(uint16_t(r & 0xffffu));
  odd = fp8x2_to_f16x2(uint16_t(r >> 16));
}

}  // namespace attnserve::cuda::attn
