// Internal: sparse MLA's CUDA entry points by plan, and the thin wrappers (plan + run) with optional
// overrides (tests force split counts, the benchmark sweeps them). Plain C++: included by GPU tests
// and benchmarks.
#pragma once
#include "attnserve/ops/sparse_mla.h"
#include "cuda/sparse_mla/plan.h"

namespace attnserve::cuda::sparse_mla_op {

SparseMlaConfig select(const SparseMlaArgs& a, const DeviceCaps& caps, const SparseMlaTuning& tune = {});
void run(const SparseMlaArgs& a, Workspace ws, Stream stream, const SparseMlaTuning& tune = {});
// Runs a plan made for a's shapes (problem_of(a) == plan.problem), e.g. one a backend made per batch.
void run(const SparseMlaArgs& a, const Plan& plan, Workspace ws, Stream stream);

}  // namespace attnserve::cuda::sparse_mla_op
