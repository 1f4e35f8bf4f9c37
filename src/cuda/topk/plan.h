// The plan of one top-k call: which kernel runs it (the algorithm and the threads per row) and its
// workspace, made once from the shapes. Pure host code (g++ in every build), tested on the CPU
// (tests/cpu/test_topk_plan.cpp, tests/cpu/test_op_plan_mla_sparse.cpp).
// The namespace is topk_op because cuda::topk is the entry point (cuda_ops.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include "attnserve/ops/topk.h"
#include "cuda/common/plan_util.h"

namespace attnserve::cuda::topk_op {

struct Problem {
  int64_t rows = 0;
  int64_t width = 0;  // scores.size(1)
  int k = 0;
  bool operator==(const Problem&) const = default;
};
Problem problem_of(const TopkArgs& a);

enum class Kernel : int {
  rows_256 = 0,   // one 256-thread CTA per row: short rows, several rows share an SM
  rows_1024 = 1,  // one 1024-thread CTA per row: long rows (> kLongRow positions), or whole rows (<= kWholeRow)
                  // that each get an SM of their own (rows <= SMs)
};
constexpr int64_t kLongRow = 8192;
constexpr int64_t kWholeRow = 4096;  // the sampled kernels load rows up to this length whole

// The algorithm (src/cuda/topk/sm80/). Every one is exact for any input.
enum class Select : int {
  automatic = 0,   // Tuning only: the plan's choice (kDefaultSampled when the shared memory fits, else global)
  global = 1,      // topk_radix_global.cuh: radix select streaming the row, up to 5 reads of it
  sampled = 2,     // topk_sampled.cuh (session 3, 7a32edf, measured): one read, candidates in shared memory
  sampled_v4 = 4,  // topk_sampled_v4.cuh: the same algorithm, fewer instructions per value and candidate, its
                   // shared-memory candidate loops on 16-byte quads (3 was v3, removed: v4 superseded it)
};
const char* select_name(Select s);
// The sampled kernel the plan picks when nothing is forced: v4, as fast as the removed v3 or faster on
// every ordinary shape measured (4d5707c: 8192 x 4K 205 vs 232 us, 128 x 16K 16.9 vs 17.6; 128 x 64K equal),
// 4 % slower on the adversarial ties16 rows (32.8 vs 31.6).
constexpr Select kDefaultSampled = Select::sampled_v4;

// Shared memory of the sampled kernels at `threads` per CTA (both versions: SampledSmem): per warp
// 528 candidates of 8 bytes, the 4096-bin histogram, per-warp scratch and the bin pick, 16-byte
// aligned. topk.cu static_asserts it against sizeof(SampledSmem).
constexpr std::size_t sampled_smem_bytes(int threads) {
  const std::size_t warps = std::size_t(threads / 32);
  return (warps * 528 * 8 + 4096 * 4 + warps * 3 * 4 + 12 + 15) / 16 * 16;
}

struct Plan {
  Problem problem;
  Kernel kernel = Kernel::rows_256;
  int threads = 256;
  Select select = Select::global;  // never automatic in a plan
  std::size_t smem = 0;            // dynamic shared memory per CTA (sampled kernels; 0 for global)
  std::size_t ws_bytes = 0;        // the radix select keeps everything in shared memory
};

// Optional override (benchmarks and tests only; the launcher maps its TopkPath onto it): a sampled
// kernel forced on a device without its shared memory still gets the global one.
struct Tuning {
  Select select = Select::automatic;
  int threads = 0;  // 256 or 1024 forces the CTA size; 0 keeps the plan's
};

Support can_implement(const Problem& p, const DeviceCaps& caps);
Plan make_plan(const Problem& p, const DeviceCaps& caps, const Tuning& tune = {});
inline std::size_t workspace_size(const Plan& plan) { return plan.ws_bytes; }

}  // namespace attnserve::cuda::topk_op
