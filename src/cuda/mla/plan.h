// The plan of one MLA (absorbed) paged-attention call: rows per CTA, pipeline depth, split-KV count
// and workspace layout, made once from the call's shapes and the device (DeviceCaps).
// Lifecycle: can_implement -> make_plan -> workspace_size -> run(args, plan, ...) (launch.cu). Pure host
// code (g++ in every build), tested on the CPU (tests/cpu/test_op_plan_mla_sparse.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "attnserve/ops/attention.h"
#include "cuda/common/plan_util.h"

namespace attnserve::cuda::mla {

// What a plan depends on (never pointers or index values).
struct Problem {
  int64_t b = 0, total_q = 0;
  int h_q = 0;
  int d_v = 0, d_rope = 0, d_kv = 0;  // q_nope, q_rope and kv_cache row widths
  int64_t num_pages = 0, page_size = 0, max_pages = 0;
  int max_seqlen_q = 0;
  DType dtype = DType::bf16;  // q_nope and q_rope
  DType kv_dtype = DType::bf16;
  DType out_dtype = DType::bf16;
  bool deterministic = false;
  bool operator==(const Problem&) const = default;
};
Problem problem_of(const MlaAttentionArgs& a);

// sm80: portable mma.sync kernel (rows per CTA: Plan::rows_per_block); sm90: Hopper wgmma kernel
// (sm90/config.h: 64 rows per CTA, producer + two consumer warpgroups), sm_90a builds on sm_90 devices.
enum class Kernel : int { sm80 = 0, sm90 = 1 };
const char* kernel_name(Kernel k);

struct Plan {
  Problem problem;
  Kernel kernel = Kernel::sm80;
  int rows_per_block = 16;  // HB: packed rows (q_row * h_q + head) per CTA, 16 / 32 / 64 (sm90: 64)
  int m_blocks = 1;
  int stages = 2;
  int num_splits = 1;
  int split_keys = 0;
  bool sm90_tma = false;  // sm90: whole tiles by TMA boxes (sm90/producer_tma.cuh, producer_fp8.cuh), else cp.async
  std::size_t smem = 0;
  std::size_t ws_bytes = 0;  // = workspace_layout(*this, nullptr).bytes
};
using MlaConfig = Plan;  // the name tests and benchmarks knew

// Optional overrides (tests, benchmarks): 0 keeps the plan's choice.
struct MlaTuning {
  int num_splits = 0;
  int stages = 0;
  int rows_per_block = 0;  // 16, 32 or 64 forces HB (tests cover every block size on the same inputs)
  // Hopper kernel: -1 auto (sm_90 device, sm_90a build, not deterministic, no portable field pinned),
  // 0 never, 1 whenever it supports the call.
  int sm90 = -1;
  // Hopper kernel's producer: -1 auto (bf16 cache: TMA where it applies and the request's rows span
  // >= mla90::kTmaMinRowBlocks blocks; FP8-656 cache: TMA where it applies), 0 cp.async, 1 TMA boxes where they
  // apply (page_size % 64 == 0; any other call keeps cp.async).
  int sm90_tma = -1;
};

// Which arch leaves this build carries (the Hopper kernel needs the sm_90a build); tests pass their own.
struct Targets {
  bool sm90a = false;
  static Targets built();
};

Support can_implement(const Problem& p, const DeviceCaps& caps);
Plan make_plan(const Problem& p, const DeviceCaps& caps, const MlaTuning& tune = {},
               const Targets& targets = Targets::built());
inline std::size_t workspace_size(const Plan& plan) { return plan.ws_bytes; }

// The split-KV partial states (num_splits > 1); with a null base only the size is counted.
struct WorkspaceLayout {
  float* part_o = nullptr;    // [num_splits, total_q, h_q, 512] f32
  float* part_lse = nullptr;  // [num_splits, total_q, h_q] f32
  std::size_t bytes = 0;
};
WorkspaceLayout workspace_layout(const Plan& plan, void* base);

}  // namespace attnserve::cuda::mla
