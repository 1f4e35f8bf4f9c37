// Internal: the op plans a backend makes for a batch (init_forward_metadata, capture) and reuses in
// every layer's forward (and every replay of a captured graph), and the workspace they need. Planning
// is host code on shapes (src/cuda/<op>/plan.h): no fake arguments. Nothing on the CPU.
#pragma once
#include <cstddef>
#include <vector>

#include "attnserve/backend/config.h"
#include "backend/config_check.h"
#include "cuda/attention/plan.h"
#include "cuda/mla/plan.h"
#include "cuda/sparse_mla/plan.h"
#include "cuda/topk/plan.h"

namespace attnserve::backend_detail {

// One batch's plans. A forward looks its call's problem up; a call the batch did not foresee (say, q
// in f16 over an fp8 cache, planned as bf16) gets a plan made then, once, and kept.
struct BatchPlans {
  std::vector<cuda::attn::Plan> mha;
  std::vector<cuda::mla::Plan> mla;
  std::vector<cuda::sparse_mla_op::Plan> sparse;
  std::size_t workspace_bytes() const;  // the most any of them needs

  const cuda::attn::Plan& get(const cuda::attn::Problem& p, const DeviceCaps& caps);
  const cuda::mla::Plan& get(const cuda::mla::Problem& p, const DeviceCaps& caps);
  const cuda::sparse_mla_op::Plan& get(const cuda::sparse_mla_op::Problem& p, const DeviceCaps& caps);
};

// ---- Dense: one attention call of b requests (page-table rows `width` pages wide), total_q query
// rows, at most max_q per request.
struct DenseCall {
  int64_t b = 0, total_q = 0, width = 0;
  int max_q = 0;
};
cuda::attn::Problem mha_problem(const DenseBackendConfig& c, const DenseCall& call);
cuda::mla::Problem mla_problem(const DenseBackendConfig& c, const DenseCall& call);
// The batch's calls: the global layers', and the local (chunked) layers' when the batch has them.
BatchPlans plan_dense_batch(const DenseBackendConfig& c, const DeviceCaps& caps, const DenseMetadata& m);
// Workspace for every batch the capacity allows up to max_bs requests: decode, verify / draft
// extend (draft_token_num rows per request) and extend batches of any shape (see op_plans.cpp).
std::size_t dense_workspace_for_capacity(const DenseBackendConfig& c, const DeviceCaps& caps, int max_bs);

// ---- Sparse: the attention call over `rows` rows with `impl`, and top-k over [rows, width] logits.
cuda::mla::Problem sparse_gather_problem(const SparseBackendConfig& c, int64_t rows);
cuda::sparse_mla_op::Problem sparse_mla_problem(const SparseBackendConfig& c, NsaImpl impl, int64_t rows);
BatchPlans plan_sparse_batch(const SparseBackendConfig& c, const DeviceCaps& caps, const NsaImpls& impls,
                             const SparseMetadata& m);
std::size_t sparse_workspace_for_capacity(const SparseBackendConfig& c, const DeviceCaps& caps, const NsaImpls& impls,
                                          int max_bs);

}  // namespace attnserve::backend_detail
