// Hopper paged attention: which keys a CTA visits, and the cp.async loads of its Q tile and of
// the K/V tiles gathered per token through the page table into SW128 panels (common/wgmma.cuh).
// Used by both kernels in kernel.cuh with a different number of loading threads.
#pragma once
#include "config.h"
#include "cuda/attention/params.cuh"
#include "cuda/common/masking.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/sm90/wgmma.cuh"

namespace attnserve::cuda::attn90 {

using attn::Params;

// Shapes of one (q/k head dim D, v head dim DV) instantiation (config.h: tile_keys, ws_stages).
// Rows are stored in 64-column SW128 panels; a head dim that is not a multiple of 64 (96) pads its
// last panel, whose columns past D are never loaded: S reads only D / 16 k-steps, and O's padded
// columns (P V runs N = 128 at d_v 96) are computed from those bytes but never stored.
template <int D, int DV>
struct Traits {
  static constexpr int kN = tile_keys(D, DV);  // keys per K/V tile (the N of S)
  static constexpr int kStagesWs = ws_stages(D, DV);
  static constexpr int kQkPanels = panels(D);  // panels of a q or k row
  static constexpr int kVPanels = panels(DV);  // panels of a v row
  static constexpr int kQkChunks = D / 8;      // 16-byte chunks of a q or k row
  static constexpr int kVChunks = DV / 8;
  static constexpr int kKSteps = D / 16;            // k16 steps of S = Q K^T
  static constexpr int kQPanelBytes = kRows * 128;  // one panel of the Q tile
  static constexpr int kKvPanelBytes = kN * 128;    // one panel of a K or V tile
  static constexpr int kQBytes = kQkPanels * kQPanelBytes;
  static constexpr int kKBytes = kQkPanels * kKvPanelBytes;
  static constexpr int kVBytes = kVPanels * kKvPanelBytes;
  static constexpr int kStageBytes = kKBytes + kVBytes;  // one pipeline stage: K then V
  static constexpr int kSAcc = kN / 2;                   // f32 S accumulators per thread (m64nN)
  static constexpr int kPvN = kVPanels * 64;             // N of O += P V (d_v rounded up to a panel)
  static constexpr int kOAcc = kPvN / 2;                 // f32 O accumulators per thread
  static_assert(D % 32 == 0 && DV % 32 == 0 && D <= 256 && DV <= 256, "head dims: multiples of 32 up to 256");
  static_assert(kN % 32 == 0, "keys per tile: a multiple of 32 (loader passes) and of 16 (P's k-steps)");
};

// Whether chunk `lch` (0..7) of panel `pn` is inside a row of `chunks` 16-byte chunks
// (compile-time true for every panel but a padded last one).
template <int CHUNKS>
__device__ __forceinline__ bool chunk_in_row(int pn, int lch) {
  return (pn + 1) * 8 <= CHUNKS || pn * 8 + lch < CHUNKS;
}

// Byte offset of chunk `ch` (0..D/8) of tile row `row` in a panelled SW128 tile.
template <int PANEL_BYTES>
__device__ __forceinline__ uint32_t tile_offset(int row, int ch) {
  return uint32_t((ch >> 3) * PANEL_BYTES) + sm90::sw128_offset(row, ch & 7);
}

// One CTA's request, rows and key tiles of N keys. Causal: the last m-blocks see the most keys;
// they are launched first (reversed blockIdx.x) so the tail of the grid is short blocks.
struct Block {
  int hk, r, q_start, q_len, k_len, rows_total, row0, k_begin, k_end, n_tiles;

  // N: keys per tile, a compile-time constant at every call (the divisions below fold).
  __device__ __forceinline__ bool init(const Params& p, int N = kTileKeys) {
    hk = blockIdx.y;
    r = blockIdx.z;
    q_start = p.cu_seqlens_q[r];
    q_len = p.cu_seqlens_q[r + 1] - q_start;
    k_len = p.cache_seqlens[r];
    rows_total = q_len * p.group;
    row0 = (int(gridDim.x) - 1 - int(blockIdx.x)) * kRows;
    if (row0 >= rows_total) return false;
    // Keys: the union of the rows' ranges (lo and hi grow with the row); tiles start at multiples of N.
    int blo, bhi, unused;
    row_bounds(p, row0 / p.group, q_len, k_len, blo, unused);
    row_bounds(p, (min(row0 + kRows, rows_total) - 1) / p.group, q_len, k_len, unused, bhi);
    k_begin = max(blo, 0) / N * N;
    k_end = bhi + 1;
    n_tiles = k_end > k_begin ? (k_end - k_begin + N - 1) / N : 0;
    return true;
  }
};

// Loads by NT threads (thread index `t` in 0..NT-1). Eight threads share a row, one 16-byte chunk
// of each 64-column panel each (chunks lch and lch + 8 at d 128, both at the same swizzled position
// of their panel), so a row's page id and slot arithmetic are computed by 8 threads, not 16, and a
// thread covers N / (NT / 8) rows of a tile (FA3's paged_kv.h also gives a row's 128-byte
// line to 8 threads).
template <int D, int DV, int NT>
struct Loader {
  using Tr = Traits<D, DV>;
  static constexpr int kTpr = 8;                         // threads per row
  static constexpr int kStep = NT / kTpr;                // tile rows covered per pass
  static constexpr int kRowsPerThread = Tr::kN / kStep;  // K/V rows per thread per tile
  static constexpr int kQRowsPerThread = kRows / kStep;
  static_assert(NT % kTpr == 0 && Tr::kN % kStep == 0 && kRows % kStep == 0 && kStep % 8 == 0, "load mapping");

