// The plan of one top-k call: which kernel runs it (threads per row) and its workspace, made once from
// the shapes. Pure host code (g++ in every build), tested on the CPU (tests/cpu/test_op_plan_topk.cpp).
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
  rows_1024 = 1,  // one 1024-thread CTA per row: long rows (> kLongRow positions)
};
constexpr int64_t kLongRow = 8192;

struct Plan {
  Problem problem;
  Kernel kernel = Kernel::rows_256;
  int threads = 256;
  std::size_t ws_bytes = 0;  // the radix select keeps everything in shared memory
};

Support can_implement(const Problem& p, const DeviceCaps& caps);
Plan make_plan(const Problem& p, const DeviceCaps& caps);
inline std::size_t workspace_size(const Plan& plan) { return plan.ws_bytes; }

}  // namespace attnserve::cuda::topk_op
