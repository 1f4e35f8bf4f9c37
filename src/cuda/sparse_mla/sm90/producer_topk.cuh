// The producer warpgroup of the sparse MLA kernel on the dense MLA schedule (dense_schedule.cuh): the CTA's block
// (query row, 64 heads, split of the row's top-k list), Q, and the 64-key tiles gathered through the row's index
// list into the dense kernel's ring (src/cuda/mla/sm90/kernel.cuh: 9 SW128 bf16 panels per stage), from a bf16 cache
// by the dense cp.async producer's rows, or from an FP8-656 cache by the dense FP8 producer's raw copies and in-place
// dequantization (src/cuda/mla/sm90/producer_fp8.cuh). Thread (lch = tid % 8, lrow = tid / 8) serves keys
// lrow + 16 i (i < 4) of every tile; the indices of tile t + 1 are read while it waits for tile t's stage.
//
// Invalid positions (index < 0 or >= num_slots, past topk_length) land as zero rows (FP8: zero bytes, scale 0) and
// clear their bit of the stage's 64-bit key mask (mla90::Smem::key_mask): producer warp w ballots pass i's keys
// 16 i + 4 w + k (k = lane / 8) into bit 16 w + 4 i + k; lane 0 of the warp stores the u16 before its release
// arrival on the stage's full barrier.
#pragma once
#include <cstdint>

#include "cuda/common/fp8_mla.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/sm90/sync.cuh"
#include "cuda/common/sm90/wgmma.cuh"
#include "cuda/mla/sm90/kernel.cuh"
#include "cuda/sparse_mla/params.cuh"

namespace attnserve::cuda::sparse_mla90::dense_schedule {

using mla90::kPanelBytes;
using mla90::kPanels;
using mla90::kRows;
using mla90::kStages;
using mla90::kTileKeys;
using sparse_mla_op::Params;

// Full-barrier arrivals per phase: bf16, every producer thread's cp.async arrival + lane 0 of each producer warp;
// FP8, every producer thread after the dequantization (lane 0's store of the mask word comes before its arrival).
constexpr int kFullArrivalsBf16 = 128 + 4;
constexpr int kFullArrivalsFp8 = 128;

// One CTA's query row, heads and tiles of the row's top-k list.
struct TopkBlock {
  int64_t row;
  int h0, split;
  int n;        // the row's list length (topk_length clamped to [0, topk])
  int tile0;    // the split's first tile
  int n_tiles;  // its tiles (0: nothing to read; the row or split is empty)

  __device__ __forceinline__ void init(const Params& p) {
    row = blockIdx.x / p.head_blocks;
    h0 = int(blockIdx.x % p.head_blocks) * kRows;
    split = int(blockIdx.y);
    n = p.topk;
    if (p.topk_length) {
      const int v = p.topk_length[row * p.topk_length_stride];
      n = v < 0 ? 0 : (v > p.topk ? p.topk : v);
    }
    const int row_tiles = (n + kTileKeys - 1) / kTileKeys;
    tile0 = split * p.split_tiles;
    n_tiles = max(0, min(row_tiles - tile0, p.split_tiles));
  }
};

#if defined(ATTNSERVE_SM90_DEVICE)

// Q of heads h0 + lrow + 16 i (zero rows past h_q) into the 9 panels; lands with tile 0's copies.
__device__ __forceinline__ void topk_load_q(const Params& p, const TopkBlock& b, uint32_t sQ, int lch, int lrow) {
#pragma unroll
  for (int i = 0; i < kRows / 16; ++i) {
    const int head = b.h0 + lrow + 16 * i;
    const bool ok = head < p.h_q;
    const uint16_t* src = ok ? p.q + b.row * p.q_row_stride + int64_t(head) * p.q_head_stride + lch * 8 : p.q;
    const uint32_t dst = sQ + sm90::sw128_offset(lrow + 16 * i, lch);
#pragma unroll
    for (int pn = 0; pn < kPanels; ++pn)
      ptx::cp_async_16(dst + uint32_t(pn * kPanelBytes), src + (ok ? pn * 64 : 0), ok ? 16 : 0);
  }
}

// Slots of the thread's keys in tile t of the CTA, -1 where invalid (and for t past the split).
__device__ __forceinline__ void topk_slots(const Params& p, const TopkBlock& b, int t, int lrow, int (&sid)[4]) {
  const int32_t* idx = p.indices + b.row * p.idx_row_stride;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int pos = (b.tile0 + t) * kTileKeys + lrow + 16 * i;
    const int v = t < b.n_tiles && pos < b.n ? __ldg(idx + int64_t(pos) * p.idx_col_stride) : -1;
    sid[i] = v >= 0 && v < p.num_slots ? v : -1;
  }
}

