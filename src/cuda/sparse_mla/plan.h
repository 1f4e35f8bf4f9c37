// The plan of one sparse MLA call: heads per CTA, pipeline depth, split-K count over the top-k list
// and workspace layout, made once from the call's shapes and the device (DeviceCaps): a pure function
// of shapes, the deterministic flag and the caps, never of index values or topk_length (CUDA graphs
// replay one capture for every batch of the same shape).
// Lifecycle: can_implement -> make_plan -> workspace_size -> run(args, plan, ...) (launch.cu). Pure host
// code (g++ in every build), tested on the CPU (tests/cpu/test_op_plan_sparse.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "attnserve/ops/sparse_mla.h"
#include "cuda/common/plan_util.h"

namespace attnserve::cuda::sparse_mla_op {

struct Problem {
  int64_t rows = 0;
  int h_q = 0;
  int d_qk = 0;                  // q's head dim
  int64_t topk = 0;              // indices.size(1)
  DType dtype = DType::bf16;     // q
  DType kv_dtype = DType::bf16;  // bf16 rows of 576, or u8 tokens of the FP8-656 format
  bool deterministic = false;
  bool operator==(const Problem&) const = default;
};
Problem problem_of(const SparseMlaArgs& a);

enum class Kernel : int {
  sm80_bf16 = 0,        // portable mma.sync kernel over the bf16 cache
  sm80_fp8 = 1,         // the same over the FP8-656 cache (dequantized per tile in shared memory)
  sm90_bf16 = 2,        // Hopper wgmma kernel (sm90/kernel.cuh), 64 heads per CTA, over the bf16 cache
  sm90_fp8 = 3,         // the same over the FP8-656 cache (dequantized by its producer warpgroup)
  sm90_fp8_small = 4,   // small head counts over the FP8-656 cache (sm90/small_heads.cuh): 16 or 32 heads per
                        // CTA, mma.sync on fragments built from the raw FP8 bytes, a cp.async ring of 64-key tiles
  sm90_bf16_dense = 5,  // the bf16 cache on the dense MLA decode kernel's schedule (sm90/dense_schedule.cuh: producer
                        // WG + softmax / O[:, 0:256) WG + O[:, 256:512) WG), 64 heads per CTA (dense_schedule)
  sm90_fp8_dense = 6,   // the same over the FP8-656 cache (dequantized in the stage; dense_schedule_fp8)
};
const char* kernel_name(Kernel k);
inline bool is_sm90(Kernel k) {
  return k == Kernel::sm90_bf16 || k == Kernel::sm90_fp8 || k == Kernel::sm90_fp8_small ||
         k == Kernel::sm90_bf16_dense || k == Kernel::sm90_fp8_dense;
}

struct Plan {
  Problem problem;
  Kernel kernel = Kernel::sm80_bf16;
  int head_block = 64;  // heads per CTA: 16, 32 or 64
  int head_blocks = 1;
  int tile_keys = 32;   // keys per pipeline stage: 32 (sm80) or 64 (sm90)
  int stages = 2;       // tiles in flight per CTA
  int ctas_per_sm = 1;  // what the shared memory (and the register cap of HB 16) allow
  int num_splits = 1;   // CTAs per (row, head block); > 1: partial states in the workspace + combine
  int split_tiles = 1;  // tiles (of tile_keys) per split
  std::size_t smem = 0;
  std::size_t ws_bytes = 0;  // = workspace_layout(*this, nullptr).bytes
};
using SparseMlaConfig = Plan;  // the name tests and benchmarks knew

// 0 keeps the plan's choice. num_splits is clamped to the number of tiles of topk (and recomputed
// so that no split is structurally empty); stages must fit the device (sm80 kernels only).
// sm90: -1 auto, 0 never (portable kernel), 1 the Hopper kernel wherever it can run the call.
// small: the small-head FP8 kernel (sm90_fp8_small): -1 auto (FP8 cache, h_q <= 32, sm90 auto), 0 never,
// 1 wherever it can run (FP8 cache, h_q <= 32, sm_90 device and build); it wins over `sm90`.
// dense_schedule: -1 (auto) and 1 run the Hopper plan of a bf16 cache with h_q % 64 == 0 on the dense MLA kernel's
// schedule (sm90_bf16_dense, measured faster: plan.cpp) instead of sm90_bf16; 0 never. dense_schedule_fp8: the same
// for an FP8-656 cache (sm90_fp8_dense instead of sm90_fp8).
struct SparseMlaTuning {
  int num_splits = 0;
  int stages = 0;
  int sm90 = -1;
  int small = -1;
  int dense_schedule = -1;
  int dense_schedule_fp8 = -1;
};

// Which arch leaves this build carries (the Hopper kernels need the sm_90a build); tests pass their own.
struct Targets {
  bool sm90a = false;
  static Targets built();
};

Support can_implement(const Problem& p, const DeviceCaps& caps);
Plan make_plan(const Problem& p, const DeviceCaps& caps, const SparseMlaTuning& tune = {},
               const Targets& targets = Targets::built());
inline std::size_t workspace_size(const Plan& plan) { return plan.ws_bytes; }

// The split-K partial states (num_splits > 1); with a null base only the size is counted.
struct WorkspaceLayout {
  float* part_o = nullptr;   // [num_splits, rows, h_q, 512] f32
  float* part_ml = nullptr;  // [num_splits, rows, h_q, 2] f32: (m, l) pairs (the kernels' float2)
  std::size_t bytes = 0;
};
WorkspaceLayout workspace_layout(const Plan& plan, void* base);

}  // namespace attnserve::cuda::sparse_mla_op
