// Internal: paged attention's CUDA entry points by plan, and the thin wrappers (plan + run) with
// optional overrides for benchmarks and tests that sweep split counts or pipeline depths. The public
// entry is cuda::paged_attention (cuda_ops.h).
#pragma once
#include "attnserve/ops.h"
#include "cuda/attention/plan.h"
#include "cuda/common/host_util.cuh"

namespace attnserve::cuda::attn {

// make_plan(problem_of(a), caps, tune): what the wrappers below run.
Plan select(const PagedAttentionArgs& a, const DeviceCaps& caps, const Tuning& tune = {});
void run(const PagedAttentionArgs& a, Workspace ws, Stream stream, const Tuning& tune);
// Runs a plan made for a's shapes (problem_of(a) == plan.problem), e.g. one a backend made per batch.
void run(const PagedAttentionArgs& a, const Plan& plan, Workspace ws, Stream stream);

using cuda::current_device_caps;  // host_util.cuh

}  // namespace attnserve::cuda::attn
