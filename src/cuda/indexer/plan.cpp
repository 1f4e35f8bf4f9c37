// The lightning indexer's plan (plan.h).
#include "cuda/indexer/plan.h"

#include <algorithm>

#include "attnserve/error.h"
#include "cuda/indexer/sm80/config.h"

namespace attnserve::cuda::indexer {

Problem problem_of(const IndexerRaggedArgs& a) {
  return Problem{.paged = false,
                 .rows = a.q.size(0),
                 .heads = int(a.q.size(1)),
                 .num_cols = a.logits.size(1),
                 .q_scale = !a.q_scale.empty_view()};
}

Problem problem_of(const IndexerPagedArgs& a) {
  return Problem{.paged = true,
                 .rows = a.q.size(0),
                 .heads = int(a.q.size(1)),
                 .num_cols = a.logits.size(1),
                 .next_n = a.next_n,
                 .page_size = a.page_size,
                 .q_scale = !a.q_scale.empty_view()};
}

namespace {
Plan shape(const Problem& p) {
  Plan c;
  c.problem = p;
  c.kernel = p.paged ? (p.q_scale ? Kernel::paged_q_scale : Kernel::paged)
                     : (p.q_scale ? Kernel::ragged_q_scale : Kernel::ragged);
  c.rows_per_group = p.paged ? p.next_n : kRaggedGroupRows;
  c.num_groups = p.paged ? p.rows / std::max(1, p.next_n) : ceil_div64(p.rows, kRaggedGroupRows);
  c.col_blocks = ceil_div64(p.num_cols, kColsPerCta);
  c.key_vec16 = !p.paged || p.page_size % 4 == 0;  // pages of page_size * 132 bytes keep 16-byte alignment
  return c;
}
}  // namespace

Support can_implement(const Problem& p, const DeviceCaps&) {
  const char* op = p.paged ? "indexer_paged" : "indexer_ragged";
  if (p.paged && p.next_n < 1) return unsupported(op, ": next_n must be >= 1, got ", p.next_n);
  if (shape(p).ctas() > int64_t(0x7fffffff))
    return unsupported(op, ": ", p.rows, " rows x ", p.num_cols, " columns need more CTAs than a CUDA grid holds");
  return {};
}

Plan make_plan(const Problem& p, const DeviceCaps& caps) {
  const Support s = can_implement(p, caps);
  ATTNSERVE_CHECK(s.ok(), s.reason);
  return shape(p);
}

}  // namespace attnserve::cuda::indexer
