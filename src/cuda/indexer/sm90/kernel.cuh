// The session-4 Hopper lightning-indexer kernel (sm_90a), now for the ragged form (prefill) only: the paged
// form runs the warp-specialized kernel (ws_kernel.cuh), which measured faster there; this one stays the
// ragged default until the ws kernel beats it (bench/NOTES.md, session 6). FP8 wgmma scores, relu * weight
// summed over the heads in registers, the key scale, the window mask, every logit column of the CTA written.
//   logit[row, j] = sum_h relu(q[row,h,:] . k[j,:]) * w[row,h] * k_scale[j],  -inf outside row's window
//
// Per CTA (config.h: ragged_shape): the group's 4 q rows (4 * 64 heads * 128 fp8) and weights stay in shared
// memory; keys stream through a ring of `stages` cp.async stages (16-byte copies), each key row 128 bytes
// in the SW128 layout both wgmma operands read K-major. Per stage both warpgroups run 4 wgmma m64n128k32
// (e4m3 x e4m3 -> f32) on the stage's 64 keys x their 2 rows * 64 heads; the accumulator element (key, row,
// head) then sits in the thread (key % 8 group, head % 8 pair), so relu * w is summed over a thread's 16
// heads of a row, then over the quad by two shuffles. Keys outside the union of the group's windows are
// never read (zero-filled, their columns -inf). Ragged causal prefill is compute-bound (FP8 dense ~1979
// TFLOP/s peak).
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/sm90/wgmma.cuh"
#include "cuda/indexer/params.cuh"
#include "cuda/indexer/sm90/config.h"
#include "cuda/indexer/sm90/keys.cuh"