  int lch, lrow0;
  const int* pt;
  const char *gK, *gV;
  int pages[kRowsPerThread];  // page id per loaded row, -1: zero-fill

  __device__ __forceinline__ Loader(const Params& p, const Block& b, int t) {
    lch = t % kTpr;
    lrow0 = t / kTpr;
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
      const uint32_t dst = ptx::smem_addr(sQ) + sm90::sw128_offset(row, lch);
#pragma unroll
      for (int pn = 0; pn < Tr::kQkPanels; ++pn)
        if (chunk_in_row<Tr::kQkChunks>(pn, lch))
          ptx::cp_async_16(dst + uint32_t(pn * Tr::kQPanelBytes), src + (valid ? pn * 128 : 0), valid ? 16 : 0);
    }
  }

  // Page ids of this thread's rows of `tile` (plain loads, consumed by the next issue()).
  // POW2: page_size = 1 << page_shift (shifts and masks; otherwise divisions). The callers branch
  // once per tile or once per kernel, not per row: a branch per row broke the loop into basic blocks.
  template <bool POW2>
  __device__ __forceinline__ void read_pages_t(const Params& p, const Block& b, int tile) {
    const int j0 = b.k_begin + tile * Tr::kN + lrow0;
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int j = j0 + i * kStep;
      const int pi = POW2 ? (j >> p.page_shift) : j / p.page_size;
      pages[i] = (j < b.k_end && pi < p.max_pages) ? __ldg(pt + pi) : -1;
    }
  }

  // cp.async of K and V rows of `tile` into dK / dV (no commit); invalid pages read as zeros.
  // Slots and byte offsets in 32-bit arithmetic, widened once per row by IMAD.WIDE (the selector
  // requires slots and per-token strides below 2^31: sm90_supports); 64-bit products per row
  // were ~14 instructions of the producer's ~60 per row.
  template <bool POW2>
  __device__ __forceinline__ void issue_t(const Params& p, const Block& b, int tile, char* dK, char* dV) const {
    const int j0 = b.k_begin + tile * Tr::kN + lrow0;
    const uint32_t sK = ptx::smem_addr(dK) + sm90::sw128_offset(lrow0, lch);
    const uint32_t sV = ptx::smem_addr(dV) + sm90::sw128_offset(lrow0, lch);
    const uint32_t stk = uint32_t(p.k_stok), stv = uint32_t(p.v_stok);
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int j = j0 + i * kStep;
      const int in_page = POW2 ? (j & ((1 << p.page_shift) - 1)) : j % p.page_size;
      const int page = pages[i];
      const bool ok = unsigned(page) < unsigned(p.num_pages);
      const uint32_t slot = ok ? uint32_t(POW2 ? (page << p.page_shift) + in_page : page * p.page_size + in_page) : 0u;
      const char* srcK = gK + uint64_t(slot) * stk;  // one IMAD.WIDE.U32 each
      const char* srcV = gV + uint64_t(slot) * stv;
      // Row lrow0 + i * kStep: kStep is a multiple of 8, so the swizzle phase is lrow0's.
      const uint32_t off = uint32_t(i * kStep * 128);
#pragma unroll
      for (int pn = 0; pn < Tr::kQkPanels; ++pn)
        if (chunk_in_row<Tr::kQkChunks>(pn, lch))
          ptx::cp_async_16(sK + off + uint32_t(pn * Tr::kKvPanelBytes), srcK + pn * 128, ok ? 16 : 0);
#pragma unroll
      for (int pn = 0; pn < Tr::kVPanels; ++pn)
        if (chunk_in_row<Tr::kVChunks>(pn, lch))
          ptx::cp_async_16(sV + off + uint32_t(pn * Tr::kKvPanelBytes), srcV + pn * 128, ok ? 16 : 0);
    }
  }

  __device__ __forceinline__ void read_pages(const Params& p, const Block& b, int tile) {
    if (p.page_shift >= 0) read_pages_t<true>(p, b, tile);
    else read_pages_t<false>(p, b, tile);
  }
  __device__ __forceinline__ void issue(const Params& p, const Block& b, int tile, char* dK, char* dV) const {
    if (p.page_shift >= 0) issue_t<true>(p, b, tile, dK, dV);
    else issue_t<false>(p, b, tile, dK, dV);
  }
};

}  // namespace attnserve::cuda::attn90
