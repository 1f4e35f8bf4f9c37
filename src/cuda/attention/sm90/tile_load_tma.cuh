// Hopper paged attention: a K/V tile by TMA boxes (Plan::sm90_tma; maps in kv_tma.h), for the
// producer kernels (kernel.cuh). Device code for sm_90a only.
//
// Why: the cp.async gather issues ~1100 instructions per 128-key tile at d 128 (4096 copies of 16 bytes
// over 128 threads, plus every row's page-table read and slot arithmetic); on the SMSPs the consumers
// share, and under the H200's power cap instructions are clock (bench/NOTES.md "Session 6"). A tile whose
// keys all lie below k_len is instead kN / box_rows runs of box_rows slots, each inside one page: lane i
// of the producer's first warp reads run i's page id and issues one 64-column box per K and V panel
// (page 16, d 128: 8 lanes x 4 boxes); the 128-byte swizzle puts them in the SW128 panels the wgmmas read.
// Tiles reaching k_len (where unowned slots may hold anything, NaN included) keep the cp.async rows,
// which zero-fill past k_end; an invalid page id gives a box outside the map, which TMA zero-fills too.
#pragma once
#include "cuda/common/sm90/sync.cuh"
#include "cuda/common/sm90/tma.cuh"
#include "kv_tma.h"
#include "tile_load.cuh"

namespace attnserve::cuda::attn90 {

#if defined(ATTNSERVE_SM90_DEVICE)
// Whether tile `tile` goes by TMA: maps encoded, every key below k_len and inside the page table.
// Uniform over the CTA.
template <int N>
__device__ __forceinline__ bool tma_tile(const Params& p, const Block& b, const KvTma& m, int tile) {
  const int j_end = b.k_begin + (tile + 1) * N;
  return m.box_rows > 0 && j_end <= b.k_len && (j_end - 1) / p.page_size < p.max_pages;
}

// Issued by the 32 lanes of one producer warp: lane 0 announces the stage's bytes on `full` (its
// arrival), lanes < kN / box_rows each load one run of box_rows keys into dK / dV (shared addresses).
// The caller's other producer threads arrive on `full` plainly, so its count (128) is unchanged.
template <int D, int DV>
__device__ __forceinline__ void issue_tile_tma(const Params& p, const Block& b, const KvTma& m, int tile, uint32_t dK,
                                               uint32_t dV, uint32_t full, int lane) {
  using Tr = Traits<D, DV>;
  if (lane == 0) sm90::mbar_arrive_expect_tx(full, uint32_t(Tr::kStageBytes));
  __syncwarp();
  if (lane < (Tr::kN >> m.box_shift)) {
    const int j = b.k_begin + tile * Tr::kN + (lane << m.box_shift);
    const int pi = p.page_shift >= 0 ? j >> p.page_shift : j / p.page_size;
    const int page = __ldg(p.page_table + int64_t(b.r) * p.pt_st + pi);
    // An invalid page: a box of negative slots, all outside the map (zeros). Slots < 2^31 (sm90_supports).
    const int slot = unsigned(page) < unsigned(p.num_pages) ? page * p.page_size + (j - pi * p.page_size) : -m.box_rows;
    const uint32_t off = uint32_t(lane << m.box_shift) * 128u;
#pragma unroll
    for (int pn = 0; pn < Tr::kQkPanels; ++pn)
      sm90::tma_load_3d(dK + off + uint32_t(pn * Tr::kKvPanelBytes), &m.k, pn * 64, b.hk, slot, full);
#pragma unroll
    for (int pn = 0; pn < Tr::kVPanels; ++pn)
      sm90::tma_load_3d(dV + off + uint32_t(pn * Tr::kKvPanelBytes), &m.v, pn * 64, b.hk, slot, full);
  }
}
#endif

}  // namespace attnserve::cuda::attn90