namespace attnserve::cuda::indexer90 {

using Params = indexer::Params;

template <bool kQScale>
__global__ void __launch_bounds__(kThreads, 2) indexer_sm90_ragged_kernel(const Params p) {
#if defined(ATTNSERVE_SM90_DEVICE)
  constexpr Shape kShape = ragged_shape();
  constexpr int kKeyWgs = kShape.key_wgs, kRowsPerWg = kShape.rows_per_wg, kStages = kShape.stages;
  constexpr int kSK = kShape.stage_keys();  // keys per stage
  constexpr int kRows = kShape.rows();      // query rows of the group
  constexpr int kN = kHeads * kRowsPerWg;   // wgmma N of a warpgroup
  constexpr float kNegInf = -INFINITY;
  static_assert(kSK * 8 % kThreads == 0 && kSK <= kThreads, "stage loads: whole chunks per thread");

  char* smem = smem_base();
  uint8_t* sQ = reinterpret_cast<uint8_t*>(smem);                       // [kRows * 64 (row, head)][128 B] SW128
  uint8_t* sK = sQ + kRows * kHeads * kDim;                             // [kStages][kSK keys][128 B] SW128
  float* sScale = reinterpret_cast<float*>(sK + kStages * kSK * kDim);  // [kStages][kSK]
  float* sW = sScale + kStages * kSK;                                   // [kRows][64] weights (q_scale folded in)
  uint8_t* sOk = reinterpret_cast<uint8_t*>(sW + kRows * kHeads);       // [kStages][kSK] key read (inside the union)

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = tid >> 7;
  const int64_t group = int64_t(blockIdx.x) / p.col_blocks;
  const int64_t c0 = (int64_t(blockIdx.x) % p.col_blocks) * kColsPerCta;
  const int64_t c1 = min(c0 + kColsPerCta, p.num_cols);
  const int64_t row0 = group * kRows;

  // The union of the group's windows: keys outside it are never read.
  int64_t umin = p.num_cols, umax = 0;
#pragma unroll
  for (int t = 0; t < kRows; ++t) {
    int64_t lo, hi;
    indexer::row_window<false>(p, group, kRows, t, lo, hi);
    if (lo < hi) umin = min(umin, lo), umax = max(umax, hi);
  }
  // Stages [first, end) of the CTA's columns meet the union; the columns of the others are only -inf.
  int first = 0, end = 0;
  {
    const int64_t a = max(umin, c0), b = min(umax, c1);
    if (a < b) first = int((a - c0) / kSK), end = int((b - c0 + kSK - 1) / kSK);
  }
  for (int t = 0; t < kRows; ++t) {
    if (row0 + t >= p.rows) break;
    float* out = p.logits + (row0 + t) * p.logit_row_stride;
    for (int64_t c = c0 + tid; c < c0 + int64_t(first) * kSK; c += kThreads) out[c * p.logit_col_stride] = kNegInf;
    for (int64_t c = c0 + int64_t(end) * kSK + tid; c < c1; c += kThreads) out[c * p.logit_col_stride] = kNegInf;
  }
  const int n_tiles = end - first;
  if (n_tiles <= 0) return;

  // q rows (smem row n = t * 64 + h; rows past the batch are zeros) and weights: one cp.async group.
  for (int i = tid; i < kRows * kHeads * 8; i += kThreads) {
    const int n = i >> 3, c = i & 7;
    const int64_t row = row0 + n / kHeads;
    const bool ok = row < p.rows;
    const uint8_t* src = ok ? p.q + row * p.q_row_stride + int64_t(n % kHeads) * p.q_head_stride + c * 16 : p.q;
    ptx::cp_async_16(ptx::smem_addr(sQ) + sm90::sw128_offset(n, c), src, ok ? 16 : 0);
  }
  ptx::cp_async_commit();
  for (int i = tid; i < kRows * kHeads; i += kThreads) {
    const int64_t row = row0 + i / kHeads;
    const int h = i % kHeads;
    float w = 0.f;
    if (row < p.rows) {
      w = p.w[row * p.w_row_stride + int64_t(h) * p.w_head_stride];
      if constexpr (kQScale) w *= p.q_scale[row * p.qs_row_stride + int64_t(h) * p.qs_head_stride];
    }
    sW[i] = w;
  }

  // Issues the copies of stage `tile` (CTA-relative) into ring slot `slot`; keys outside the union window
  // are zero-filled and flagged.
  auto load_tile = [&](int tile, int slot) {
    const int64_t cbase = c0 + int64_t(tile) * kSK;
    const uint32_t dst = ptx::smem_addr(sK) + slot * kSK * kDim;
#pragma unroll
    for (int i = 0; i < kSK * 8 / kThreads; ++i) {
      const int ch = tid + i * kThreads, key = ch >> 3, c = ch & 7;
      const int64_t col = cbase + key;
      const uint8_t* src = p.q;
      const float* unused;
      const bool ok = col >= umin && col < umax && locate_key<false>(p, group, col, src, unused);
      ptx::cp_async_16(dst + sm90::sw128_offset(key, c), ok ? src + c * 16 : p.q, ok ? 16 : 0);
    }
    if (tid < kSK) {
      const int64_t col = cbase + tid;
      const uint8_t* unused = nullptr;
      const float* src = p.w;
      const bool ok = col >= umin && col < umax && locate_key<false>(p, group, col, unused, src);
      ptx::cp_async_4(ptx::smem_addr(sScale + slot * kSK + tid), ok ? src : p.w, ok ? 4 : 0);
      sOk[slot * kSK + tid] = ok;
    }
  };

#pragma unroll 1
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_tiles) load_tile(first + s, s);
    ptx::cp_async_commit();
  }

  // This warpgroup's part: keys kw * 64.. of a stage, rows rw * kRowsPerWg.. of the group.
  const int kw = wg % kKeyWgs, rw = wg / kKeyWgs;
  const uint32_t b_base = ptx::smem_addr(sQ) + rw * kRowsPerWg * kHeads * kDim;
  const int g = lane >> 2, q4 = lane & 3;
  const int key_l = kw * kWgKeys + (warp & 3) * 16 + g;  // this thread's keys in a stage: key_l, key_l + 8
  int64_t lo[kRowsPerWg], hi[kRowsPerWg];
