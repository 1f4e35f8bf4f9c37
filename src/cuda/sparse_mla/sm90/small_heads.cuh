// Sparse MLA decode over the FP8-656 cache for small head counts (HB = 16 or 32 heads per CTA), mma.sync
// on sm_90 (the e4m3 -> f16 conversion instruction needs sm_89+). One CTA per (query row, head block,
// split of the top-k list), 8 warps, 64-key tiles in a ring of `stages` raw-token stages (cp.async).
//
// Memory-bound by design (small_config.h): the raw tokens are never dequantized into shared memory; the
// warps build their mma fragments from the raw bytes:
//   QK^T  warp (kg = w / 4, dg = w % 4): keys [32 kg, 32 kg + 32) of the tile, latent block dg (dims
//         [128 dg, 128 dg + 128), f16 mma: e4m3 -> f16 is exact) plus rope k-step dg (bf16 mma on the raw
//         rope bytes). The k order inside a k-step is permuted so that each lane reads 16 contiguous
//         bytes (Q in registers, permuted the same way). The block's FP8 scale and Q's power-of-two
//         prescale (f16 range) are applied to the f32 partial score; partials go to shared memory.
//   reduce warp w owns keys [8 w, 8 w + 8): sums the 4 partials, masks invalid keys, row max of the
//         tile; all warps then agree on the running max m (base 2) and on R_b, the running largest
//         FP8 scale of latent block b. P_b = 2^(s - m) * scale_b / R_b (<= 1, f16) per block b.
//   P V   warp w owns value dims [64 w, 64 w + 64) (latent block w / 2): O += P_b V with V's f16
//         fragments built from 4-byte reads of 4 keys (byte permutes, then e4m3x2 -> f16x2); O is kept
//         in units of R_b (rescaled by R_old / R_new with the softmax's alpha).
//   epilogue out = O R_b / (l + exp(sink - m)), lse = m + log l, max_logits = m (natural units); rows
//         with no valid slot: out 0, lse = max_logits = -inf. num_splits > 1: the unnormalized
//         (O R_b, m, l) go to the workspace for the split combine (params.cuh), as from the other kernels.
// Invalid slots (< 0, >= num_slots, past topk_length) are zero-filled by cp.async and masked. Heads
// past h_q are zero rows of Q, never stored. Deterministic: fixed reduction orders, no atomics.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>

#include "cuda/common/check.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/sparse_mla/params.cuh"
#include "cuda/sparse_mla/sm90/small_config.h"
#include "cuda/sparse_mla/sm90/sparse_mla_sm90.h"

namespace attnserve::cuda::sparse_mla90 {
namespace small_detail {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kTok = kSmallTokenBytes;

// Two e4m3 bytes (the low or the high half of w) -> f16x2, exact.
__device__ __forceinline__ uint32_t f16x2_of_e4m3_lo(uint32_t w) {
  uint32_t d;
  asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, lo;\n}\n" : "=r"(d) : "r"(w));
  return d;
}
__device__ __forceinline__ uint32_t f16x2_of_e4m3_hi(uint32_t w) {
  uint32_t d;
  asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %1;\ncvt.rn.f16x2.e4m3x2 %0, hi;\n}\n" : "=r"(d) : "r"(w));
  return d;
}

// Power-of-two prescale that brings amax into [2^14, 2^15) (f16 holds Q exactly but for values far
// below the row's largest) and its inverse; amax 0 or tiny: the largest safe pair.
__device__ __forceinline__ void prescale_of(float amax, float& sig, float& inv_sig) {
  const int e = int((__float_as_uint(amax) >> 23) & 0xffu);
  const int biased = min(max(268 - e, 1), 253);  // sig = 2^(141 - exponent(amax))
  sig = __uint_as_float(uint32_t(biased) << 23);
  inv_sig = __uint_as_float(uint32_t(254 - biased) << 23);
}

// v[i] for a run-time i < 4 without indexing a register array (which would put it in local memory).
__device__ __forceinline__ float pick4(const float (&v)[4], int i) {
  return i == 0 ? v[0] : (i == 1 ? v[1] : (i == 2 ? v[2] : v[3]));
}

