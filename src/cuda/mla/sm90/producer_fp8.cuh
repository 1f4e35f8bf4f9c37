// The Hopper MLA decode kernel's producer for an FP8-656 cache (cache_formats.h: 512 e4m3 latent
// values, 4 f32 scales, 64 bf16 rope values per 656-byte token). The consumers are the bf16 kernel's
// (kernel.cuh): they read the same 9 SW128 bf16 panels per stage, so the producer dequantizes each K tile
// into the stage it will be read from, with no shared memory beyond the bf16 kernel's (Q + 2 stages + P
// fill 227 KB): the raw bytes of a tile are staged inside its own stage.
//
// Per tile t (64 keys), once the consumers released its stage:
//   1. cp.async the raw tokens into the stage (8 threads per key, the bf16 producer's page-table walk):
//        latent dims [64 p, 64 p + 64) (64 bytes)  -> panel p's upper half, at 4096 + 64 key   (p < 8)
//        rope (128 bytes of bf16)                  -> panel 8, its final SW128 place (no conversion)
//        the 4 scales (16 bytes)                   -> panel 0's first KB, at 16 key
//      and an L2 prefetch of tile t + 2's tokens (no registers, no shared memory: the next fills hit L2).
//   2. wait for the copies (every producer thread: cp.async.wait_all + a producer-only named barrier);
//   3. dequantize in place, two panels at a time (scale q serves panels 2q and 2q + 1): every thread reads
//      its raw bytes of the pair into registers, the producer barrier, then writes the bf16 rows (row key of
//      panel p overwrites raw bytes of keys 2 (key - 32) .. of the same panel, read before the barrier);
//      thread = (key = tid / 2, half = tid % 2): 32 latent values per panel, 2 x 16 bytes in, 4 x 16 out;
//   4. fence.proxy.async (generic stores -> the wgmmas' async proxy), arrive on the stage's full barrier.
// Keys past k_end or on an invalid page land as zero bytes: scale 0, values 0 (as the bf16 kernel's
// zero rows). The fill of a stage is serial (copy latency + dequantization) but runs while the consumers
// work on the other stage.
#pragma once
#include <cstdint>

#include "config.h"
#include "cuda/common/fp8_mla.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/sm90/sync.cuh"
#include "cuda/common/sm90/tma.cuh"
#include "cuda/common/sm90/wgmma.cuh"
#include "cuda/mla/params.h"

namespace attnserve::cuda::mla90 {

constexpr int kFp8BarProducer = 8;  // named barrier of the 128 producer threads (ids 1.. are the consumers')
constexpr int kFp8PrefetchAhead = 2;

#if defined(ATTNSERVE_SM90_DEVICE)

__device__ __forceinline__ uint4 lds128(uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
  return v;
}
__device__ __forceinline__ void sts128(uint32_t a, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void prefetch_l2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}

// Slot of key j of request b.r (page table), -1 past k_end, the table or the pool.
template <class Block>
__device__ __forceinline__ int64_t fp8_slot(const mla::Params& p, const Block& b, int j) {
  const int pi = j / p.page_size;
  if (j >= b.k_end || pi >= p.max_pages) return -1;
  const int page = __ldg(p.page_table + int64_t(b.r) * p.pt_st + pi);
  return unsigned(page) < unsigned(p.num_pages) ? int64_t(page) * p.page_size + j % p.page_size : -1;
}

// Step 1 for the keys lrow + 16 i (i < 4) at cache slots slot[i] (-1: zero bytes) of kv (token stride stok):
// thread (lch = tid % 8, lrow = tid / 8) copies latent chunks lch + 8 k (k < 4), rope chunk lch, and the scales
// when lch = 0. Shared with the sparse kernel on this schedule (src/cuda/sparse_mla/sm90/dense_schedule.cuh),
// whose slots come from the row's index list.
__device__ __forceinline__ void fp8_issue_rows(const char* kv, int64_t stok, const int64_t (&slot)[4], uint32_t sK,
                                               int lch, int lrow) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int key = lrow + 16 * i;
    const bool ok = slot[i] >= 0;
    const char* src = kv + (ok ? slot[i] : 0) * stok;
    const int sz = ok ? 16 : 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int c = lch + 8 * k, panel = c >> 2;  // latent chunk c: dims 16 c ..
      ptx::cp_async_16(sK + uint32_t(panel * kPanelBytes + 4096 + key * 64 + (c & 3) * 16), src + c * 16, sz);
    }
    ptx::cp_async_16(sK + uint32_t(8 * kPanelBytes) + sm90::sw128_offset(key, lch), src + kFp8MlaRopeOffset + lch * 16,
                     sz);
    if (lch == 0) ptx::cp_async_16(sK + uint32_t(key * 16), src + kFp8MlaScaleOffset, sz);
  }
}

