// Internal: the sparse MLA selector and launcher with optional overrides (tests force split counts,
// the benchmark sweeps them). Plain C++: included by GPU tests and benchmarks.
#pragma once
#include <cstddef>

#include "attnserve/ops/sparse_mla.h"

namespace attnserve::cuda::sparse_mla_sm80 {

struct SparseMlaConfig {
  int head_block = 64;  // heads per CTA: 16, 32 or 64
  int head_blocks = 1;
  int stages = 2;       // 32-key tiles in flight per CTA
  int ctas_per_sm = 1;  // what the shared memory (and the register cap of HB 16) allow
  int num_splits = 1;   // CTAs per (row, head block); > 1: partial states in the workspace + combine
  int split_tiles = 1;  // 32-key tiles per split
  std::size_t smem = 0;
  std::size_t ws_bytes = 0;
};

// 0 keeps the selector's choice. num_splits is clamped to the number of 32-key tiles of topk (and
// recomputed so that no split is structurally empty); stages must fit the device.
struct SparseMlaTuning {
  int num_splits = 0;
  int stages = 0;
};

// A pure function of shapes, the deterministic flag and the device caps: never of index values or
// topk_length (CUDA graphs replay one capture for every batch of the same shape).
SparseMlaConfig select(const SparseMlaArgs& a, const DeviceCaps& caps, const SparseMlaTuning& tune = {});
void run(const SparseMlaArgs& a, Workspace ws, Stream stream, const SparseMlaTuning& tune = {});

}  // namespace attnserve::cuda::sparse_mla_sm80
