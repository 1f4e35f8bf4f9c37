// Internal: MLA's CUDA entry points by plan, and the thin wrappers (plan + run) with optional
// overrides (benchmarks, tests). The public entry is cuda::mla_attention (cuda_ops.h).
#pragma once
#include "attnserve/ops.h"
#include "cuda/mla/plan.h"

namespace attnserve::cuda::mla {

MlaConfig select(const MlaAttentionArgs& a, const DeviceCaps& caps, const MlaTuning& tune);
void run(const MlaAttentionArgs& a, Workspace ws, Stream stream, const MlaTuning& tune);
// Runs a plan made for a's shapes (problem_of(a) == plan.problem), e.g. one a backend made per batch.
void run(const MlaAttentionArgs& a, const Plan& plan, Workspace ws, Stream stream);

}  // namespace attnserve::cuda::mla
