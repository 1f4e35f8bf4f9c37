// Hopper FP8 paged attention: one consumer warpgroup's math on 64 packed rows (d 128). Per 128-key tile:
//   S[64 x 128]  = Q[64 x 128] K^T      4 x m64n128k32 e4m3 SS, Q and K K-major SW128
//   online softmax in base 2 (the bf16 Consumer's: stale max, mask, softcap), dequantization folded
//   into the exponent's scale (q_descale * k_descale)
//   O[64 x 128] += P[64 x 128] V        4 x m64n128k32 e4m3 RS, P converted to e4m3 in registers, Vt K-major
// then O * v_descale normalized and written by the bf16 Consumer's store (out bf16 or f16).
// P <= 2^8 under the stale max (Consumer::kRescaleLog2 = 8), inside e4m3's range (448).
#pragma once
#include "fp8_tile_load.cuh"
#include "tile_math.cuh"

namespace attnserve::cuda::attn90 {

#if defined(ATTNSERVE_SM90_DEVICE)
// Four floats -> four e4m3 (round to nearest, saturating), a the low byte.
__device__ __forceinline__ uint32_t pack_e4m3x4(float a, float b, float c, float d) {
  uint16_t lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(b), "f"(a));  // first operand -> upper byte
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(d), "f"(c));
  return uint32_t(lo) | (uint32_t(hi) << 16);
}

// TO: the output type (bf16 / f16). The softmax state, the scores' mask/softcap and the store are the
// bf16 kernel's Consumer<TO, 128, 128> (its O accumulator layout is the same for FP8 wgmma).
template <typename TO>
struct Fp8Consumer : Consumer<TO, 128, 128, true> {
  using Base = Consumer<TO, 128, 128, true>;
  static constexpr int kSteps = 4;  // k32 steps over d (S) and over the tile's keys (P V)
  float v_scale;

  // Dequantization: score = scale * (q_descale * k_descale) * q8.k8, value = v_descale * v8.
  __device__ __forceinline__ void init(const Params& p, const Block& b, int wg, int wwarp, int lane_) {
    Base::init(p, b, wg, wwarp, lane_);
    auto ds = [&](const float* t, int64_t sb, int64_t sh) {
      return t ? t[int64_t(b.r) * sb + int64_t(b.hk) * sh] : 1.f;
    };
    const float qk = ds(p.q_descale, p.qds_sb, p.qds_sh) * ds(p.k_descale, p.kds_sb, p.kds_sh);
    v_scale = ds(p.v_descale, p.vds_sb, p.vds_sh);
    this->s_log2 *= qk;
    this->s_cap_in *= qk;
  }

  // S = Q K^T (no commit): step k reads bytes 32k..32k+31 of every row of both operands.
  __device__ __forceinline__ void issue_s(uint32_t sQa, uint32_t sKa, float (&s)[64]) {
    const uint64_t dq = sm90::desc_kmajor(sQa), dk = sm90::desc_kmajor(sKa);
    const uint32_t hi = uint32_t(dq >> 32);
#pragma unroll
    for (int k = 0; k < kSteps; ++k)
      sm90::WgmmaFp8<kTileKeys>::ss(s, Base::desc_at(uint32_t(dq), hi, uint32_t(k * 32)),
                                    Base::desc_at(uint32_t(dk), hi, uint32_t(k * 32)), k > 0 ? 1 : 0);
  }

  // O += P Vt^T (no commit): step kk = the tile's keys 32kk..32kk+31 = bytes 32kk.. of every Vt row.
  __device__ __forceinline__ void issue_pv(uint32_t sVta, const uint32_t (&pa)[kSteps][4]) {
    const uint64_t dv = sm90::desc_kmajor(sVta);
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk)
      sm90::WgmmaFp8<128>::rs(this->o, pa[kk], Base::desc_at(uint32_t(dv), uint32_t(dv >> 32), uint32_t(kk * 32)), 1);
  }

  // P (f32 in s, accumulator layout) -> e4m3 A fragments: register r of step kk holds the columns
  // 32kk + 16 (r / 2) + {2t, 2t + 1, 2t + 8, 2t + 9} of row lane / 4 + 8 (r % 2) (t = lane % 4), the
  // key order Vt is stored in (fp8_key_of_position).
  __device__ __forceinline__ void to_a(const float (&s)[64], uint32_t (&pa)[kSteps][4]) {
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      const float* x = s + 16 * kk;
      pa[kk][0] = pack_e4m3x4(x[0], x[1], x[4], x[5]);
      pa[kk][1] = pack_e4m3x4(x[2], x[3], x[6], x[7]);
      pa[kk][2] = pack_e4m3x4(x[8], x[9], x[12], x[13]);
      pa[kk][3] = pack_e4m3x4(x[10], x[11], x[14], x[15]);
    }
  }

  __device__ __forceinline__ void store(const Params& p, const Block& b) {
    if (v_scale != 1.f) {
#pragma unroll
      for (int i = 0; i < 64; ++i) this->o[i] *= v_scale;
    }
    Base::store(p, b);
  }
};
#endif

}  // namespace attnserve::cuda::attn90
