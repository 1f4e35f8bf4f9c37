// Which top-k kernel the CUDA launcher uses (internal: benchmarks and tests, for A/B runs in one process).
#pragma once

namespace attnserve::cuda {

enum class TopkPath : int {
  automatic = 0,  // the plan's choice (topk_op::make_plan: the sampled kernel if its shared memory fits)
  global = 1,     // topk_radix_global.cuh: up to 5 reads of the row from L2/HBM
  sampled = 2,    // topk_sampled.cuh: one read, candidates in shared memory (falls back to global itself)
};
void set_topk_path(TopkPath path);  // process-wide; not thread safe against concurrent launches
TopkPath topk_path();
// Benchmarks only: the sampled kernel returns after phase `stop` (1 row set up, 2 sample loaded, 3 threshold
// found, 4 candidates filtered (and gathered into CTA 0 of a cluster), 5 selected; 0: whole), to time its
// phases. The output is not written.
void set_topk_debug_stop(int stop);
// Benchmarks only: 256 or 1024 threads per row whatever the plan says (0: the plan's choice).
void set_topk_threads(int threads);
// Benchmarks and tests: 1, 2, 4 or 8 CTAs per row (a cluster; sampled kernel on sm_90, else 1), whatever
// the plan says (0: the plan's choice).
void set_topk_cluster(int ctas);
// Benchmarks only: the sampled kernel stores each output directly instead of staging them (A/B).
void set_topk_direct_emit(bool direct);
// Benchmarks and tests: the sampled kernel's emit forced (topk_op::Emit: recount, or kept_masks, the count
// pass's selection masks kept in a register, the plan's default) or the plan's (automatic), for A/Bs.
// kept_masks_lean: the kept masks with session 7's lean count and stores (topk_op::Emit::kept_masks_lean, the plan's).
enum class TopkEmit : int { automatic = 0, recount = 1, kept_masks = 2, kept_masks_lean = 3 };
void set_topk_emit(TopkEmit emit);
// Benchmarks and tests, each -1 the plan's (on), 0 forced off, 1 forced on (a bool passes 0 / 1): the sampled
// kernel's long rows prefetch their filter's steps into L2 (topk_op::Tuning::l2_prefetch), its lean key-digit
// histograms (Tuning::lean_select), the sampled regime's candidates ranked first by a digit relative to the
// sample's threshold (Tuning::offset_digit).
void set_topk_l2_prefetch(int mode);
void set_topk_lean_select(int mode);
void set_topk_offset_digit(int mode);
// Benchmarks and tests, -1 the plan's (off), 0 off, 1 on (session 8, unmeasured): the sampled kernel's streaming
// filter (topk_op::Tuning::stream; 1024 threads, kept-masks emits) and, with it and the offset digit, the offset
// digit's histogram counted in the filter (Tuning::fused_count).
void set_topk_stream(int mode);
void set_topk_fused_count(int mode);
// Benchmarks and tests, -1 the plan's (off), 0 off, 1 on (session 8, s8-topk2, unmeasured): the k-th offset bin
// resolved by ranking its entries (topk_op::Tuning::bin_list; 1024 threads, offset digit, kept-masks emits).
void set_topk_bin_list(int mode);

}  // namespace attnserve::cuda
