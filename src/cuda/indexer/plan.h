// The plan of one lightning-indexer call (ragged or paged): the kernel (portable sm80 or Hopper sm90), the
// query-row groups that share a CTA's keys and the column blocks, made once from the shapes. Pure host code
// (g++ in every build), tested on the CPU (tests/cpu/test_op_plan_mla_sparse.cpp,
// tests/cpu/test_op_plan_indexer_sm90.cpp). No workspace.
#pragma once
#include <cstdint>

#include "attnserve/ops/indexer.h"
#include "cuda/common/plan_util.h"

namespace attnserve::cuda::indexer {

struct Problem {
  bool paged = false;  // indexer_paged (keys through a page table) or indexer_ragged
  int64_t rows = 0;    // query rows
  int heads = 0;
  int64_t num_cols = 0;         // logits.size(1)
  int next_n = 1;               // paged: query rows per request
  int64_t page_size = 0;        // paged
  bool q_scale = false;         // q_scale given (a compile-time switch of the kernel)
  bool q_head_stride16 = true;  // q's head stride is a multiple of 16 bytes (the Hopper kernel's 16-byte copies)
  bool operator==(const Problem&) const = default;
};
Problem problem_of(const IndexerRaggedArgs& a);
Problem problem_of(const IndexerPagedArgs& a);

enum class Kernel : int {
  ragged = 0,  // portable (sm80/)
  ragged_q_scale = 1,
  paged = 2,
  paged_q_scale = 3,
  sm90_ragged = 4,  // Hopper FP8 wgmma (sm90/), 64 heads: the session-4 kernel (kernel.cuh), ragged only
  sm90_ragged_q_scale = 5,
  sm90ws_ragged = 6,  // Hopper, warp-specialized (sm90/ws_kernel.cuh): ragged, paged next_n 1..4
  sm90ws_ragged_q_scale = 7,
  sm90ws_paged = 8,
  sm90ws_paged_q_scale = 9,
};
const char* kernel_name(Kernel k);
inline bool is_sm90(Kernel k) { return int(k) >= int(Kernel::sm90_ragged); }
inline bool is_sm90_ws(Kernel k) { return int(k) >= int(Kernel::sm90ws_ragged); }

struct Plan {
  Problem problem;
  Kernel kernel = Kernel::ragged;
  int rows_per_group = 1;  // query rows sharing one CTA's key fragments (paged: next_n)
  int64_t num_groups = 0;
  int64_t col_blocks = 0;    // CTAs per group: cols_per_cta logit columns each
  int64_t cols_per_cta = 0;  // the kernel's kColsPerCta, or (ws kernel) sized to ~kWsWaves CTAs an SM
  bool key_vec16 = true;     // keys 16-byte aligned (paged: page_size % 4 == 0), else 4-byte loads
  int ws_mode = 0;           // ws kernel: wgmma / epilogue overlap, bits of sm90/config.h: kWsPingPong and
                             // kWsSplit (ragged and paged next_n 2, 4 with 16-byte keys), kWsBatched (all);
                             // or kWsQuadMode (four math warpgroups; the same forms as the overlap bits)
  int64_t ctas() const { return num_groups * col_blocks; }
};

// Which arch leaves this build carries (the Hopper kernel needs the sm_90a build); tests pass their own.
struct Targets {
  bool sm90a = false;
  static Targets built();
};

// The Hopper kernel: -1 auto (chosen on sm_90 when built and it supports the call, unless the environment sets
// ATTNSERVE_INDEXER_SM90=0), 0 never, 1 whenever it supports the call.
// Which Hopper kernel: paged calls always run the warp-specialized one; ragged calls the ws one too (sm90_ws -1
// auto or 1: with the batched epilogue it measured 815 TFLOP/s at causal 8K against the session-4 kernel's 585,
// 610e825) or the session-4 kernel (sm90_ws 0).
// ws_cols_per_cta > 0 forces the ws kernel's column span (rounded up to 64; tests: long spans wrap the
// ring on small problems; the bench: spans against the plan's).
// ws_mode >= 0 forces the ws kernel's overlap mode, its bits where the form has them (-1: the default,
// sm90/config.h kWsRaggedDefaultMode / kWsPagedDefaultMode, both with the batched epilogue, kWsBatched); with
// bit kWsQuad (8; the paged default) the four-math-warpgroup kernel, mode kWsQuadMode, where it exists
// (ragged, paged next_n 2 and 4 with 16-byte keys; elsewhere the bit is dropped).
struct Tuning {
  int sm90 = -1;
  int sm90_ws = -1;
  int64_t ws_cols_per_cta = 0;
  int ws_mode = -1;
};
// The process-wide Tuning the ops (indexer_ragged / indexer_paged) plan with: tests and benchmarks only
// (they force one kernel or the other); not thread-safe against concurrent calls.
Tuning& op_tuning();

// The Hopper kernel supports the problem on that device and build.
bool sm90_supports(const Problem& p, const DeviceCaps& caps, const Targets& t);
Support can_implement(const Problem& p, const DeviceCaps& caps);
Plan make_plan(const Problem& p, const DeviceCaps& caps, const Tuning& tune = {},
               const Targets& targets = Targets::built());

}  // namespace attnserve::cuda::indexer