// 1 / x by the SFU (one ulp; exact for the power-of-two scales of the quantizer), no slow path.
__device__ __forceinline__ float fast_rcp(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

}  // namespace small_detail

// HB 16 is capped at 128 registers so that two CTAs share an SM (2-stage rings: the plan's choice for HB 16;
// measured, the ring depth did not change the time, NOTES.md); HB 32 keeps one CTA per SM.
// The time per tile is each warp's chain of dependent instructions (NOTES.md, session 5 second step), so (a) the
// QK^T k-steps accumulate into two chains (even / odd k-steps, summed at the end) instead of one chain of 8
// dependent HMMAs, and (b) the ring and id slots of the tiles are counters instead of run-time `t % S` / `t % 2S`
// (5 integer divisions per tile, at the head of the chain): 5-8 % faster than one chain (NOTES.md, session 6).
template <int MT>  // m-tiles of 16 heads
__global__ void __launch_bounds__(kSmallThreads, MT == 1 ? 2 : 1)
    small_heads_fp8_kernel(const sparse_mla_op::Params p) {
  using namespace small_detail;
  constexpr int HB = 16 * MT;
  constexpr int kChunks = kTok / 16;  // 41 cp.async chunks per token
  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tig = lane & 3;
  const int kg = warp >> 2, dg = warp & 3;
  const int64_t row = blockIdx.x / p.head_blocks;
  const int h0 = int(blockIdx.x % p.head_blocks) * HB;
  const int split = int(blockIdx.y);
  const int S = p.stages;
  const SmallSmemLayout L = small_smem_layout(HB, S);
  uint8_t* ring = smem + L.ring;
  float* sPart = reinterpret_cast<float*>(smem + L.part);  // [4][HB][72]
  uint16_t* sP = reinterpret_cast<uint16_t*>(smem + L.p);  // [4][HB][72] f16
  float* sMax = reinterpret_cast<float*>(smem + L.max);    // [HB][8]
  float* sSmax = reinterpret_cast<float*>(smem + L.smax);  // [8][4]
  float* sLsum = reinterpret_cast<float*>(smem + L.lsum);  // [HB][8]
  int* sIds = reinterpret_cast<int*>(smem + L.ids);        // [2S][64]

  int n = p.topk;
  if (p.topk_length) {
    const int v = p.topk_length[row * p.topk_length_stride];
    n = v < 0 ? 0 : (v > p.topk ? p.topk : v);
  }
  const int row_tiles = (n + kSmallTileKeys - 1) / kSmallTileKeys;
  const int tile0 = split * p.split_tiles;
  const int num_tiles = max(0, min(row_tiles - tile0, p.split_tiles));
  const int32_t* idx_row = p.indices + row * p.idx_row_stride;

  // Slot ids of local tile t into sIds[id_slot = t % 2S] (threads 0..63), loaded an iteration before the gather.
  auto load_ids = [&](int t, int id_slot) {
    if (tid < kSmallTileKeys) {
      const int pos = (tile0 + t) * kSmallTileKeys + tid;
      int sid = -1;
      if (t < num_tiles && pos < n) {
        const int32_t v = idx_row[int64_t(pos) * p.idx_col_stride];
        if (v >= 0 && v < p.num_slots) sid = v;
      }
      sIds[id_slot * kSmallTileKeys + tid] = sid;
    }
  };
  // Gathers local tile t into ring slot t % S (zeros for invalid slots): warp w copies tokens 8 w .. 8 w + 7,
  // lane l chunk l (and chunk 32 + l for l < 9) of each: a fixed per-lane plan, so a 16-byte copy costs a
  // shared-memory id read, one 32 x 32 -> 64-bit multiply and the cp.async (the first version spent ~30
  // instructions of division and 64-bit index arithmetic per copy, NOTES.md).
  const uint32_t row_bytes = uint32_t(p.kv_row_bytes);  // launch.cu: < 2^31
  // (ring_slot = t % S, id_slot = t % 2S)
  auto issue = [&](int ring_slot, int id_slot) {
    const int* ids = sIds + id_slot * kSmallTileKeys + 8 * warp;
    const uint32_t dst = ptx::smem_addr(ring + std::size_t(ring_slot) * kSmallStageBytes + 8 * warp * kTok + 16 * lane);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int s = ids[k];
      const uint8_t* src = p.kv + uint64_t(uint32_t(max(s, 0))) * row_bytes + 16 * lane;
      const int bytes = s >= 0 ? 16 : 0;
      ptx::cp_async_16(dst + uint32_t(k * kTok), src, bytes);
      if (lane < kChunks - 32) ptx::cp_async_16(dst + uint32_t(k * kTok + 512), src + 512, bytes);
    }
  };

  for (int t = 0; t < S; ++t) load_ids(t, t);
  __syncthreads();
  for (int s = 0; s < S - 1; ++s) {
    if (s < num_tiles) issue(s, s);
    ptx::cp_async_commit();
  }

  // Q fragments of this warp's latent block (f16, prescaled) and rope k-step (bf16), loaded while the
  // first tiles are in flight. k-step kk of the block: lane tig's dims 128 dg + 32 tig + 4 kk + {0..3};
  // slots 2 tig, 2 tig + 1 <- dims +0, +1 and slots 2 tig + 8, + 9 <- dims +2, +3 (the same in K).
  uint32_t qn[MT][8][4], qr[MT][4];
  float inv_sig[MT][2];
  const int rope_dim = 8 * dg + 4 * (tig & 1) + 32 * (tig >> 1);  // lane's 4 rope dims (bank-conflict free)
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int head = h0 + 16 * m + g + 8 * r;
      const bool ok = head < p.h_q;
      const uint16_t* qh = p.q + row * p.q_row_stride + int64_t(ok ? head : 0) * p.q_head_stride;
      float v[32];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint4 u = make_uint4(0, 0, 0, 0);
        if (ok) u = *reinterpret_cast<const uint4*>(qh + 128 * dg + 32 * tig + 8 * i);
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          v[8 * i + 2 * e] = __uint_as_float(w[e] << 16);
          v[8 * i + 2 * e + 1] = __uint_as_float(w[e] & 0xffff0000u);
        }
      }
      float amax = 0.f;
