// Hopper paged attention: which keys a CTA visits, and the cp.async loads of its Q tile and of
// the K/V tiles gathered per token through the page table into SW128 panels (common/wgmma.cuh).
// Used by both kernels in kernel.cuh with a different number of loading threads.
#pragma once
#include "config.h"
#include "cuda/common/ptx.cuh"
#include "cuda/common/masking.cuh"
#include "cuda/attention/params.cuh"
#include "cuda/common/sm90/wgmma.cuh"

namespace attnserve::cuda::attn90 {

using attn::Params;

template <int D>
struct Traits {
  static constexpr int kPanels = D / 64;                   // 64-column SW128 panels of a row
  static constexpr int kChunks = D / 8;                    // 16-byte chunks of a row
  static constexpr int kQPanelBytes = kRows * 128;         // one panel of the Q tile
  static constexpr int kKvPanelBytes = kTileKeys * 128;    // one panel of a K or V tile
  static constexpr int kQBytes = kPanels * kQPanelBytes;
  static constexpr int kKvBytes = kPanels * kKvPanelBytes;
  static constexpr int kSAcc = kTileKeys / 2;              // f32 S accumulators per thread (m64n128)
  static constexpr int kOAcc = D / 2;                      // f32 O accumulators per thread (m64nD)
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
};

// Byte offset of chunk `ch` (0..D/8) of tile row `row` in a panelled SW128 tile.
template <int PANEL_BYTES>
__device__ __forceinline__ uint32_t tile_offset(int row, int ch) {
  return uint32_t((ch >> 3) * PANEL_BYTES) + sm90::sw128_offset(row, ch & 7);
}

// One CTA's request, rows and key tiles. Causal: the last m-blocks see the most keys; they are
// launched first (reversed blockIdx.x) so the tail of the grid is short blocks.
struct Block {
  int hk, r, q_start, q_len, k_len, rows_total, row0, k_begin, k_end, n_tiles;

  __device__ __forceinline__ bool init(const Params& p) {
    hk = blockIdx.y;
    r = blockIdx.z;
    q_start = p.cu_seqlens_q[r];
    q_len = p.cu_seqlens_q[r + 1] - q_start;
    k_len = p.cache_seqlens[r];
    rows_total = q_len * p.group;
    row0 = (int(gridDim.x) - 1 - int(blockIdx.x)) * kRows;
    if (row0 >= rows_total) return false;
    // Keys: the union of the rows' ranges (lo and hi grow with the row); tiles start at multiples of 128.
    int blo, bhi, unused;
    row_bounds(p, row0 / p.group, q_len, k_len, blo, unused);
    row_bounds(p, (min(row0 + kRows, rows_total) - 1) / p.group, q_len, k_len, unused, bhi);
    k_begin = max(blo, 0) & ~(kTileKeys - 1);
    k_end = bhi + 1;
    n_tiles = k_end > k_begin ? (k_end - k_begin + kTileKeys - 1) / kTileKeys : 0;
    return true;
  }
};

// Loads by NT threads (thread index `t` in 0..NT-1): chunk lch of rows lrow0 + i * kStep.
template <int D, int NT>
struct Loader {
  using Tr = Traits<D>;
  static constexpr int kStep = NT / Tr::kChunks;             // tile rows covered per pass
  static constexpr int kRowsPerThread = kTileKeys / kStep;   // K/V rows per thread per tile
  static constexpr int kQRowsPerThread = kRows / kStep;
  static_assert(NT % Tr::kChunks == 0 && kTileKeys % kStep == 0, "load mapping");

  int lch, lrow0;
  const int* pt;
  const char *gK, *gV;
  int pages[kRowsPerThread];  // page id per loaded row, -1: zero-fill

  __device__ __forceinline__ Loader(const Params& p, const Block& b, int t) {
    lch = t % Tr::kChunks;
    lrow0 = t / Tr::kChunks;
    pt = p.page_table + int64_t(b.r) * p.pt_st;
    gK = p.k + int64_t(b.hk) * p.k_sh + lch * 16;
    gV = p.v + int64_t(b.hk) * p.v_sh + lch * 16;
  }

  // Q: packed rows -> SW128 panels; rows past the request are zero-filled (no commit).
  __device__ __forceinline__ void load_q(const Params& p, const Block& b, char* sQ) const {
#pragma unroll
    for (int i = 0; i < kQRowsPerThread; ++i) {
      const int row = lrow0 + i * kStep;
      const int pr = b.row0 + row;
      const bool valid = pr < b.rows_total;
      const char* src = p.q;
      if (valid) {
        const int qr = pr / p.group, h = b.hk * p.group + (pr - qr * p.group);
        src = p.q + ((int64_t(b.q_start + qr) * p.q_st + int64_t(h) * p.q_sh) * 2 + lch * 16);
      }
      ptx::cp_async_16(ptx::smem_addr(sQ + tile_offset<Tr::kQPanelBytes>(row, lch)), src, valid ? 16 : 0);
    }
  }

  // Page ids of this thread's rows of `tile` (plain loads, consumed by the next issue()).
  __device__ __forceinline__ void read_pages(const Params& p, const Block& b, int tile) {
    const int j0 = b.k_begin + tile * kTileKeys + lrow0;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int j = j0 + i * kStep;
      const int pi = p.page_shift >= 0 ? (j >> p.page_shift) : j / p.page_size;
      pages[i] = (j < b.k_end && pi < p.max_pages) ? __ldg(pt + pi) : -1;
    }
  }

  // cp.async of K and V rows of `tile` into dK / dV (no commit); invalid pages read as zeros.
  __device__ __forceinline__ void issue(const Params& p, const Block& b, int tile, char* dK, char* dV) const {
    const int j0 = b.k_begin + tile * kTileKeys + lrow0;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int row = lrow0 + i * kStep;
      const int j = j0 + i * kStep;
      const int in_page = p.page_shift >= 0 ? (j & ((1 << p.page_shift) - 1)) : j % p.page_size;
      const int page = pages[i];
      const bool ok = page >= 0 && page < p.num_pages;
      const int64_t slot = ok ? int64_t(page) * p.page_size + in_page : 0;
      const uint32_t off = tile_offset<Tr::kKvPanelBytes>(row, lch);
      ptx::cp_async_16(ptx::smem_addr(dK + off), gK + slot * p.k_stok, ok ? 16 : 0);
      ptx::cp_async_16(ptx::smem_addr(dV + off), gV + slot * p.v_stok, ok ? 16 : 0);
    }
  }
};

}  // namespace attnserve::cuda::attn90
