// Internal: the MLA selector and launcher with optional overrides (benchmarks, tests).
#pragma once
#include <cstddef>

#include "attnserve/ops.h"

namespace attnserve::cuda::mla {

struct MlaConfig {
  int rows_per_block = 16;  // HB: packed rows (q_row * h_q + head) per CTA, 16 / 32 / 64
  int m_blocks = 1;
  int stages = 2;
  int num_splits = 1;
  int split_keys = 0;
  std::size_t smem = 0;
  std::size_t ws_bytes = 0;
};
struct MlaTuning {
  int num_splits = 0;
  int stages = 0;
  int rows_per_block = 0;  // 16, 32 or 64 forces HB (tests cover every block size on the same inputs)
};

MlaConfig select(const MlaAttentionArgs& a, const DeviceCaps& caps, const MlaTuning& tune);
void run(const MlaAttentionArgs& a, Workspace ws, Stream stream, const MlaTuning& tune);

}  // namespace attnserve::cuda::mla
