// Parameters of the portable paged-attention kernel (decode, verify, draft, extend, prefill).
// Plain struct passed by value; everything a CTA needs, with live lengths read from device memory.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace attnserve::cuda::attn {

struct Params {
  const char* q;                  // [total_q, h_q, D] T
  int64_t q_st, q_sh;             // element strides
  const char* k;                  // pool [num_pages, page_size, h_kv, D], bytes addressed
  const char* v;
  int64_t k_stok, k_sh, v_stok, v_sh;  // byte strides (token slot, head); slot = page * ps + j % ps
  const int* page_table;          // [b, max_pages]
  int64_t pt_st;
  const int* cache_seqlens;       // [b]
  const int* cu_seqlens_q;        // [b + 1]
  char* out;                      // [total_q, h_q, D] T
  int64_t o_st, o_sh;
  float* lse;                     // [total_q, h_q] or null
  int64_t lse_st, lse_sh;
  const float* k_descale;         // [b, h_kv] or null
  const float* v_descale;
  int64_t kds_sb, kds_sh, vds_sb, vds_sh;
  float* part_o;                  // [num_splits, total_q, h_q, D] f32 (num_splits > 1)
  float* part_lse;                // [num_splits, total_q, h_q]
  int total_q, h_q, h_kv, group, page_size, num_pages, max_pages;
  int num_splits;                 // grid.y = h_kv * num_splits
  int split_keys;                 // > 0: fixed split size in keys (deterministic); 0: even split
  int stages;                     // cp.async pipeline depth, 2..kMaxStages
  int page_shift;                 // log2(page_size) for shift addressing, or -1 (integer division)
  float scale_log2;               // softmax_scale * log2(e)
  float softcap;                  // 0: off
  int causal, window_left, window_right;
};

// What the host chose for one call (the selector in launch.cu).
struct Config {
  int mt = 1;          // m16 tiles of packed (q row, head) rows per CTA: 1 or 4
  int stages = 2;       // 2..kMaxStages
  int num_splits = 1;
  int split_keys = 0;
  int m_blocks = 1;
  int page_shifts = 1;
  std::size_t smem = 0;
  std::size_t ws_bytes = 0;
  int sm90 = 0;         // Hopper kernel running this call (src/cuda/attention/sm90/config.h Variant), 0: none
};

// Optional overrides (benchmarks and tests only): 0 keeps the selector's choice.
struct Tuning {
  int num_splits = 0;
  int stages = 0;
  int mt = 0;
  int page_shifts = -1;   // -1: default (on), 0 off (integer division), 1 on; power-of-two pages only
  // Hopper kernel: -1 auto (prefill/extend shapes on sm_90 when built, unless the environment sets
  // ATTNSERVE_ATTN_SM90=0), 0 never (portable kernel); 1 (kCoop), 2 (kWarpSpecialized) or
  // 3 (kPingPong): that Hopper kernel whenever it supports the call.
  int sm90 = -1;
};

constexpr int kThreads = 128;
constexpr int kTileKeys = 64;
// Keys per pipeline stage. Measured on the H200 (bench/NOTES.md): 32-key tiles with a deeper
// pipeline ran decode at 2.7 TB/s against 3.6 for 64-key tiles: a per-tile cost dominates.
constexpr int tile_keys(int /*mt*/) { return 64; }
constexpr int kMaxStages = 8;
constexpr int kDeterministicSplitKeys = 1024;  // fixed split size of the deterministic mode

// Shared memory of one CTA (bytes); the kernel lays it out the same way.
constexpr std::size_t smem_bytes(int d, bool fp8, int mt, int stages) {
  const std::size_t q = std::size_t(16 * mt) * d * 2;
  const std::size_t raw_tile = std::size_t(tile_keys(mt)) * d * (fp8 ? 1 : 2);
  const std::size_t conv = fp8 ? 2 * std::size_t(tile_keys(mt)) * d * 2 : 0;
  const std::size_t stats = 640 * 4;
  const std::size_t page_ring = std::size_t(2 * stages) * kTileKeys * 4;
  return q + std::size_t(stages) * 2 * raw_tile + conv + stats + page_ring;
}

template <typename T, int D, bool FP8, int MT>
void launch(const Params& p, const Config& c, int batch, cudaStream_t stream);

}  // namespace attnserve::cuda::attn
