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
    case Kernel::sm90ws_ragged: return "sm90ws_ragged";
    case Kernel::sm90ws_ragged_q_scale: return "sm90ws_ragged_q_scale";
    case Kernel::sm90ws_paged: return "sm90ws_paged";
    case Kernel::sm90ws_paged_q_scale: return "sm90ws_paged_q_scale";
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

// The ws kernel's column span: about kWsWaves CTAs an SM (few, long CTAs: one CTA an SM, its prologue paid
// once per span), at least kWsMinCols columns, a whole number of 64-key blocks.
void size_ws_columns(Plan& c, const DeviceCaps& caps, const Tuning& tune) {
  const int64_t cols = std::max<int64_t>(1, c.problem.num_cols);
  int64_t span = tune.ws_cols_per_cta;
  if (span <= 0) {
    const int64_t target = int64_t(indexer90::kWsWaves) * std::max(1, caps.num_sms);
    const int64_t blocks = std::clamp<int64_t>(ceil_div64(target, std::max<int64_t>(1, c.num_groups)), 1,
                                               ceil_div64(cols, indexer90::kWsMinCols));
    span = ceil_div64(cols, blocks);
  }
  c.cols_per_cta = ceil_div64(span, indexer90::kWsBlockKeys) * indexer90::kWsBlockKeys;
  c.col_blocks = ceil_div64(cols, c.cols_per_cta);
}

// sm90: 0 portable, 1 the session-4 Hopper kernel (ragged only), 2 the warp-specialized one.
Plan shape(const Problem& p, int sm90, const DeviceCaps& caps, const Tuning& tune) {
  Plan c;
  c.problem = p;
  if (sm90 == 2) {
    c.kernel = p.paged ? (p.q_scale ? Kernel::sm90ws_paged_q_scale : Kernel::sm90ws_paged)
                       : (p.q_scale ? Kernel::sm90ws_ragged_q_scale : Kernel::sm90ws_ragged);
    c.rows_per_group = p.paged ? p.next_n : indexer90::kWsRaggedRows;
    c.num_groups = p.paged ? p.rows / p.next_n : ceil_div64(p.rows, indexer90::kWsRaggedRows);
    size_ws_columns(c, caps, tune);
    // The overlap bits (ping-pong, split) where the launcher instantiates them; the batched epilogue everywhere;
    // four math warpgroups (the paged default) where instantiated, as kWsQuadMode only (the other bits dropped).
    const bool overlap = !p.paged || ((p.next_n == 2 || p.next_n == 4) && p.page_size % 4 == 0);
    const int available = overlap ? indexer90::kWsModes - 1 : indexer90::kWsBatched;
    const int default_mode = p.paged ? indexer90::kWsPagedDefaultMode : indexer90::kWsRaggedDefaultMode;
    const int mode = tune.ws_mode >= 0 ? tune.ws_mode : default_mode;
    c.ws_mode = (mode & indexer90::kWsQuad) != 0 && overlap ? indexer90::kWsQuadMode : mode & available;
  } else if (sm90 == 1) {
    c.kernel = p.q_scale ? Kernel::sm90_ragged_q_scale : Kernel::sm90_ragged;
    c.rows_per_group = indexer90::kRaggedRows;
    c.num_groups = ceil_div64(p.rows, indexer90::kRaggedRows);
    c.col_blocks = ceil_div64(p.num_cols, indexer90::kColsPerCta);
    c.cols_per_cta = indexer90::kColsPerCta;
  } else {
    c.kernel = p.paged ? (p.q_scale ? Kernel::paged_q_scale : Kernel::paged)
                       : (p.q_scale ? Kernel::ragged_q_scale : Kernel::ragged);
    c.rows_per_group = p.paged ? p.next_n : kRaggedGroupRows;
    c.num_groups = p.paged ? p.rows / std::max(1, p.next_n) : ceil_div64(p.rows, kRaggedGroupRows);
    c.col_blocks = ceil_div64(p.num_cols, kColsPerCta);
    c.cols_per_cta = kColsPerCta;
  }
  c.key_vec16 = !p.paged || p.page_size % 4 == 0;  // pages of page_size * 132 bytes keep 16-byte alignment
  return c;
}

// The Hopper form of a call: 2 the ws kernel (paged always; ragged unless sm90_ws 0), 1 the session-4 one.
int sm90_form(const Problem& p, const Tuning& tune) { return p.paged || tune.sm90_ws != 0 ? 2 : 1; }

bool sm90_supports_form(const Problem& p, const DeviceCaps& caps, const Targets& t, int form) {
  if (!t.sm90a || caps.arch != 90 || p.heads != indexer90::kHeads || !p.q_head_stride16) return false;
  if (p.paged && (p.next_n < 1 || p.next_n > indexer90::kMaxNextN)) return false;
  const int rows = p.paged ? p.next_n : indexer90::kWsRaggedRows;
  const std::size_t smem =
      form == 2 ? indexer90::ws_smem_bytes(rows) : indexer90::smem_bytes(indexer90::ragged_shape());
  // 32-bit page-index and column arithmetic in the key gather (columns below 2^31)
  return smem <= caps.smem_per_block && p.num_cols < (int64_t(1) << 31) &&
         shape(p, form, caps, {}).ctas() <= int64_t(0x7fffffff);
}

}  // namespace

bool sm90_supports(const Problem& p, const DeviceCaps& caps, const Targets& t) {
  return sm90_supports_form(p, caps, t, sm90_form(p, {}));  // the default form
}

Support can_implement(const Problem& p, const DeviceCaps& caps) {
  const char* op = p.paged ? "indexer_paged" : "indexer_ragged";
  if (p.paged && p.next_n < 1) return unsupported(op, ": next_n must be >= 1, got ", p.next_n);
  if (shape(p, 0, caps, {}).ctas() > int64_t(0x7fffffff))
    return unsupported(op, ": ", p.rows, " rows x ", p.num_cols, " columns need more CTAs than a CUDA grid holds");
  return {};
}

Plan make_plan(const Problem& p, const DeviceCaps& caps, const Tuning& tune, const Targets& targets) {
  const Support s = can_implement(p, caps);
  ATTNSERVE_CHECK(s.ok(), s.reason);
  // Auto: every page size (the ws kernel's 4-byte key copies, b128 x 32K page 1: 398 us against the portable
  // kernel's 729, H200, a120325; the session-4 kernel's took 1199).
  const bool auto_sm90 = tune.sm90 == -1 && sm90_env_allowed();
  const int form = sm90_form(p, tune);
  const bool sm90 = (tune.sm90 == 1 || auto_sm90) && sm90_supports_form(p, caps, targets, form);
  return shape(p, sm90 ? form : 0, caps, tune);
}

}  // namespace attnserve::cuda::indexer