#pragma unroll
      for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(v[i]));
      amax = ptx::quad_max(amax);  // the block's 128 dims of this head
      float sig;
      prescale_of(amax, sig, inv_sig[m][r]);
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) {
        qn[m][kk][r] = ptx::pack2<__half>(v[4 * kk] * sig, v[4 * kk + 1] * sig);
        qn[m][kk][2 + r] = ptx::pack2<__half>(v[4 * kk + 2] * sig, v[4 * kk + 3] * sig);
      }
      uint2 rq = make_uint2(0, 0);
      if (ok) rq = *reinterpret_cast<const uint2*>(qh + 512 + rope_dim);
      qr[m][r] = rq.x;
      qr[m][2 + r] = rq.y;
    }

  float m_run[MT][2], l_part[MT][2];
  float o[MT][8][4];  // [m][4 h + e]: dims 64 w + 32 h + 4 n + e for n-slot n of n-tile (h, e)
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    m_run[m][0] = m_run[m][1] = -INFINITY;
    l_part[m][0] = l_part[m][1] = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) o[m][j][0] = o[m][j][1] = o[m][j][2] = o[m][j][3] = 0.f;
  }
  float ref[4] = {FLT_MIN, FLT_MIN, FLT_MIN, FLT_MIN};  // R_b: O is kept in units of R_b
  const int blk = warp >> 1;                            // P V: this warp's latent block

  int ring_slot = 0, id_slot = 0;  // t % S, t % 2S, as counters
  for (int t = 0; t < num_tiles; ++t) {
    ptx::cp_async_wait_dyn(S - 2);  // tile t landed (this thread's part)
    __syncthreads();                // B1: everyone's part; the slot of tile t - 1 is free
    const int issue_ids = id_slot + S - 1 >= 2 * S ? id_slot - S - 1 : id_slot + S - 1;   // (t + S - 1) % 2S
    if (t + S - 1 < num_tiles) issue(ring_slot == 0 ? S - 1 : ring_slot - 1, issue_ids);  // ring: (t - 1) % S
    ptx::cp_async_commit();
    load_ids(t + S, id_slot >= S ? id_slot - S : id_slot + S);  // (t + S) % 2S
    const uint8_t* tile = ring + std::size_t(ring_slot) * kSmallStageBytes;
    const int* ids = sIds + id_slot * kSmallTileKeys;

    // ---- QK^T partial: keys [32 kg, +32) x (latent block dg + rope k-step dg).
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int kb = 32 * kg + 8 * j;
      const uint8_t* kp = tile + (kb + g) * kTok;
      const uint4 w0 = *reinterpret_cast<const uint4*>(kp + 128 * dg + 32 * tig);
      const uint4 w1 = *reinterpret_cast<const uint4*>(kp + 128 * dg + 32 * tig + 16);
      const uint2 wr = *reinterpret_cast<const uint2*>(kp + 528 + 2 * rope_dim);
      const uint32_t w[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
      constexpr int kChains = 2;  // independent HMMA accumulators per m-tile (even / odd k-steps)
      float an[MT][4], ar[MT][4], an2[MT][kChains][4];
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          an[m][i] = ar[m][i] = 0.f;
#pragma unroll
          for (int c = 0; c < kChains; ++c) an2[m][c][i] = 0.f;
        }
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) {
        const uint32_t b0 = f16x2_of_e4m3_lo(w[kk]), b1 = f16x2_of_e4m3_hi(w[kk]);
#pragma unroll
        for (int m = 0; m < MT; ++m) ptx::mma_16816<__half>(an2[m][kk & 1], qn[m][kk], b0, b1);
      }
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int i = 0; i < 4; ++i) an[m][i] = an2[m][0][i] + an2[m][1][i];
#pragma unroll
      for (int m = 0; m < MT; ++m) ptx::mma_16816<__nv_bfloat16>(ar[m], qr[m], wr.x, wr.y);
      // The C fragment's keys kb + 2 tig + {0, 1}: their scale of block dg.
      const float s0 = *reinterpret_cast<const float*>(tile + (kb + 2 * tig) * kTok + 512 + 4 * dg);
      const float s1 = *reinterpret_cast<const float*>(tile + (kb + 2 * tig + 1) * kTok + 512 + 4 * dg);
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float f0 = s0 * inv_sig[m][r], f1 = s1 * inv_sig[m][r];
          *reinterpret_cast<float2*>(sPart + (dg * HB + 16 * m + g + 8 * r) * kSmallPartStride + kb + 2 * tig) =
              make_float2(fmaf(an[m][2 * r], f0, ar[m][2 * r]), fmaf(an[m][2 * r + 1], f1, ar[m][2 * r + 1]));
        }
    }
    __syncthreads();  // B2: partial scores written

    // ---- reduce: keys k0, k0 + 1 of warp w's 8; tile row maxima and the blocks' largest scales.
    const int k0 = 8 * warp + 2 * tig;
    const bool ok0 = ids[k0] >= 0, ok1 = ids[k0 + 1] >= 0;
    float sv[MT][2][2];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float2 acc = make_float2(0.f, 0.f);