// Step 1 of tile `tile` of the paged decode: the slots through the page table.
template <class Block>
__device__ __forceinline__ void fp8_issue_tile(const mla::Params& p, const Block& b, int tile, uint32_t sK, int lch,
                                               int lrow) {
  int64_t slot[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) slot[i] = fp8_slot(p, b, b.k_begin + tile * kTileKeys + lrow + 16 * i);
  fp8_issue_rows(p.kv, p.kv_stok, slot, sK, lch, lrow);
}

// L2 prefetch of a tile's tokens: one bulk prefetch per key (656 bytes), by the lch = 0 threads.
template <class Block>
__device__ __forceinline__ void fp8_prefetch_tile(const mla::Params& p, const Block& b, int tile, int lch, int lrow) {
  if (lch != 0 || tile >= b.n_tiles) return;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t s = fp8_slot(p, b, b.k_begin + tile * kTileKeys + lrow + 16 * i);
    if (s >= 0) prefetch_l2(p.kv + s * p.kv_stok, uint32_t(kFp8MlaBytes));
  }
}

// Step 3: the stage's raw bytes -> its 9 bf16 panels (panel 8, the rope, is in place already).
__device__ __forceinline__ void fp8_dequant_stage(uint32_t sK, int tid) {
  const int key = tid >> 1, half = tid & 1;
  const uint4 sc = lds128(sK + uint32_t(key * 16));  // before the first barrier: panel 0 rows 0..7 hold them
  const float scales[4] = {__uint_as_float(sc.x), __uint_as_float(sc.y), __uint_as_float(sc.z), __uint_as_float(sc.w)};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint4 raw[2][2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const uint32_t src = sK + uint32_t((2 * q + j) * kPanelBytes + 4096 + key * 64 + half * 32);
      raw[j][0] = lds128(src);
      raw[j][1] = lds128(src + 16);
    }
    sm90::named_sync(kFp8BarProducer, 128);  // every raw byte of panels 2q, 2q + 1 is in registers
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const uint32_t panel = sK + uint32_t((2 * q + j) * kPanelBytes);
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        uint4 lo, hi;
        fp8x16_to_bf16x16(raw[j][u], scales[q], lo, hi);
        sts128(panel + sm90::sw128_offset(key, 4 * half + 2 * u), lo);
        sts128(panel + sm90::sw128_offset(key, 4 * half + 2 * u + 1), hi);
      }
    }
  }
}

// The producer warpgroup's whole job for an FP8-656 cache (Block, Smem, Producer: kernel.cuh's).
template <class Block, class Smem, class Producer>
__device__ __forceinline__ void produce_fp8(const mla::Params& p, const Block& b, const Smem& sm, const Producer& ld,
                                            int tid) {
  if (b.n_tiles == 0) return;
  ld.load_q(p, b, sm.q);  // lands with tile 0's copies (the wait_all below)
  for (int t = 1; t <= kFp8PrefetchAhead; ++t) fp8_prefetch_tile(p, b, t, ld.lch, ld.lrow);
  for (int t = 0; t < b.n_tiles; ++t) {
    if (t >= kStages) sm90::mbar_wait(sm.empty(t), ((t / kStages) - 1) & 1);
    fp8_issue_tile(p, b, t, sm.stage(t), ld.lch, ld.lrow);
    if (t > 0) fp8_prefetch_tile(p, b, t + kFp8PrefetchAhead, ld.lch, ld.lrow);
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    sm90::named_sync(kFp8BarProducer, 128);  // every producer thread's copies of tile t landed
    fp8_dequant_stage(sm.stage(t), tid);
    sm90::fence_proxy_async();  // the bf16 stores, seen by the consumers' wgmmas
    sm90::mbar_arrive(sm.full(t));
  }
}

