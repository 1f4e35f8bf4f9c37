// Portable MLA (absorbed) paged attention: one latent KV head, rows [c_kv (512) | k_rope (64)].
// score = q_nope . c_kv + q_rope . k_rope, value = c_kv.
//
// One CTA = (16 packed rows, split, request); packed row = q_row * h_q + head, so every query
// head of the request shares each K/V byte the CTA reads. Keys stream in tiles of 32 through a
// cp.async pipeline. Warps split the 32 keys for Q.K^T (8 keys each, full 576-wide dot), meet in
// shared memory for the row max / P / row sums, then split the 512 output columns for P.V
// (128 each), so no warp holds more than a 16 x 128 f32 accumulator.
#pragma once
#include <cuda_bf16.h>

#include "cuda/common/ptx.cuh"

namespace attnserve::cuda::mla {

constexpr int kDv = 512, kDr = 64, kDqk = kDv + kDr;
constexpr int kThreads = 128;
constexpr int kRows = 16;
constexpr int kTileKeys = 32;
constexpr int kRowBytes = kDqk * 2;  // 1152
constexpr int kChunks = kDqk / 8;    // 72
constexpr int kTileBytes = kTileKeys * kRowBytes;
constexpr int kPStride = 40;         // bf16 elements per P row (80 bytes: conflict-free ldmatrix)
constexpr int kDeterministicSplitKeys = 1024;

struct Params {
  const char* q_nope;  // [total_q, h_q, 512] bf16
  int64_t qn_st, qn_sh;
  const char* q_rope;  // [total_q, h_q, 64]
  int64_t qr_st, qr_sh;
  const char* kv;      // pool, token slot stride in bytes
  int64_t kv_stok;
  const int* page_table;
  int64_t pt_st;
  const int* cache_seqlens;
  const int* cu_seqlens_q;
  char* out;           // [total_q, h_q, 512] bf16
  int64_t o_st, o_sh;
  float* lse;
  int64_t lse_st, lse_sh;
  float* part_o;       // [splits, total_q, h_q, 512]
  float* part_lse;     // [splits, total_q, h_q]
  int total_q, h_q, page_size, num_pages, max_pages;
  int num_splits, split_keys, stages;
  float scale_log2, softcap;
  int causal, window_left, window_right;
};

constexpr std::size_t smem_bytes(int stages) {
  return std::size_t(kRows) * kRowBytes + std::size_t(stages) * kTileBytes + kRows * kPStride * 2 + 2 * 4 * kRows * 4 +
         3 * std::size_t(stages + 1) * kTileKeys * 4;  // page-id ring (2 * stages) and slot ring
}

__device__ __forceinline__ uint32_t swz(int r, int c) { return uint32_t(r * kRowBytes + ((c ^ (r & 7)) << 4)); }

__device__ __forceinline__ void row_bounds(const Params& p, int q_row, int q_len, int k_len, int& lo, int& hi) {
  const int pos = k_len - q_len + q_row;
  hi = k_len - 1;
  if (p.causal) hi = min(hi, pos);
  if (p.window_right >= 0) hi = min(hi, pos + p.window_right);
  lo = 0;
  if (p.window_left >= 0) lo = max(lo, pos - p.window_left);
}

__global__ void __launch_bounds__(kThreads) mla_kernel(const Params p) {
  using T = __nv_bfloat16;
  extern __shared__ __align__(128) char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int mb = blockIdx.x, split = blockIdx.y, r = blockIdx.z;
  const int q_start = p.cu_seqlens_q[r];
  const int q_len = p.cu_seqlens_q[r + 1] - q_start;
  const int k_len = p.cache_seqlens[r];
  const int rows_total = q_len * p.h_q;
  const int row0 = mb * kRows;
  if (row0 >= rows_total) return;

  int blo, bhi, unused;
  row_bounds(p, row0 / p.h_q, q_len, k_len, blo, unused);
  row_bounds(p, (min(row0 + kRows, rows_total) - 1) / p.h_q, q_len, k_len, unused, bhi);
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

  char* sQ = smem;
  char* sKV = sQ + kRows * kRowBytes;
  T* sP = reinterpret_cast<T*>(sKV + p.stages * kTileBytes);
  float* sMax = reinterpret_cast<float*>(sP + kRows * kPStride);  // [4][16]
  float* sSum = sMax + 4 * kRows;                                 // [4][16]
  const int ring = p.stages + 1;
  int* sSlot = reinterpret_cast<int*>(sSum + 4 * kRows);          // [ring][32] token slots per tile
  const int pring = 2 * p.stages;  // page ids: the prologue reads them with no barrier before reuse
  int* sPage = sSlot + ring * kTileKeys;                          // [pring][32] page ids per tile

  // Q rows: [q_nope | q_rope] -> one swizzled 576-wide row per packed row.
  for (int idx = tid; idx < kRows * kChunks; idx += kThreads) {
    const int row = idx / kChunks, ch = idx % kChunks;
    const int pr = row0 + row;
    const bool valid = pr < rows_total;
    const char* src = p.q_nope;
    if (valid) {
      const int qr = pr / p.h_q, h = pr - qr * p.h_q;
      const int64_t tok = q_start + qr;
      src = ch < kDv / 8 ? p.q_nope + (tok * p.qn_st + h * p.qn_sh) * 2 + ch * 16
                         : p.q_rope + (tok * p.qr_st + h * p.qr_sh) * 2 + (ch - kDv / 8) * 16;
    }
    ptx::cp_async_16(ptx::smem_addr(sQ + swz(row, ch)), src, valid ? 16 : 0);
  }
  ptx::cp_async_commit();

  // Page ids are cp.async'ed into a ring `stages` tiles ahead; warp 0 turns them into token slots
  // one tile before their K/V load, so no thread waits on a page-table read.
  const int* pt = p.page_table + int64_t(r) * p.pt_st;
  auto issue_pages = [&](int tile) {
    if (tile >= n_tiles) return;
    const int j0 = k_begin + tile * kTileKeys;
    const int p0 = j0 / p.page_size, p1 = (min(j0 + kTileKeys, k_end) - 1) / p.page_size;
    if (tid <= p1 - p0) {
      const int pi = p0 + tid;
      const bool ok = pi < p.max_pages;
      ptx::cp_async_4(ptx::smem_addr(sPage + (tile % pring) * kTileKeys + tid), pt + (ok ? pi : 0), ok ? 4 : 0);
    }
  };
  auto make_slots = [&](int tile) {  // by threads 0..31, from landed page ids
    if (tile >= n_tiles || tid >= kTileKeys) return;
    const int j0 = k_begin + tile * kTileKeys, j = j0 + tid;
    const int pi = j / p.page_size;
    int slot = -1;
    if (j < k_end && pi < p.max_pages) {
      const int page = sPage[(tile % pring) * kTileKeys + pi - j0 / p.page_size];
      if (page >= 0 && page < p.num_pages) slot = page * p.page_size + (j - pi * p.page_size);
    }
    sSlot[(tile % ring) * kTileKeys + tid] = slot;
  };
  auto issue = [&](int tile) {
    char* dst = sKV + (tile % p.stages) * kTileBytes;
    const int* slots = sSlot + (tile % ring) * kTileKeys;
    for (int idx = tid; idx < kTileKeys * kChunks; idx += kThreads) {
      const int row = idx / kChunks, ch = idx % kChunks;
      const int slot = slots[row];
      ptx::cp_async_16(ptx::smem_addr(dst + swz(row, ch)), p.kv + int64_t(slot >= 0 ? slot : 0) * p.kv_stok + ch * 16,
                       slot >= 0 ? 16 : 0);
    }
  };

  // Per-thread rows g and g + 8 of the 16-row block.
  const int g = lane >> 2, tq = lane & 3;
  int lo0, hi0, lo1, hi1;
  {
    const int pr0 = row0 + g, pr1 = row0 + g + 8;
    if (pr0 < rows_total) row_bounds(p, pr0 / p.h_q, q_len, k_len, lo0, hi0); else { lo0 = 0; hi0 = -1; }
    if (pr1 < rows_total) row_bounds(p, pr1 / p.h_q, q_len, k_len, lo1, hi1); else { lo1 = 0; hi1 = -1; }
    hi0 = min(hi0, k_end - 1);
    hi1 = min(hi1, k_end - 1);
  }
  const int lo_max = max(lo0, lo1), hi_min = min(hi0, hi1);
  const float s_cap_in = p.softcap > 0.f ? p.scale_log2 / (p.softcap * 1.4426950408889634f) : 0.f;
  const float s_cap_out = p.softcap * 1.4426950408889634f;

  float o[16][4];
#pragma unroll
  for (int i = 0; i < 16; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

  // Prologue: group 0 = Q + page ids of the first `stages` tiles; then one group per K/V tile,
  // carrying the page ids of the tile `stages` further on.
  for (int s = 0; s < p.stages; ++s) issue_pages(s);
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncthreads();
  for (int s = 0; s < p.stages; ++s) make_slots(s);
  __syncthreads();
  for (int s = 0; s < p.stages - 1; ++s) {
    if (s < n_tiles) issue(s);
    issue_pages(s + p.stages);
    ptx::cp_async_commit();
  }

  const uint32_t sQa = ptx::smem_addr(sQ), sPa = ptx::smem_addr(sP);
  for (int t = 0; t < n_tiles; ++t) {
    const int nt = t + p.stages - 1;
    ptx::cp_async_wait_dyn(p.stages - 2);
    __syncthreads();
    if (nt < n_tiles) issue(nt);
    issue_pages(nt + p.stages);
    ptx::cp_async_commit();
    make_slots(nt + 1);  // its page ids came with tile t's group

    const uint32_t sKa = ptx::smem_addr(sKV + (t % p.stages) * kTileBytes);
    // S (16 x 8) = Q K^T for keys warp*8 .. warp*8+7, over 576 dims (two k-steps per ldmatrix.x4).
    float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 6
    for (int kk = 0; kk < kDqk / 16; kk += 2) {
      uint32_t a[4], a2[4], b0, b1, b2, b3;
      ptx::ldmatrix_x4(sQa + swz(lane & 15, 2 * kk + (lane >> 4)), a[0], a[1], a[2], a[3]);
      ptx::ldmatrix_x4(sQa + swz(lane & 15, 2 * kk + 2 + (lane >> 4)), a2[0], a2[1], a2[2], a2[3]);
      ptx::ldmatrix_x4(sKa + swz(warp * 8 + (lane & 7), 2 * kk + (lane >> 3)), b0, b1, b2, b3);
      ptx::mma_16816<T>(s, a, b0, b1);
      ptx::mma_16816<T>(s, a2, b2, b3);
    }
    const int kbase = k_begin + t * kTileKeys + warp * 8;
    const bool need_mask = kbase < lo_max || kbase + 7 > hi_min;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = p.softcap > 0.f ? s_cap_out * tanhf(s[e] * s_cap_in) : s[e] * p.scale_log2;
      if (need_mask) {
        const int j = kbase + 2 * tq + (e & 1);
        const bool vis = e < 2 ? (j >= lo0 && j <= hi0) : (j >= lo1 && j <= hi1);
        x = vis ? x : -INFINITY;
      }
      s[e] = x;
    }
    float mx0 = ptx::quad_max(fmaxf(s[0], s[1])), mx1 = ptx::quad_max(fmaxf(s[2], s[3]));
    if (tq == 0) {
      sMax[warp * kRows + g] = mx0;
      sMax[warp * kRows + g + 8] = mx1;
    }
    __syncthreads();
    mx0 = fmaxf(fmaxf(sMax[g], sMax[kRows + g]), fmaxf(sMax[2 * kRows + g], sMax[3 * kRows + g]));
    mx1 = fmaxf(fmaxf(sMax[g + 8], sMax[kRows + g + 8]), fmaxf(sMax[2 * kRows + g + 8], sMax[3 * kRows + g + 8]));
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float bs0 = mn0 == -INFINITY ? 0.f : mn0, bs1 = mn1 == -INFINITY ? 0.f : mn1;
    const float al0 = exp2f(m0 - bs0), al1 = exp2f(m1 - bs1);
    m0 = mn0;
    m1 = mn1;
    const float p0 = exp2f(s[0] - bs0), p1 = exp2f(s[1] - bs0), p2 = exp2f(s[2] - bs1), p3 = exp2f(s[3] - bs1);
    *reinterpret_cast<uint32_t*>(sP + g * kPStride + warp * 8 + 2 * tq) = ptx::pack2<T>(p0, p1);
    *reinterpret_cast<uint32_t*>(sP + (g + 8) * kPStride + warp * 8 + 2 * tq) = ptx::pack2<T>(p2, p3);
    const float ps0 = ptx::quad_sum(p0 + p1), ps1 = ptx::quad_sum(p2 + p3);
    if (tq == 0) {
      sSum[warp * kRows + g] = ps0;
      sSum[warp * kRows + g + 8] = ps1;
    }
    __syncthreads();
    l0 = l0 * al0 + ((sSum[g] + sSum[kRows + g]) + (sSum[2 * kRows + g] + sSum[3 * kRows + g]));
    l1 = l1 * al1 + ((sSum[g + 8] + sSum[kRows + g + 8]) + (sSum[2 * kRows + g + 8] + sSum[3 * kRows + g + 8]));
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      o[i][0] *= al0; o[i][1] *= al0;
      o[i][2] *= al1; o[i][3] *= al1;
    }
    // O[:, warp*128 .. +128] += P (16 x 32) V (32 x 128)
#pragma unroll
    for (int kk = 0; kk < kTileKeys / 16; ++kk) {
      uint32_t a[4];
      ptx::ldmatrix_x4(sPa + uint32_t((lane & 15) * kPStride * 2 + (2 * kk + (lane >> 4)) * 16), a[0], a[1], a[2], a[3]);
#pragma unroll
      for (int dp = 0; dp < 8; ++dp) {
        uint32_t v0, v1, v2, v3;
        ptx::ldmatrix_x4_trans(sKa + swz(kk * 16 + (lane & 15), warp * 16 + 2 * dp + (lane >> 4)), v0, v1, v2, v3);
        ptx::mma_16816<T>(o[2 * dp], a, v0, v1);
        ptx::mma_16816<T>(o[2 * dp + 1], a, v2, v3);
      }
    }
    __syncthreads();
  }
  ptx::cp_async_wait<0>();