#pragma unroll
        for (int d = 0; d < 4; ++d) {
          const float2 x =
              *reinterpret_cast<const float2*>(sPart + (d * HB + 16 * m + g + 8 * r) * kSmallPartStride + k0);
          acc.x += x.x;
          acc.y += x.y;
        }
        sv[m][r][0] = ok0 ? acc.x * p.scale_log2 : -INFINITY;
        sv[m][r][1] = ok1 ? acc.y * p.scale_log2 : -INFINITY;
        const float mx = ptx::quad_max(fmaxf(sv[m][r][0], sv[m][r][1]));
        if (tig == 0) sMax[(16 * m + g + 8 * r) * 8 + warp] = mx;
      }
    const float4 sc0 = *reinterpret_cast<const float4*>(tile + k0 * kTok + 512);  // zeros for invalid keys
    const float4 sc1 = *reinterpret_cast<const float4*>(tile + (k0 + 1) * kTok + 512);
    const float sk0[4] = {sc0.x, sc0.y, sc0.z, sc0.w}, sk1[4] = {sc1.x, sc1.y, sc1.z, sc1.w};
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const float mx = ptx::quad_max(fmaxf(sk0[b], sk1[b]));
      if (lane == 0) sSmax[warp * 4 + b] = mx;
    }
    __syncthreads();  // B3: maxima written

    // ---- softmax: the common running max, P of keys k0, k0 + 1, scaled per latent block.
    float alpha[MT][2];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float* mrow = sMax + (16 * m + g + 8 * r) * 8;
        const float4 a = *reinterpret_cast<const float4*>(mrow), b = *reinterpret_cast<const float4*>(mrow + 4);
        const float mt = fmaxf(fmaxf(fmaxf(a.x, a.y), fmaxf(a.z, a.w)), fmaxf(fmaxf(b.x, b.y), fmaxf(b.z, b.w)));
        const float m_new = fmaxf(m_run[m][r], mt);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        alpha[m][r] = exp2f(m_run[m][r] - m_use);
        m_run[m][r] = m_new;
        sv[m][r][0] = exp2f(sv[m][r][0] - m_use);
        sv[m][r][1] = exp2f(sv[m][r][1] - m_use);
        l_part[m][r] = fmaf(l_part[m][r], alpha[m][r], sv[m][r][0] + sv[m][r][1]);
      }
    float r_new[4];
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      float mx = ref[b];
#pragma unroll
      for (int w = 0; w < 8; ++w) mx = fmaxf(mx, sSmax[w * 4 + b]);
      r_new[b] = mx;
      const float inv = fast_rcp(mx);
      const float f0 = sk0[b] * inv, f1 = sk1[b] * inv;
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          *reinterpret_cast<uint32_t*>(sP + (b * HB + 16 * m + g + 8 * r) * kSmallPStride + k0) =
              ptx::pack2<__half>(sv[m][r][0] * f0, sv[m][r][1] * f1);
    }
    __syncthreads();  // B4: P written

    // ---- O[HB][dims 64 w .. + 64] = O * alpha * R_old / R_new + P_blk V.
    {
      const float rho = pick4(ref, blk) * fast_rcp(pick4(r_new, blk));
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float f = alpha[m][r] * rho;
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            o[m][j][2 * r] *= f;
            o[m][j][2 * r + 1] *= f;
          }
        }
