// Portable MLA (absorbed) paged attention: one latent KV head, rows [c_kv (512) | k_rope (64)].
// score = q_nope . c_kv + q_rope . k_rope, value = c_kv.
//
// One CTA = (block of HB packed rows, split, request), 8 warps; packed row = q_row * h_q + head, so
// every query head of the request in the block shares each K/V byte the CTA reads (h_q 128 with
// HB 64: each byte is read by two CTAs, which run side by side and meet in L2).
//
//   per tile of 32 keys (a ring of `stages` tiles in flight, cp.async; token slots from the page
//   table are loaded one tile ahead into a register, so no warp waits on a page-table read):
//     QK^T     warps = (row tile m of 16) x (key group of 32 / KG) x (k-split of 576 / KS); partial
//              scores to shared memory
//     softmax  warps = (row tile m) x (slice of the 512 value dims); every warp of a row tile reads
//              the same scores, so all of them hold identical running max / sum (online, base 2)
//     P V      P from registers (bf16), V = the tile's first 512 columns via ldmatrix.trans
//   two barriers per tile: one after the tile lands (it also frees the ring slot being refilled and
//   the score buffer), one after the scores are written.
//   FP8-656 cache (FP8 = true): the ring holds raw 656-byte tokens; after the first barrier every thread
//   dequantizes its share of the tile into one bf16 tile (the layout above), then a third barrier.
//
// HB = 64: 4 row tiles x 1 key group x 2 k-splits; PV 256 dims per warp (128 accumulators / lane)
//          (32 keys per warp: each ldmatrix of Q feeds 4 mma, a quarter fewer shared-memory reads
//          than 2 groups of 16, which the sparse kernel uses)
// HB = 32: 2 x 2 x 2;                                PV 128 dims per warp
// HB = 16: 1 x 2 x 4;                                PV  64 dims per warp
//
// Bits do not depend on HB (deterministic mode promises bits independent of the batch, and the batch's
// longest query picks HB): every score is the same sum tree, four mma chains over k-steps
// [9c, 9c + 9) added as (c0 + c1) + (c2 + c3), whichever warps run the chains; the softmax, P V and the
// row sums see identical values in an identical order for every HB.
#pragma once
#include <cuda_bf16.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cuda/common/fp8_mla.cuh"
#include "cuda/common/masking.cuh"
#include "cuda/common/online_softmax.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/mla/params.h"
#include "cuda/mla/sm80/config.h"

