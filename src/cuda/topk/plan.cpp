// Top-k's plan (plan.h).
#include "cuda/topk/plan.h"

#include "attnserve/error.h"

namespace attnserve::cuda::topk_op {

Problem problem_of(const TopkArgs& a) {
  return Problem{.rows = a.scores.size(0), .width = a.scores.size(1), .k = a.topk};
}

const char* select_name(Select s) {
  switch (s) {
    case Select::automatic: return "automatic";
    case Select::global: return "global";
    case Select::sampled: return "sampled";
    case Select::sampled_v3: return "sampled_v3";
    case Select::sampled_v4: return "sampled_v4";
  }
  return "?";
}

Support can_implement(const Problem& p, const DeviceCaps&) {
  if (p.rows > int64_t(0x7fffffff))
    return unsupported("topk: 'scores' has ", p.rows, " rows, more than a CUDA grid holds");
  return {};
}

Plan make_plan(const Problem& p, const DeviceCaps& caps, const Tuning& tune) {
  const Support s = can_implement(p, caps);
  ATTNSERVE_CHECK(s.ok(), s.reason);
  Plan c;
  c.problem = p;
  // Long rows: 1024 threads stream the row; short rows: 256 threads, so several rows share an SM.
  c.kernel = p.width > kLongRow ? Kernel::rows_1024 : Kernel::rows_256;
  if (tune.threads == 256 || tune.threads == 1024)
    c.kernel = tune.threads == 1024 ? Kernel::rows_1024 : Kernel::rows_256;
  c.threads = c.kernel == Kernel::rows_1024 ? 1024 : 256;
  // The sampled kernels read the row once (the global one up to 5 times) but need their candidates'
  // shared memory; a device without it gets the global kernel.
  c.select = tune.select == Select::automatic ? kDefaultSampled : tune.select;
  if (c.select != Select::global) {
    c.smem = sampled_smem_bytes(c.threads);
    if (std::size_t(caps.smem_per_block) < c.smem) {
      c.select = Select::global;
      c.smem = 0;
    }
  }
  return c;
}

}  // namespace attnserve::cuda::topk_op