#pragma unroll
  for (int t = 0; t < kRowsPerWg; ++t) indexer::row_window<false>(p, group, kRows, rw * kRowsPerWg + t, lo[t], hi[t]);

  float acc[kN / 2];
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) acc[i] = 0.f;

#pragma unroll 1
  for (int i = 0; i < n_tiles; ++i) {
    const int slot = i % kStages;
    ptx::cp_async_wait<kStages - 2>();  // this thread's copies of stage i (and q) landed
    sm90::fence_proxy_async();          // ... visible to the wgmma (async proxy)
    __syncthreads();                    // everybody's; and slot (i - 1) % kStages is free again
    if (i + kStages - 1 < n_tiles) load_tile(first + i + kStages - 1, (i + kStages - 1) % kStages);
    ptx::cp_async_commit();

    const uint32_t a_base = ptx::smem_addr(sK) + slot * kSK * kDim + kw * kWgKeys * kDim;
    sm90::wg_fence();
#pragma unroll
    for (int k = 0; k < kDim / 32; ++k)
      sm90::WgmmaFp8<kN>::ss(acc, sm90::desc_kmajor(a_base + 32 * k), sm90::desc_kmajor(b_base + 32 * k), k);
    sm90::wg_commit();
    sm90::wg_wait<0>();
    sm90::fence_regs(acc);

    // acc[4 nb + e]: key key_l + 8 (e / 2), column (row t = nb / 8, head 8 (nb % 8) + 2 q4 + e % 2).
    const float scale0 = sScale[slot * kSK + key_l], scale1 = sScale[slot * kSK + key_l + 8];
    const bool ok0 = sOk[slot * kSK + key_l] != 0, ok1 = sOk[slot * kSK + key_l + 8] != 0;
    // Lanes q4 0 and 1 of each quad write keys key_l and key_l + 8 (16 consecutive columns a warp).
    const bool writer = q4 < 2;
    const int64_t col = c0 + int64_t(first + i) * kSK + key_l + 8 * q4;
    const float my_scale = q4 ? scale1 : scale0;
    const bool my_ok = q4 ? ok1 : ok0;
#pragma unroll
    for (int t = 0; t < kRowsPerWg; ++t) {
      const float* w = sW + (rw * kRowsPerWg + t) * kHeads + 2 * q4;
      float s0a = 0.f, s0b = 0.f, s1a = 0.f, s1b = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float2 wv = *reinterpret_cast<const float2*>(w + 8 * j);
        const float* a = acc + 32 * t + 4 * j;
        s0a = fmaf(relu_keep_nan(a[0]), wv.x, s0a);
        s0b = fmaf(relu_keep_nan(a[1]), wv.y, s0b);
        s1a = fmaf(relu_keep_nan(a[2]), wv.x, s1a);
        s1b = fmaf(relu_keep_nan(a[3]), wv.y, s1b);
      }
      float v0 = s0a + s0b, v1 = s1a + s1b;
      v0 += __shfl_xor_sync(ptx::kFullMask, v0, 1);
      v1 += __shfl_xor_sync(ptx::kFullMask, v1, 1);
      v0 += __shfl_xor_sync(ptx::kFullMask, v0, 2);
      v1 += __shfl_xor_sync(ptx::kFullMask, v1, 2);
      const int64_t row = row0 + rw * kRowsPerWg + t;
      if (writer && col < c1 && row < p.rows) {
        const bool visible = my_ok && col >= lo[t] && col < hi[t];
        p.logits[row * p.logit_row_stride + col * p.logit_col_stride] = visible ? (q4 ? v1 : v0) * my_scale : kNegInf;
      }
    }
  }
  ptx::cp_async_wait<0>();  // nothing in flight at exit
#endif
}

}  // namespace attnserve::cuda::indexer90