namespace attnserve::cuda::mla {

template <int HB, bool FP8>
__global__ void __launch_bounds__(kThreads, HB == 16 ? 2 : 1) mla_kernel(const Params p) {  // HB 16: two CTAs per SM
  using T = __nv_bfloat16;
  constexpr int MT = HB / 16;            // row tiles of 16
  constexpr int KG = key_groups_of(HB);  // QK key groups
  constexpr int KW = kTileKeys / KG;     // keys per QK warp (16 or 32)
  constexpr int KN = KW / 8;             // QK n-tiles per warp
  constexpr int KS = k_splits_of(HB);    // QK k-splits
  constexpr int CPW = kChains / KS;      // score chains per warp
  constexpr int kPvWarps = 8 / MT;       // PV warps per row tile
  constexpr int DVW = kDv / kPvWarps;    // value dims per PV warp
  constexpr int NT = DVW / 8;            // PV n-tiles per warp
  static_assert(KS * MT * KG == 8 && kChains % KS == 0 && NT % 2 == 0 && KN % 2 == 0, "warp layout");
  static_assert(kTileKeys * kChunks % kThreads == 0, "uniform trip count (shuffles)");

  extern __shared__ __align__(128) char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tig = lane & 3;
  const int mb = blockIdx.x, split = blockIdx.y, r = blockIdx.z;
  const int q_start = p.cu_seqlens_q[r];
  const int q_len = p.cu_seqlens_q[r + 1] - q_start;
  const int k_len = p.cache_seqlens[r];
  const int rows_total = q_len * p.h_q;
  const int row0 = mb * HB;
  if (row0 >= rows_total) return;

  // Keys the block needs: the union of its rows' ranges, cut to this split (32-aligned tiles).
  int blo, bhi, unused;
  row_bounds(p, row0 / p.h_q, q_len, k_len, blo, unused);
  row_bounds(p, (min(row0 + HB, rows_total) - 1) / p.h_q, q_len, k_len, unused, bhi);
  int k_begin, k_end;
  if (p.split_keys > 0) {
    k_begin = max(split * p.split_keys, blo & ~(kTileKeys - 1));
    k_end = min((split + 1) * p.split_keys, bhi + 1);
  } else {
    const int start = blo & ~(kTileKeys - 1);
    const int span = bhi + 1 - start;
    const int per = span > 0 ? ((span + p.num_splits - 1) / p.num_splits + kTileKeys - 1) & ~(kTileKeys - 1) : 0;
    k_begin = start + split * per;
    k_end = min(k_begin + per, bhi + 1);
  }
  const int n_tiles = k_end > k_begin ? (k_end - k_begin + kTileKeys - 1) / kTileKeys : 0;
  const int stages = p.stages;

  char* sQ = smem;                    // [HB][kRowBytes]
  char* sRing = sQ + HB * kRowBytes;  // [stages][32][kRowBytes]; FP8: [32][kRowBytes] bf16 tile
  char* sRaw = sRing + kTileBytes;    // FP8: [stages][32][656] raw tokens
  float* sScore = reinterpret_cast<float*>(FP8 ? sRaw + stages * kRawTileBytes
                                               : sRing + stages * kTileBytes);  // [KS][HB][kScoreStride]

  // Q rows [q_nope | q_rope]; rows past the request are zeros (never stored). Committed with tile 0.
  for (int idx = tid; idx < HB * kChunks; idx += kThreads) {
    const int row = idx / kChunks, ch = idx - row * kChunks;
    const int pr = row0 + row;
    const bool valid = pr < rows_total;
    const char* src = p.q_nope;
    if (valid) {
      const int qr = pr / p.h_q, h = pr - qr * p.h_q;
      const int64_t tok = q_start + qr;
      src = ch < kDv / 8 ? p.q_nope + (tok * p.qn_st + h * p.qn_sh) * 2 + ch * 16
                         : p.q_rope + (tok * p.qr_st + h * p.qr_sh) * 2 + (ch - kDv / 8) * 16;
    }
    ptx::cp_async_16(ptx::smem_addr(sQ + row * kRowBytes + ch * 16), src, valid ? 16 : 0);
  }

  // Lane = key of a tile. The page id is loaded a tile early; the slot is formed when the tile is
  // issued. Keys past k_end, past the page table or on an invalid page land as zero rows (masked
  // by position when past k_end; zeros keep NaN garbage of unused slots out of P V).
  const int* pt = p.page_table + int64_t(r) * p.pt_st;
  auto load_page = [&](int tile) {
    const int j = k_begin + tile * kTileKeys + lane;
    const int pi = j / p.page_size;
    return (tile < n_tiles && j < k_end && pi < p.max_pages) ? __ldg(pt + pi) : -1;
  };
  auto slot_of = [&](int tile, int page) {
    const int j = k_begin + tile * kTileKeys + lane;
    return (page >= 0 && page < p.num_pages) ? page * p.page_size + (j % p.page_size) : -1;
  };
  auto issue = [&](int tile, int sid) {
    if constexpr (FP8) {  // 41 chunks of 16 bytes per token (656 = 41 x 16), raw into the ring
      constexpr int kTokChunks = 656 / 16, kTotal = kTileKeys * kTokChunks;
      char* dst = sRaw + (tile % stages) * kRawTileBytes;
#pragma unroll
      for (int it = 0; it < (kTotal + kThreads - 1) / kThreads; ++it) {  // uniform trip count (shuffle)
        const int c = tid + it * kThreads;
        const int key = min(c / kTokChunks, kTileKeys - 1), ch = c - key * kTokChunks;
        const int s = __shfl_sync(0xffffffffu, sid, key);
        if (c < kTotal) {
          const char* src = s >= 0 ? p.kv + int64_t(s) * p.kv_stok + ch * 16 : p.kv;
          ptx::cp_async_16(ptx::smem_addr(dst + key * 656 + ch * 16), src, s >= 0 ? 16 : 0);
        }
      }
      return;
    }
    char* dst = sRing + (tile % stages) * kTileBytes;
#pragma unroll 3
    for (int c = tid; c < kTileKeys * kChunks; c += kThreads) {
      const int key = c / kChunks, ch = c - key * kChunks;
      const int s = __shfl_sync(0xffffffffu, sid, key);
      const char* src = s >= 0 ? p.kv + int64_t(s) * p.kv_stok + ch * 16 : p.kv;
      ptx::cp_async_16(ptx::smem_addr(dst + key * kRowBytes + ch * 16), src, s >= 0 ? 16 : 0);
    }
  };

  for (int s = 0; s < stages - 1; ++s) {
    if (s < n_tiles) issue(s, slot_of(s, load_page(s)));
    ptx::cp_async_commit();
  }
  int page_next = load_page(stages - 1);

  // Roles.
  const int qk_m = warp / (KG * KS), qk_kg = (warp / KS) % KG, qk_ks = warp % KS;
  const int pv_m = warp / kPvWarps, pv_dv = warp % kPvWarps;

  // Visible key range of this lane's two rows (g, g + 8 of row tile pv_m), cut to the split.
  int lo[2], hi[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int pr = row0 + 16 * pv_m + g + 8 * i;
    if (pr < rows_total) {
      row_bounds(p, pr / p.h_q, q_len, k_len, lo[i], hi[i]);
      hi[i] = min(hi[i], k_end - 1);
    } else {
      lo[i] = 0;
      hi[i] = -1;
    }
  }
  const float s_cap_in = p.softcap > 0.f ? p.scale_log2 / (p.softcap * 1.4426950408889634f) : 0.f;
  const float s_cap_out = p.softcap * 1.4426950408889634f;

  float m_run[2] = {-INFINITY, -INFINITY};  // base-2 scaled running max of rows g, g + 8
  float l_run[2] = {0.f, 0.f};              // this lane's partial row sums
  float o[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

  const uint32_t qa =
      ptx::smem_addr(sQ) + (16 * qk_m + (lane & 7) + 8 * ((lane >> 3) & 1)) * kRowBytes + 16 * (lane >> 4);

  for (int t = 0; t < n_tiles; ++t) {
    ptx::cp_async_wait_dyn(stages - 2);  // tile t (and Q) landed for this thread's copies
    __syncthreads();                     // ... for all; tile t - 1 and the scores are free
    {
      const int tn = t + stages - 1;
      if (tn < n_tiles) issue(tn, slot_of(tn, page_next));
      ptx::cp_async_commit();
      page_next = load_page(tn + 1);  // used next iteration: its latency hides behind this tile
    }
    if constexpr (FP8) {
      // Raw tile t -> the bf16 tile: per token 32 latent chunks (16 e4m3 -> 32 bytes of bf16, scale of
      // its 128-value tile) and 8 rope chunks copied; 1280 items, 5 per thread. Rows of invalid keys
      // landed as zero bytes: scale 0, values 0.
      const char* raw = sRaw + (t % stages) * kRawTileBytes;
#pragma unroll
      for (int it = 0; it < kTileKeys * 40 / kThreads; ++it) {
        const int i = tid + it * kThreads, key = i / 40, c = i - key * 40;
        const char* tok = raw + key * 656;
        char* row = sRing + key * kRowBytes;
        if (c < 32) {
          const uint4 u = *reinterpret_cast<const uint4*>(tok + c * 16);
          const float scale = *reinterpret_cast<const float*>(tok + kFp8MlaScaleOffset + 4 * (c / 8));
          uint4 lo, hi;
          fp8x16_to_bf16x16(u, scale, lo, hi);
          *reinterpret_cast<uint4*>(row + c * 32) = lo;
          *reinterpret_cast<uint4*>(row + c * 32 + 16) = hi;
        } else {
          *reinterpret_cast<uint4*>(row + 1024 + (c - 32) * 16) =
              *reinterpret_cast<const uint4*>(tok + kFp8MlaRopeOffset + (c - 32) * 16);
        }
      }
      __syncthreads();
    }
    const char* sK = FP8 ? sRing : sRing + (t % stages) * kTileBytes;

    // ---- QK^T: S[16 rows of qk_m][KW keys of qk_kg], chains [qk_ks * CPW, + CPW).
    {
      float acc[CPW][KN][4];
#pragma unroll
      for (int c = 0; c < CPW; ++c)
#pragma unroll
        for (int j = 0; j < KN; ++j) acc[c][j][0] = acc[c][j][1] = acc[c][j][2] = acc[c][j][3] = 0.f;
      const uint32_t kb =
          ptx::smem_addr(sK) + (KW * qk_kg + (lane & 7) + 8 * (lane >> 4)) * kRowBytes + 16 * ((lane >> 3) & 1);
#pragma unroll
      for (int kk = 0; kk < kStepsPerChain; ++kk)
#pragma unroll
        for (int c = 0; c < CPW; ++c) {
          const uint32_t col_bytes = 32u * uint32_t((qk_ks * CPW + c) * kStepsPerChain + kk);
          uint32_t a[4];
          ptx::ldmatrix_x4(qa + col_bytes, a[0], a[1], a[2], a[3]);
#pragma unroll
          for (int n = 0; n < KN / 2; ++n) {  // keys 16n .. 16n + 15 of the group
            uint32_t b0, b1, b2, b3;
            ptx::ldmatrix_x4(kb + uint32_t(16 * n * kRowBytes) + col_bytes, b0, b1, b2, b3);
            ptx::mma_16816<T>(acc[c][2 * n], a, b0, b1);
            ptx::mma_16816<T>(acc[c][2 * n + 1], a, b2, b3);
          }
        }
      float* s_out = sScore + (qk_ks * HB + 16 * qk_m + g) * kScoreStride + KW * qk_kg + 2 * tig;
#pragma unroll
      for (int j = 0; j < KN; ++j) {
        float v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if constexpr (CPW == 4) v[e] = (acc[0][j][e] + acc[1][j][e]) + (acc[2][j][e] + acc[3][j][e]);
          else if constexpr (CPW == 2) v[e] = acc[0][j][e] + acc[1][j][e];
          else v[e] = acc[0][j][e];
        }
        *reinterpret_cast<float2*>(s_out + 8 * j) = make_float2(v[0], v[1]);
        *reinterpret_cast<float2*>(s_out + 8 * kScoreStride + 8 * j) = make_float2(v[2], v[3]);
      }
    }
    __syncthreads();

    // ---- online softmax over the tile (rows g, g + 8 of row tile pv_m).
    const int kbase = k_begin + t * kTileKeys;
    float sv[2][2][4];  // [row i][k-step kk][cols 16kk + 2tig + {0,1}, 16kk + 8 + 2tig + {0,1}]
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int kk = 0; kk < 2; ++kk)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int col = 16 * kk + 8 * half + 2 * tig;
          const float* src = sScore + (16 * pv_m + g + 8 * i) * kScoreStride + col;
          float2 x[KS];
#pragma unroll
          for (int ks = 0; ks < KS; ++ks) x[ks] = *reinterpret_cast<const float2*>(src + ks * HB * kScoreStride);
          float v0, v1;
          if constexpr (KS == 4) {
            v0 = (x[0].x + x[1].x) + (x[2].x + x[3].x);
            v1 = (x[0].y + x[1].y) + (x[2].y + x[3].y);
          } else if constexpr (KS == 2) {
            v0 = x[0].x + x[1].x;
            v1 = x[0].y + x[1].y;
          } else {
            v0 = x[0].x;
            v1 = x[0].y;
          }
          if (p.softcap > 0.f) {
            v0 = s_cap_out * tanhf(v0 * s_cap_in);
            v1 = s_cap_out * tanhf(v1 * s_cap_in);
          } else {
            v0 *= p.scale_log2;
            v1 *= p.scale_log2;
          }
          const int j = kbase + col;
          sv[i][kk][2 * half] = (j >= lo[i] && j <= hi[i]) ? v0 : -INFINITY;
          sv[i][kk][2 * half + 1] = (j + 1 >= lo[i] && j + 1 <= hi[i]) ? v1 : -INFINITY;
        }
    uint32_t pa[2][4];
    online_softmax_step<T, NT>(sv, m_run, l_run, o, pa);

