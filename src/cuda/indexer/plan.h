// The plan of one lightning-indexer call (ragged or paged): the kernel variant, the query-row groups
// that share a CTA's key fragments and the column blocks, made once from the shapes. Pure host code (g++
// in every build), tested on the CPU (tests/cpu/test_op_plan_mla_sparse.cpp). No workspace.
#pragma once
#include <cstdint>

#include "attnserve/ops/indexer.h"
#include "cuda/common/plan_util.h"

namespace attnserve::cuda::indexer {

struct Problem {
  bool paged = false;  // indexer_paged (keys through a page table) or indexer_ragged
  int64_t rows = 0;    // query rows
  int heads = 0;
  int64_t num_cols = 0;   // logits.size(1)
  int next_n = 1;         // paged: query rows per request
  int64_t page_size = 0;  // paged
  bool q_scale = false;   // q_scale given (a compile-time switch of the kernel)
  bool operator==(const Problem&) const = default;
};
Problem problem_of(const IndexerRaggedArgs& a);
Problem problem_of(const IndexerPagedArgs& a);

enum class Kernel : int { ragged = 0, ragged_q_scale = 1, paged = 2, paged_q_scale = 3 };

struct Plan {
  Problem problem;
  Kernel kernel = Kernel::ragged;
  int rows_per_group = 1;  // query rows sharing one CTA's key fragments (paged: next_n)
  int64_t num_groups = 0;
  int64_t col_blocks = 0;  // CTAs per group: kColsPerCta logit columns each
  bool key_vec16 = true;   // keys 16-byte aligned (paged: page_size % 4 == 0), else 4-byte loads
  int64_t ctas() const { return num_groups * col_blocks; }
};

Support can_implement(const Problem& p, const DeviceCaps& caps);
Plan make_plan(const Problem& p, const DeviceCaps& caps);

}  // namespace attnserve::cuda::indexer
