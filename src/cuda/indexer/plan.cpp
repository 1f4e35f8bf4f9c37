// The lightning indexer's plan (plan.h).
#include "cuda/indexer/plan.h"

#include <algorithm>
#include <cstdlib>

#include "attnserve/error.h"
#include "cuda/indexer/sm80/config.h"
#include "cuda/indexer/sm90/config.h"

namespace attnserve::cuda::indexer {

Problem problem_of(const IndexerRaggedArgs& a) {
  return Problem{.paged = false,
                 .rows = a.q.size(0),
                 .heads = int(a.q.size(1)),
                 .num_cols = a.logits.size(1),
                 .q_scale = !a.q_scale.empty_view(),
                 .q_head_stride16 = a.q.stride(1) % 16 == 0};
}

Problem problem_of(const IndexerPagedArgs& a) {
  return Problem{.paged = true,
                 .rows = a.q.size(0),
                 .heads = int(a.q.size(1)),
                 .num_cols = a.logits.size(1),
                 .next_n = a.next_n,
                 .page_size = a.page_size,
                 .q_scale = !a.q_scale.empty_view(),
                 .q_head_stride16 = a.q.stride(1) % 16 == 0};
}

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::ragged: return "sm80_ragged";
    case Kernel::ragged_q_scale: return "sm80_ragged_q_scale";
    case Kernel::paged: return "sm80_paged";
    case Kernel::paged_q_scale: return "sm80_paged_q_scale";
    case Kernel::sm90_ragged: return "sm90_ragged";
    case Kernel::sm90_ragged_q_scale: return "sm90_ragged_q_scale";
    case Kernel::sm90_paged: return "sm90_paged";
    case Kernel::sm90_paged_q_scale: return "sm90_paged_q_scale";
  }
  return "?";
}

Targets Targets::built() {
#ifdef ATTNSERVE_HAVE_SM90
  return Targets{.sm90a = true};
#else
  return Targets{.sm90a = false};
#endif
}

Tuning& op_tuning() {
  static Tuning t;
  return t;
}

namespace {

// ATTNSERVE_INDEXER_SM90=0 in the environment keeps the auto choice on the portable kernel (read once).
bool sm90_env_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("ATTNSERVE_INDEXER_SM90");
    return !(v && v[0] == '0');
  }();
  return allowed;
}

Plan shape(const Problem& p, bool sm90) {
  Plan c;
  c.problem = p;
  if (sm90) {
    c.kernel = p.paged ? (p.q_scale ? Kernel::sm90_paged_q_scale : Kernel::sm90_paged)
                       : (p.q_scale ? Kernel::sm90_ragged_q_scale : Kernel::sm90_ragged);
    c.rows_per_group = p.paged ? p.next_n : indexer90::kRaggedRows;
    c.num_groups = p.paged ? p.rows / p.next_n : ceil_div64(p.rows, indexer90::kRaggedRows);
    c.col_blocks = ceil_div64(p.num_cols, indexer90::kColsPerCta);
  } else {
    c.kernel = p.paged ? (p.q_scale ? Kernel::paged_q_scale : Kernel::paged)
                       : (p.q_scale ? Kernel::ragged_q_scale : Kernel::ragged);
    c.rows_per_group = p.paged ? p.next_n : kRaggedGroupRows;
    c.num_groups = p.paged ? p.rows / std::max(1, p.next_n) : ceil_div64(p.rows, kRaggedGroupRows);
    c.col_blocks = ceil_div64(p.num_cols, kColsPerCta);
  }
  c.key_vec16 = !p.paged || p.page_size % 4 == 0;  // pages of page_size * 132 bytes keep 16-byte alignment
  return c;
}

}  // namespace

bool sm90_supports(const Problem& p, const DeviceCaps& caps, const Targets& t) {
  if (!t.sm90a || caps.arch != 90 || p.heads != indexer90::kHeads || !p.q_head_stride16) return false;
  if (p.paged && (p.next_n < 1 || p.next_n > indexer90::kMaxNextN)) return false;
  const indexer90::Shape s = p.paged ? indexer90::paged_shape(p.next_n) : indexer90::ragged_shape();
  // 32-bit page-index arithmetic in its key gather (columns below 2^31)
  return indexer90::smem_bytes(s) <= caps.smem_per_block && p.num_cols < (int64_t(1) << 31) &&
         shape(p, true).ctas() <= int64_t(0x7fffffff);
}

Support can_implement(const Problem& p, const DeviceCaps&) {
  const char* op = p.paged ? "indexer_paged" : "indexer_ragged";
  if (p.paged && p.next_n < 1) return unsupported(op, ": next_n must be >= 1, got ", p.next_n);
  if (shape(p, false).ctas() > int64_t(0x7fffffff))
    return unsupported(op, ": ", p.rows, " rows x ", p.num_cols, " columns need more CTAs than a CUDA grid holds");
  return {};
}

Plan make_plan(const Problem& p, const DeviceCaps& caps, const Tuning& tune, const Targets& targets) {
  const Support s = can_implement(p, caps);
  ATTNSERVE_CHECK(s.ok(), s.reason);
  // Auto: not for pages that break 16-byte alignment (page_size % 4 != 0): the Hopper kernel's 4-byte key
  // copies lost to the portable kernel there (b128 x 32K page 1: 1195 us against 730, H200, 26f91f4).
  const bool auto_sm90 = tune.sm90 == -1 && sm90_env_allowed() && (!p.paged || p.page_size % 4 == 0);
  return shape(p, (tune.sm90 == 1 || auto_sm90) && sm90_supports(p, caps, targets));
}

}  // namespace attnserve::cuda::indexer