    // ---- O[16 rows][DVW dims] += P[16][32] V[32][DVW].
    {
      const uint32_t vb =
          ptx::smem_addr(sK) + ((lane & 7) + 8 * ((lane >> 3) & 1)) * kRowBytes + 2 * (pv_dv * DVW + 8 * (lane >> 4));
#pragma unroll
      for (int kk = 0; kk < 2; ++kk)
#pragma unroll
        for (int j = 0; j < NT / 2; ++j) {
          uint32_t b0, b1, b2, b3;
          ptx::ldmatrix_x4_trans(vb + uint32_t(kk * 16 * kRowBytes + j * 32), b0, b1, b2, b3);
          ptx::mma_16816<T>(o[2 * j], pa[kk], b0, b1);
          ptx::mma_16816<T>(o[2 * j + 1], pa[kk], b2, b3);
        }
    }
    // No barrier here: the next iteration's first barrier frees this tile's slot and the scores.
  }
  ptx::cp_async_wait<0>();

  // ---- epilogue: rows g, g + 8 of row tile pv_m; columns pv_dv * DVW + 8j + 2tig.
  const bool direct = p.num_splits == 1;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float l = ptx::quad_sum(l_run[i]);
    const int pr = row0 + 16 * pv_m + g + 8 * i;
    if (pr >= rows_total) continue;
    const int qr = pr / p.h_q, h = pr - qr * p.h_q;
    const int64_t tok = q_start + qr;
    const float inv = l > 0.f ? 1.f / l : 0.f;
    if (direct) {
      uint32_t* dst =
          reinterpret_cast<uint32_t*>(p.out + (tok * p.o_st + int64_t(h) * p.o_sh + pv_dv * DVW + 2 * tig) * 2);
#pragma unroll
      for (int j = 0; j < NT; ++j) dst[4 * j] = ptx::pack2<T>(o[j][2 * i] * inv, o[j][2 * i + 1] * inv);
    } else {
      float* dst = p.part_o + ((int64_t(split) * p.total_q + tok) * p.h_q + h) * kDv + pv_dv * DVW + 2 * tig;
#pragma unroll
      for (int j = 0; j < NT; ++j)
        *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(o[j][2 * i] * inv, o[j][2 * i + 1] * inv);
    }
    if (pv_dv == 0 && tig == 0) {
      const float lse = l > 0.f ? (m_run[i] + log2f(l)) * 0.6931471805599453f : -INFINITY;
      if (direct) {
        if (p.lse) p.lse[tok * p.lse_st + int64_t(h) * p.lse_sh] = lse;
      } else {
        p.part_lse[(int64_t(split) * p.total_q + tok) * p.h_q + h] = lse;
      }
    }
  }
}

}  // namespace attnserve::cuda::mla