#pragma unroll
      for (int b = 0; b < 4; ++b) ref[b] = r_new[b];
      const uint32_t pa = ptx::smem_addr(sP + (blk * HB + (lane & 15)) * kSmallPStride + 8 * (lane >> 4));
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // k-steps of 16 keys
        uint32_t a[MT][4];
#pragma unroll
        for (int m = 0; m < MT; ++m)
          ptx::ldmatrix_x4(pa + uint32_t((16 * m * kSmallPStride + 16 * i) * 2), a[m][0], a[m][1], a[m][2], a[m][3]);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // keys 16 i + 2 tig + {0, 1, 8, 9}, dims 64 w + 32 h + 4 g + {0..3}
          const uint8_t* vp = tile + (16 * i + 2 * tig) * kTok + 64 * warp + 32 * h + 4 * g;
          const uint32_t wa = *reinterpret_cast<const uint32_t*>(vp);
          const uint32_t wb = *reinterpret_cast<const uint32_t*>(vp + kTok);
          const uint32_t wc = *reinterpret_cast<const uint32_t*>(vp + 8 * kTok);
          const uint32_t wd = *reinterpret_cast<const uint32_t*>(vp + 9 * kTok);
          // bytes (key a, key b) of dims 0, 1 and of dims 2, 3 side by side
          const uint32_t x01 = __byte_perm(wa, wb, 0x5140), x23 = __byte_perm(wa, wb, 0x7362);
          const uint32_t y01 = __byte_perm(wc, wd, 0x5140), y23 = __byte_perm(wc, wd, 0x7362);
          const uint32_t b0[4] = {f16x2_of_e4m3_lo(x01), f16x2_of_e4m3_hi(x01), f16x2_of_e4m3_lo(x23),
                                  f16x2_of_e4m3_hi(x23)};
          const uint32_t b1[4] = {f16x2_of_e4m3_lo(y01), f16x2_of_e4m3_hi(y01), f16x2_of_e4m3_lo(y23),
                                  f16x2_of_e4m3_hi(y23)};
#pragma unroll
          for (int e = 0; e < 4; ++e)