  // Epilogue: rows g, g+8; columns warp*128 + i*8 + 2*tq.
  const bool direct = p.num_splits == 1;
  const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int pr = row0 + g + 8 * half;
    if (pr >= rows_total) continue;
    const int qr = pr / p.h_q, h = pr - qr * p.h_q;
    const int64_t tok = q_start + qr;
    const float inv = half ? inv1 : inv0;
    const float l = half ? l1 : l0, m = half ? m1 : m0;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int col = warp * 128 + i * 8 + 2 * tq;
      const float x = o[i][2 * half] * inv, y = o[i][2 * half + 1] * inv;
      if (direct) {
        *reinterpret_cast<uint32_t*>(p.out + (tok * p.o_st + int64_t(h) * p.o_sh + col) * 2) = ptx::pack2<T>(x, y);
      } else {
        *reinterpret_cast<float2*>(p.part_o + ((int64_t(split) * p.total_q + tok) * p.h_q + h) * kDv + col) =
            make_float2(x, y);
      }
    }
    if (warp == 0 && tq == 0) {
      const float lse = l > 0.f ? (m + log2f(l)) * 0.6931471805599453f : -INFINITY;
      if (direct) {
        if (p.lse) p.lse[tok * p.lse_st + int64_t(h) * p.lse_sh] = lse;
      } else {
        p.part_lse[(int64_t(split) * p.total_q + tok) * p.h_q + h] = lse;
      }
    }
  }
}

}  // namespace attnserve::cuda::mla
