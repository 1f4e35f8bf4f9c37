// Hopper paged attention: the TMA tensor maps of the K and V caches for the producer kernels' bulk
// K/V loads (kernel.cuh, tile_load_tma.cuh). Host side: kv_tma.cu encodes them; the kernels take them
// as one __grid_constant__ parameter.
#pragma once
#include <cuda.h>  // CUtensorMap

#include "cuda/attention/params.cuh"

namespace attnserve::cuda::attn90 {

// Each cache as a 3-D tensor [slots = num_pages * page_size][h_kv][d] (element strides from Params:
// slot k_stok, head k_sh), boxes of 64 columns (one 128-byte SW128 panel) x 1 head x box_rows slots,
// 128-byte swizzle (the panels' layout, common/wgmma.cuh). box_rows: the largest power of two that
// divides page_size, at most the tile's keys, so a box never crosses a page; 0: no maps (the
// producer gathers every tile by cp.async).
struct KvTma {
  CUtensorMap k, v;
  int box_rows = 0;
  int box_shift = 0;  // log2(box_rows)
};

// Encodes both maps for a 2-byte cache (bf16 / f16) with head dims d / d_v and tiles of tile_keys;
// false (box_rows 0) where TMA cannot take the cache: page_size not a multiple of 16, strides or
// base addresses not 16-byte aligned, no driver entry point, or the driver refused the map.
bool encode_kv_tma(const attn::Params& p, int d, int d_v, int tile_keys, KvTma& out);

}  // namespace attnserve::cuda::attn90