#pragma unroll
            for (int m = 0; m < MT; ++m) ptx::mma_16816<__half>(o[m][4 * h + e], a[m], b0[e], b1[e]);
        }
      }
    }
    ring_slot = ring_slot + 1 == S ? 0 : ring_slot + 1;
    id_slot = id_slot + 1 == 2 * S ? 0 : id_slot + 1;
  }
  ptx::cp_async_wait<0>();

  // ---- epilogue: row sums over the 8 warps (fixed order), then each warp stores its 64 dims.
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float l = ptx::quad_sum(l_part[m][r]);
      if (tig == 0) sLsum[(16 * m + g + 8 * r) * 8 + warp] = l;
    }
  __syncthreads();
  const float rb = pick4(ref, blk);
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int hrow = 16 * m + g + 8 * r, head = h0 + hrow;
      if (head >= p.h_q) continue;
      float l = 0.f;
#pragma unroll
      for (int w = 0; w < 8; ++w) l += sLsum[hrow * 8 + w];
      const float mr = m_run[m][r];
      const bool empty = mr == -INFINITY;
      if (p.num_splits > 1) {  // partial state; an empty split writes only m = -inf (its O is never read)
        const int64_t part = sparse_mla_op::part_index(split, row, head, p.rows, p.h_q);
        if (warp == 0 && tig == 0) p.part_ml[part] = make_float2(mr, l);
        if (!empty) {
          float* dst = p.part_o + part * 512 + 64 * warp + 8 * tig;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            *reinterpret_cast<float4*>(dst + 32 * h) =
                make_float4(o[m][4 * h][2 * r] * rb, o[m][4 * h + 1][2 * r] * rb, o[m][4 * h + 2][2 * r] * rb,
                            o[m][4 * h + 3][2 * r] * rb);
            *reinterpret_cast<float4*>(dst + 32 * h + 4) =
                make_float4(o[m][4 * h][2 * r + 1] * rb, o[m][4 * h + 1][2 * r + 1] * rb,
                            o[m][4 * h + 2][2 * r + 1] * rb, o[m][4 * h + 3][2 * r + 1] * rb);
          }
        }
        continue;
      }
      float inv = 0.f;
      if (!empty) {
        float denom = l;
        if (p.sink) denom += exp2f(p.sink[int64_t(head) * p.sink_stride] * kLog2e - mr);
        inv = rb / denom;
      }
      uint32_t* dst = reinterpret_cast<uint32_t*>(p.out + row * p.out_row_stride + int64_t(head) * p.out_head_stride +
                                                  64 * warp + 8 * tig);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        dst[16 * h + 0] = ptx::pack2<__nv_bfloat16>(o[m][4 * h][2 * r] * inv, o[m][4 * h + 1][2 * r] * inv);
        dst[16 * h + 1] = ptx::pack2<__nv_bfloat16>(o[m][4 * h + 2][2 * r] * inv, o[m][4 * h + 3][2 * r] * inv);
        dst[16 * h + 2] = ptx::pack2<__nv_bfloat16>(o[m][4 * h][2 * r + 1] * inv, o[m][4 * h + 1][2 * r + 1] * inv);
        dst[16 * h + 3] = ptx::pack2<__nv_bfloat16>(o[m][4 * h + 2][2 * r + 1] * inv, o[m][4 * h + 3][2 * r + 1] * inv);
      }
      if (warp == 0 && tig == 0) {
        if (p.lse)
          p.lse[row * p.lse_row_stride + int64_t(head) * p.lse_head_stride] =
              empty ? -INFINITY : (mr + log2f(l)) * kLn2;
        if (p.max_logits)
          p.max_logits[row * p.ml_row_stride + int64_t(head) * p.ml_head_stride] = empty ? -INFINITY : mr * kLn2;
      }
    }
}

template <int MT>
void launch_small_block(const sparse_mla_op::Params& p, std::size_t smem_bytes, cudaStream_t stream) {
  auto* kernel = small_heads_fp8_kernel<MT>;
  ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes)));
  // All of L1 as shared memory: two HB 16 CTAs (2 x 111 KB) share an SM only in the largest carveout.
  ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                            int(cudaSharedmemCarveoutMaxShared)));
  const dim3 grid(unsigned(p.rows * p.head_blocks), unsigned(p.num_splits));
  kernel<<<grid, kSmallThreads, smem_bytes, stream>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace attnserve::cuda::sparse_mla90
