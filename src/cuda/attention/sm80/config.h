// Portable (sm80+) paged attention: what the kernel supports, its tile shapes and shared-memory size.
// Host-visible (plain C++): the plan (../plan.cpp) sizes and chooses with it, the kernel is built from it.
// Adding a head dim: add its (q/k, v) pair to HeadDims and add its instantiations (instantiations/).
#pragma once
#include <cstddef>

#include "cuda/common/head_dim_list.h"
#include "cuda/common/plan_util.h"

namespace attnserve::cuda::attn {

// (q/k, v) head dims of the instantiations; 192/128 is DeepSeek's non-absorbed MLA prefill.
using HeadDims = HeadDimList<HeadDimPair<64, 64>, HeadDimPair<96, 96>, HeadDimPair<128, 128>, HeadDimPair<192, 192>,
                             HeadDimPair<192, 128>, HeadDimPair<256, 256>>;

// Elements of a Q, K or V row in shared memory: the wider head dim rounded up to a power of two
// >= 64 (swz() XORs 8 chunks, and a row's 16-byte chunks must divide the 128 loading threads), so
// one thread mapping loads K and V; the columns past a tensor's own head dim are never loaded nor
// read (d 96 -> 128, 192 and 192/128 -> 256).
constexpr int row_elems(int d, int d_v) {
  int r = 64;
  while (r < d || r < d_v) r *= 2;
  return r;
}
constexpr int kThreads = 128;
constexpr int kTileKeys = 64;
// Keys per pipeline stage. Measured on the H200 (bench/NOTES.md): 32-key tiles with a deeper
// pipeline ran decode at 2.7 TB/s against 3.6 for 64-key tiles: a per-tile cost dominates.
constexpr int tile_keys(int /*mt*/) { return 64; }
constexpr int kMaxStages = 8;
// Fixed split size of the deterministic mode (a request's splits depend on its own length only).
// Measured on the H200, same buffers (bench/NOTES.md, session 5): b64 x 8K 5.1 % behind the default
// at 1024 keys, 1.6 % at 4096; but one request of 32K gets 8 kv heads x 8 splits: 43 % behind.
constexpr int kDeterministicSplitKeys = 4096;

// Three CTAs per SM need <= 168 registers per thread: the MT = 1 kernel at d <= 128 fits without
// spills (164 at bf16 d 128, sm_90); larger head dims and MT = 4 hold more accumulators.
constexpr bool supports_three_ctas(int d, int mt) { return mt == 1 && d <= 128; }

// Deepest pipeline worth having; the plan then takes the deepest that fits two CTAs per SM.
// d: row_elems(d, d_v).
constexpr int max_stages_for(int d, bool fp8) {
  const int s = (d <= 64 ? 4 : d <= 128 ? 3 : 2) + (fp8 ? 1 : 0);
  return s < 4 ? s : 4;
}

// FP8 KV with the MMA operands straight from the e4m3 bytes (Plan::fp8_direct, kernel flag DIRECT): no
// widening pass, no conversion tiles. Built for 16-row tiles (decode / verify), d = d_v in {64, 128} (Q's
// f16 fragments held in registers); other shapes keep the widening kernel.
constexpr bool supports_fp8_direct(int d, int d_v, int mt) { return mt == 1 && d == d_v && (d == 64 || d == 128); }

// The epilogue's f32 partial-O buffer ([4 slices or warps][16 * mt][d_v + 8], kernel.cuh's sO), laid over the
// K/V tiles: the direct FP8 kernel, with no conversion tiles behind them, pads the tiles up to it.
constexpr std::size_t epilogue_bytes(int d_v) { return std::size_t(64) * (d_v + 8) * 4; }

// Bytes between the K/V stage tiles and the statistics: the FP8 conversion tiles (widening kernel), or the
// direct FP8 kernel's padding up to the epilogue buffer (d: row_elems(d, d_v) = d_v there), else none.
constexpr std::size_t conv_bytes(int d, bool fp8, int mt, int stages, bool direct) {
  if (!fp8) return 0;
  if (!direct) return 2 * std::size_t(tile_keys(mt)) * d * 2;
  const std::size_t tiles = std::size_t(stages) * 2 * tile_keys(mt) * d;
  return tiles < epilogue_bytes(d) ? epilogue_bytes(d) - tiles : 0;
}

// Shared memory of one CTA (bytes); the kernel lays it out the same way. d: row_elems(d, d_v).
constexpr std::size_t smem_bytes(int d, bool fp8, int mt, int stages, bool direct = false) {
  const std::size_t q = std::size_t(16 * mt) * d * 2;
  const std::size_t raw_tile = std::size_t(tile_keys(mt)) * d * (fp8 ? 1 : 2);
  const std::size_t conv = conv_bytes(d, fp8, mt, stages, direct);
  const std::size_t stats = 640 * 4;
  const std::size_t page_ring = std::size_t(2 * stages) * kTileKeys * 4;
  return q + std::size_t(stages) * 2 * raw_tile + conv + stats + page_ring;
}

}  // namespace attnserve::cuda::attn
