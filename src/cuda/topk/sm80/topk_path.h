// Which top-k kernel the CUDA launcher uses (internal: benchmarks and tests, for A/B runs in one process).
#pragma once

namespace attnserve::cuda {

enum class TopkPath : int {
  automatic = 0,  // the plan's choice (topk_op::make_plan: kDefaultSampled if its shared memory fits)
  global = 1,     // topk_radix_global.cuh: up to 5 reads of the row from L2/HBM
  sampled = 2,    // topk_sampled.cuh (7a32edf): one read, candidates in shared memory (falls back to global itself)
  sampled_prefetch = 3,   // sampled, with an L2 prefetch of the row at the kernel's start (measured slower)
  sampled_match_any = 4,  // sampled, candidate histograms aggregated by __match_any_sync (A/B)
  sampled_v4 = 6,         // topk_sampled_v4.cuh: the fourth version, the default (topk_op::Select::sampled_v4)
};
void set_topk_path(TopkPath path);  // process-wide; not thread safe against concurrent launches
TopkPath topk_path();
// Benchmarks only: the sampled kernel returns after phase `stop` (1 row set up, 2 sample loaded, 3 threshold
// found, 4 candidates filtered, 5 selected; 0: whole), to time its phases. The output is not written.
void set_topk_debug_stop(int stop);
// Benchmarks only: 256 or 1024 threads per row whatever the plan says (0: the plan's choice).
void set_topk_threads(int threads);

}  // namespace attnserve::cuda
