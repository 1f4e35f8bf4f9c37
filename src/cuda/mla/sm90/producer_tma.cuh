// The Hopper MLA decode kernel's producer for a bf16 cache by TMA (Plan::sm90_tma): the consumers and the
// ring are the cp.async producer's (kernel.cuh); only how a stage is filled differs.
//
// Why: the cp.async producer (4608 copies of 16 bytes per 72 KB tile, 36 per thread, plus 4 page-table
// reads per thread) delivers ~4.5 TB/s per GPU into the SMs at h_q 128, which bounds the kernel at ~540
// TFLOP/s (bench/NOTES.md "Session 5": every consumer schedule tried sat at that ingest). A tile of 64
// keys on one page is a 64 x 576 block of the cache's 2-D view [slots][576]: nine 64 x 64 TMA boxes
// (8 KB each, 128-byte swizzle = the SW128 panel layout the wgmmas read), issued by one thread.
//
// Per tile t, once the consumers released its stage (all 128 producer threads walk the loop):
//   - 64 valid keys on one valid page (page_size % 64 == 0, which the launcher requires, and no tile edge):
//     thread 0 announces 72 KB on the stage's full barrier (count 1) and issues the nine boxes;
//   - any other tile (the last, partial one; an invalid page): the cp.async rows of the bf16 producer
//     (zero rows past k_end / on invalid pages), each thread's cp.async arrival raising the barrier's
//     pending count, then, after a producer barrier, thread 0's one expected arrival.
// Q is loaded by cp.async and has landed (wait_all + producer barrier) before thread 0's first arrival.
#pragma once
#include <cstdint>

#include "config.h"
#include "cuda/common/sm90/sync.cuh"
#include "cuda/common/sm90/tma.cuh"
#include "cuda/mla/params.h"

namespace attnserve::cuda::mla90 {

constexpr int kTmaBarProducer = 9;  // named barrier of the 128 producer threads (ids 1.. are the consumers')

#if defined(ATTNSERVE_SM90_DEVICE)

// The producer warpgroup's whole job by TMA (Block, Smem, Producer: kernel.cuh's); kv_map: the cache as
// [num_pages * page_size][576] bf16, 64 x 64 boxes, 128-byte swizzle (mla90_bf16.cu).
template <class Block, class Smem, class Producer>
__device__ __forceinline__ void produce_tma(const mla::Params& p, const Block& b, const Smem& sm, const Producer& ld,
                                            int tid, const void* kv_map) {
  if (b.n_tiles == 0) return;
  ld.load_q(p, b, sm.q);
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  sm90::named_sync(kTmaBarProducer, 128);
  const int* pt = p.page_table + int64_t(b.r) * p.pt_st;
  for (int t = 0; t < b.n_tiles; ++t) {
    if (t >= kStages) sm90::mbar_wait(sm.empty(t), ((t / kStages) - 1) & 1);
    const int j0 = b.k_begin + t * kTileKeys, pi = j0 / p.page_size, off = j0 - pi * p.page_size;
    const bool whole = j0 + kTileKeys <= b.k_end && off + kTileKeys <= p.page_size && pi < p.max_pages;
    const int page = whole ? __ldg(pt + pi) : -1;  // the same value in every thread: a uniform branch
    if (unsigned(page) < unsigned(p.num_pages)) {
      if (tid == 0) {
        sm90::mbar_arrive_expect_tx(sm.full(t), kTileBytes);
        const int row = page * p.page_size + off;  // < 2^31: the plan's pool limit
#pragma unroll
        for (int pn = 0; pn < kPanels; ++pn)
          sm90::tma_load_2d(sm.stage(t) + uint32_t(pn * kPanelBytes), kv_map, pn * 64, row, sm.full(t));
      }
    } else {
      ld.load_tile(p, b, t, sm.stage(t));
      sm90::cp_async_mbar_arrive_inc(sm.full(t));
      sm90::named_sync(kTmaBarProducer, 128);  // every thread's increment before thread 0's arrival
      if (tid == 0) sm90::mbar_arrive(sm.full(t));
    }
  }
}

#endif  // ATTNSERVE_SM90_DEVICE

}  // namespace attnserve::cuda::mla90
