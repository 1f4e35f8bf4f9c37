// Hopper paged attention: the split K/V loaders of the ping-pong kernel (config.h kKvKTma, kKvVTma,
// kKvLean; Tuning::sm90_tma 2 / 3 / 4) for full tiles on pages of a multiple of 16. Device code for sm_90a.
//
// Why (bench/NOTES.md "Session 8: Hopper prefill, K by TMA and V by cp.async"): at page 16 a whole tile by
// TMA is 32 boxes of 2 KB, and at the TMA unit's ~130 SM clocks a box (session 6) that is more than the
// tile's ~3800 clocks of math; the
// cp.async gather (tile_load.cuh) costs each producer warp ~330 instructions a 128-key tile at d 128 (the
// SASS of 2230f8e: 128 for the rows' page ids with their bounds tests and 64-bit addresses, 38 for the
// TMA test, 150 for the slots and the 32 copies), on the SMSPs the consumers issue from. Here:
//   - a row group is the 16 tile rows one pass of the 128 producer threads covers (8 threads a row). On a
//     page of a multiple of 16 a row group lies inside one page, so the slot of its first key is the same
//     for every thread: lane g of each producer warp loads group g's page id (one load a warp and tile,
//     not one per row) and computes that slot, and every thread takes it by shuffle; a thread's row is
//     then one IMAD.WIDE and its copies. A full tile (every key below k_len, every page inside the table
//     and valid) needs no bounds tests;
//   - kKvKTma: K by TMA boxes of box_rows slots (kv_tma.h; 16 boxes a tile at page 16, d 128) issued by
//     lane 0 of the four producer warps in turn, V by that lean gather; kKvVTma the reverse; kKvLean both
//     by the lean gather.
// Tiles that are not full keep the gather of tile_load.cuh, which also takes a tile with an invalid page id
// (it reads those as zeros; known only once the ids land, after the empty wait: a rare, slower tile).
//
// The stage's full barrier still counts 128 arrivals: every producer thread's cp.async.mbarrier.arrive
// (.noinc) once its copies land. A thread that issues boxes announces their bytes first by
// mbarrier.expect_tx, which does not arrive: the phase then also waits for those bytes, and it cannot
// complete before the announcement (or see a box land before it), because that thread's own arrival is
// issued after both.
#pragma once
#include "cuda/common/sm90/sync.cuh"
#include "cuda/common/sm90/tma.cuh"
#include "kv_tma.h"
#include "tile_load.cuh"

namespace attnserve::cuda::attn90 {

#if defined(ATTNSERVE_SM90_DEVICE)
template <int D, int DV, int KV>
struct SplitLoader {
  using Tr = Traits<D, DV>;
  static constexpr int kTpr = 8;                  // threads per row (Loader's mapping)
  static constexpr int kStep = 16;                // rows per pass of 128 threads = one row group
  static constexpr int kGroups = Tr::kN / kStep;  // row groups per tile (8 at d 128, 4 at 192/128, 2 at 256)
  static constexpr bool kKByTma = KV == kKvKTma;  // else K by the lean gather
  static constexpr bool kVByTma = KV == kKvVTma;  // else V by the lean gather
  static_assert(is_split_load(KV) && Tr::kN % kStep == 0 && kGroups <= 32, "split loader mapping");

  int lane, lch, lrow0;
  const int* pt;
  const char *gK, *gV;  // this thread's chunk of its row lrow0 of slot 0: + slot * stride is the row's
  int group_pi = 0;     // lane g < kGroups: page-table index of row group g of the tile being loaded
  int group_page = 0;   // ... and its page id (a load in flight during the empty wait)
  int group_slot = 0;   // ... and the slot of its first key (slots())

  __device__ __forceinline__ SplitLoader(const Params& p, const Block& b, int t) {
    lane = t & 31;
    lch = t % kTpr;
    lrow0 = t / kTpr;
    pt = p.page_table + int64_t(b.r) * p.pt_st;
    gK = p.k + int64_t(b.hk) * p.k_sh + int64_t(lrow0) * p.k_stok + lch * 16;
    gV = p.v + int64_t(b.hk) * p.v_sh + int64_t(lrow0) * p.v_stok + lch * 16;
  }

  // Whether `tile` may take this loader: every key below k_len and inside the page table, and for the TMA
  // modes the maps encoded. Uniform over the CTA. (Its page ids are tested after they land: slots().)
  template <bool POW2>
  __device__ __forceinline__ static bool full_tile(const Params& p, const Block& b, const KvTma& m, int tile) {
    const int j_end = b.k_begin + (tile + 1) * Tr::kN;
    const int last = POW2 ? (j_end - 1) >> p.page_shift : (j_end - 1) / p.page_size;
    return (KV == kKvLean || m.box_rows > 0) && j_end <= b.k_len && last < p.max_pages;
  }