// This warp's u16 of the key mask: lanes 0, 8, 16, 24 of pass i's ballot are keys 16 i + 4 warp + 0..3.
__device__ __forceinline__ uint32_t topk_mask_word(const int (&sid)[4]) {
  uint32_t word = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t bal = __ballot_sync(0xffffffffu, sid[i] >= 0);
    word |= ((bal & 1u) | ((bal >> 7) & 2u) | ((bal >> 14) & 4u) | ((bal >> 21) & 8u)) << (4 * i);
  }
  return word;
}

__device__ __forceinline__ void topk_store_mask(const mla90::Smem& sm, int t, int warp, uint32_t word) {
  asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(sm.key_mask(t) + 2 * warp), "h"(uint16_t(word)) : "memory");
}

// bf16 cache: the dense cp.async producer's rows (chunk lch of each of the 9 panels), full barrier kFullArrivalsBf16.
__device__ __forceinline__ void produce_topk_bf16(const Params& p, const TopkBlock& b, const mla90::Smem& sm, int tid) {
  if (b.n_tiles == 0) return;
  const int lch = tid & 7, lrow = tid >> 3, lane = tid & 31, warp = tid >> 5;
  topk_load_q(p, b, sm.q, lch, lrow);
  int sid[4];
  topk_slots(p, b, 0, lrow, sid);
  for (int t = 0; t < b.n_tiles; ++t) {
    int next[4];
    topk_slots(p, b, t + 1, lrow, next);
    if (t >= kStages) sm90::mbar_wait(sm.empty(t), ((t / kStages) - 1) & 1);
    const uint32_t sK = sm.stage(t);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const bool ok = sid[i] >= 0;
      const uint8_t* src = p.kv + int64_t(ok ? sid[i] : 0) * p.kv_row_bytes + lch * 16;
      const uint32_t dst = sK + sm90::sw128_offset(lrow + 16 * i, lch);
#pragma unroll
      for (int pn = 0; pn < kPanels; ++pn)
        ptx::cp_async_16(dst + uint32_t(pn * kPanelBytes), src + pn * 128, ok ? 16 : 0);
    }
    const uint32_t word = topk_mask_word(sid);
    sm90::cp_async_mbar_arrive(sm.full(t));
    if (lane == 0) {
      topk_store_mask(sm, t, warp, word);
      sm90::mbar_arrive(sm.full(t));  // release: the mask word is visible with the phase
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) sid[i] = next[i];
  }
}

// FP8-656 cache: the dense FP8 producer's steps (producer_fp8.cuh) with the slots from the index list: raw copies
// into the stage (mla90::fp8_issue_rows), an L2 prefetch of tile t + 1's tokens, wait + producer barrier, in-place
// dequantization (mla90::fp8_dequant_stage), fence, arrival (full barrier kFullArrivalsFp8).
__device__ __forceinline__ void produce_topk_fp8(const Params& p, const TopkBlock& b, const mla90::Smem& sm, int tid) {
  if (b.n_tiles == 0) return;
  const int lch = tid & 7, lrow = tid >> 3, lane = tid & 31, warp = tid >> 5;
  const char* kv = reinterpret_cast<const char*>(p.kv);
  topk_load_q(p, b, sm.q, lch, lrow);  // lands with tile 0's copies (the wait_all below)
  int sid[4];
  topk_slots(p, b, 0, lrow, sid);
  for (int t = 0; t < b.n_tiles; ++t) {
    int next[4];
    topk_slots(p, b, t + 1, lrow, next);
    if (t >= kStages) sm90::mbar_wait(sm.empty(t), ((t / kStages) - 1) & 1);
    const uint32_t sK = sm.stage(t);
    const int64_t slot[4] = {sid[0], sid[1], sid[2], sid[3]};
    mla90::fp8_issue_rows(kv, p.kv_row_bytes, slot, sK, lch, lrow);
    if (lch == 0)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (next[i] >= 0) mla90::prefetch_l2(kv + int64_t(next[i]) * p.kv_row_bytes, uint32_t(kFp8MlaBytes));
    const uint32_t word = topk_mask_word(sid);
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    sm90::named_sync(mla90::kFp8BarProducer, 128);  // every producer thread's copies of tile t landed
    mla90::fp8_dequant_stage(sK, tid);
    sm90::fence_proxy_async();  // the bf16 stores, seen by the consumers' wgmmas
    if (lane == 0) topk_store_mask(sm, t, warp, word);
    sm90::mbar_arrive(sm.full(t));
#pragma unroll
    for (int i = 0; i < 4; ++i) sid[i] = next[i];
  }
}

#endif  // ATTNSERVE_SM90_DEVICE

}  // namespace attnserve::cuda::sparse_mla90::dense_schedule