// The same job with the raw bytes of whole tiles by TMA (Fill::kFp8Tma): a tile of 64 valid keys on one valid
// page is, in the cache's byte view [slots][656], eight 64 x 64-byte latent boxes (column 64 p -> panel p's upper
// half, key-major: exactly step 1's layout), one 16 x 64 scale box (column 512 -> panel 0's first KB) and one
// 128 x 64 rope box with 128-byte swizzle (column 528 -> panel 8, SW128), issued by thread 0 against the stage's
// landed barrier (count 1, 41 KB of transactions); any other tile takes step 1's cp.async rows, each thread's
// arrival raising the landed barrier's pending count, then thread 0's arrival. Steps 2-4 as above, except that
// step 2 waits on the landed barrier.
template <class Block, class Smem, class Producer>
__device__ __forceinline__ void produce_fp8_tma(const mla::Params& p, const Block& b, const Smem& sm,
                                                const Producer& ld, int tid, const void* latent_map,
                                                const void* scale_map, const void* rope_map) {
  constexpr uint32_t kRawTileBytes = 8 * 64 * 64 + 16 * 64 + 128 * 64;
  if (b.n_tiles == 0) return;
  ld.load_q(p, b, sm.q);
  asm volatile("cp.async.wait_all;\n" ::: "memory");  // Q landed before this thread's first full arrival
  for (int t = 1; t <= kFp8PrefetchAhead; ++t) fp8_prefetch_tile(p, b, t, ld.lch, ld.lrow);
  const int* pt = p.page_table + int64_t(b.r) * p.pt_st;
  for (int t = 0; t < b.n_tiles; ++t) {
    if (t >= kStages) sm90::mbar_wait(sm.empty(t), ((t / kStages) - 1) & 1);
    const uint32_t sK = sm.stage(t);
    const int j0 = b.k_begin + t * kTileKeys, pi = j0 / p.page_size, off = j0 - pi * p.page_size;
    const bool whole = j0 + kTileKeys <= b.k_end && off + kTileKeys <= p.page_size && pi < p.max_pages;
    const int page = whole ? __ldg(pt + pi) : -1;  // the same value in every thread: a uniform branch
    if (unsigned(page) < unsigned(p.num_pages)) {
      if (tid == 0) {
        const uint32_t bar = sm.landed(t);
        sm90::mbar_arrive_expect_tx(bar, kRawTileBytes);
        const int row = page * p.page_size + off;  // < 2^31: the plan's pool limit
#pragma unroll
        for (int pn = 0; pn < kPanels - 1; ++pn)
          sm90::tma_load_2d(sK + uint32_t(pn * kPanelBytes + 4096), latent_map, 64 * pn, row, bar);
        sm90::tma_load_2d(sK, scale_map, kFp8MlaScaleOffset, row, bar);
        sm90::tma_load_2d(sK + uint32_t((kPanels - 1) * kPanelBytes), rope_map, kFp8MlaRopeOffset, row, bar);
      }
    } else {
      fp8_issue_tile(p, b, t, sK, ld.lch, ld.lrow);
      sm90::cp_async_mbar_arrive_inc(sm.landed(t));
      sm90::named_sync(kFp8BarProducer, 128);  // every thread's increment before thread 0's arrival
      if (tid == 0) sm90::mbar_arrive(sm.landed(t));
    }
    if (t > 0) fp8_prefetch_tile(p, b, t + kFp8PrefetchAhead, ld.lch, ld.lrow);
    sm90::mbar_wait(sm.landed(t), (t / kStages) & 1);  // tile t's raw bytes, TMA's or every thread's cp.async
    fp8_dequant_stage(sK, tid);
    sm90::fence_proxy_async();  // the bf16 stores, seen by the consumers' wgmmas
    sm90::mbar_arrive(sm.full(t));
  }
}

#endif  // ATTNSERVE_SM90_DEVICE

}  // namespace attnserve::cuda::mla90