  // Lane g < kGroups of every producer warp loads row group g's page id (one load a warp; no commit).
  template <bool POW2>
  __device__ __forceinline__ void read_pages(const Params& p, const Block& b, int tile) {
    const int j = b.k_begin + tile * Tr::kN + lane * kStep;
    group_pi = POW2 ? j >> p.page_shift : j / p.page_size;
    if (lane < kGroups) group_page = __ldg(pt + group_pi);
  }

  // After the empty wait: the slot of each row group's first key, in every thread (by shuffle), and
  // whether every page id of the tile is valid (the same answer in every producer warp: they load the same
  // ids). False: the caller takes the gather of tile_load.cuh, which reads invalid pages as zeros.
  template <bool POW2>
  __device__ __forceinline__ bool slots(const Params& p, const Block& b, int tile, int (&slot)[kGroups]) {
    const bool ok = lane >= kGroups || unsigned(group_page) < unsigned(p.num_pages);
    const int j = b.k_begin + tile * Tr::kN + lane * kStep;
    // < 2^31 (sm90_supports); the row group lies inside the page (pages of a multiple of 16).
    group_slot = group_page * p.page_size + (j - group_pi * p.page_size);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) slot[g] = __shfl_sync(0xffffffffu, group_slot, g);
    return __all_sync(0xffffffffu, ok);
  }
  // The lean gather (no commit): this thread's row lrow0 of each row group, K and / or V; sK, sV: the stage.
  __device__ __forceinline__ void issue(const Params& p, const int (&slot)[kGroups], uint32_t sK, uint32_t sV) const {
    const uint32_t dK = sK + sm90::sw128_offset(lrow0, lch), dV = sV + sm90::sw128_offset(lrow0, lch);
    const uint32_t stk = uint32_t(p.k_stok), stv = uint32_t(p.v_stok);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const uint32_t off = uint32_t(g * kStep * 128);  // kStep % 8 == 0: lrow0's swizzle phase
      if constexpr (!kKByTma) {
        const char* src = gK + uint64_t(uint32_t(slot[g])) * stk;  // one IMAD.WIDE.U32
#pragma unroll
        for (int pn = 0; pn < Tr::kQkPanels; ++pn)
          if (chunk_in_row<Tr::kQkChunks>(pn, lch))
            ptx::cp_async_16(dK + off + uint32_t(pn * Tr::kKvPanelBytes), src + pn * 128);
      }
      if constexpr (!kVByTma) {
        const char* src = gV + uint64_t(uint32_t(slot[g])) * stv;
#pragma unroll
        for (int pn = 0; pn < Tr::kVPanels; ++pn)
          if (chunk_in_row<Tr::kVChunks>(pn, lch))
            ptx::cp_async_16(dV + off + uint32_t(pn * Tr::kKvPanelBytes), src + pn * 128);
      }
    }
  }

  // TMA modes (kKvKTma, kKvVTma), every producer warp: runs of box_rows slots (kv_tma.h: box_rows divides
  // the page and the power-of-two tile, so a run never crosses a page) go to the warps in turn (run r to
  // warp r % 4: at page 16, d 128, 8 runs of 2 panels, 4 boxes a warp), so the issue work is spread over
  // the four SMSPs; lane 0 of the warp announces its boxes' bytes on `full` (no arrival) and issues one box
  // per panel of K (or V) per run. dst: the stage's K (or V) tile.
  static constexpr int kMaxRuns = (kGroups + 3) / 4;  // runs of one warp, at most (16-slot boxes)
  __device__ __forceinline__ void issue_tma(const Block& b, const KvTma& m, int warp, uint32_t dst,
                                            uint32_t full) const {
    static_assert(kKByTma || kVByTma, "a TMA mode");
    static_assert((Tr::kN & (Tr::kN - 1)) == 0, "box runs: a power-of-two tile");
    constexpr int kPanels = kKByTma ? Tr::kQkPanels : Tr::kVPanels;
    const CUtensorMap* map = kKByTma ? &m.k : &m.v;
    const int runs = Tr::kN >> m.box_shift;
    const int mine = (runs - warp + 3) >> 2;  // runs warp, warp + 4, ...
    int run_slot[kMaxRuns];
#pragma unroll
    for (int k = 0; k < kMaxRuns; ++k)  // lane (warp + 4 k) * (box_rows / 16) holds run warp + 4 k's first slot
      run_slot[k] = __shfl_sync(0xffffffffu, group_slot, ((warp + 4 * k) << (m.box_shift - 4)) & 31);
    if (lane != 0 || mine <= 0) return;
    sm90::mbar_expect_tx(full, uint32_t(mine * m.box_rows * 128 * kPanels));
#pragma unroll
    for (int k = 0; k < kMaxRuns; ++k)
      if (k < mine) {
        const uint32_t row = uint32_t(warp + 4 * k) << m.box_shift;
#pragma unroll
        for (int pn = 0; pn < kPanels; ++pn)
          sm90::tma_load_3d(dst + row * 128u + uint32_t(pn * Tr::kKvPanelBytes), map, pn * 64, b.hk, run_slot[k], full);
      }
  }
};
#endif

}  // namespace attnserve::cuda::attn90
