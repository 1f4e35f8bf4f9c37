// MLA's plan (plan.h): the selector of the portable kernel's block size, ring depth and splits, and
// of the Hopper kernel.
#include "cuda/mla/plan.h"

#include <algorithm>

#include "attnserve/error.h"
#include "cuda/mla/sm80/config.h"
#include "cuda/mla/sm90/config.h"

namespace attnserve::cuda::mla {
namespace {
constexpr const char* kOp = "mla_attention";
constexpr int kFp8RowBytes = 656;  // Fp8MlaLayout::kBytes

bool fp8_of(const Problem& p) { return p.kv_dtype == DType::u8; }

// The Hopper kernel runs the problem: built, sm_90 device, room for its 226 KB, not deterministic (its
// bits differ from the portable kernel's, whose row blocks the deterministic mode promises not to matter).
// bf16 or FP8-656 cache, d_v 512 / d_rope 64 and every mask and page size are can_implement's and
// supported by both (FP8-656: the same shared memory, raw tokens staged in the bf16 stage itself).
bool sm90_supports(const Problem& p, const DeviceCaps& caps, const Targets& t) {
  return t.sm90a && caps.arch == 90 && !p.deterministic && mla90::smem_bytes() <= caps.smem_per_block;
}
}  // namespace

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::sm80: return "sm80";
    case Kernel::sm90: return "sm90";
  }
  return "?";
}

Targets Targets::built() { return Targets{.sm90a = mla90::kBuilt}; }

Problem problem_of(const MlaAttentionArgs& a) {
  return Problem{.b = a.cache_seqlens.size(0),
                 .total_q = a.q_nope.size(0),
                 .h_q = int(a.q_nope.size(1)),
                 .d_v = int(a.q_nope.size(2)),
                 .d_rope = int(a.q_rope.size(2)),
                 .d_kv = int(a.kv_cache.size(3)),
                 .num_pages = a.kv_cache.size(0),
                 .page_size = a.kv_cache.size(1),
                 .max_pages = a.page_table.size(1),
                 .max_seqlen_q = a.max_seqlen_q,
                 .dtype = a.q_nope.dtype,
                 .kv_dtype = a.kv_cache.dtype,
                 .out_dtype = a.out.dtype,
                 .deterministic = a.deterministic};
}

Support can_implement(const Problem& p, const DeviceCaps& caps) {
  if (p.dtype != DType::bf16 || (p.kv_dtype != DType::bf16 && p.kv_dtype != DType::u8))
    return unsupported(kOp, ": CUDA supports bf16 q_nope, q_rope and a bf16 or FP8-656 (u8) kv_cache");
  const int row = p.kv_dtype == DType::u8 ? kFp8RowBytes : kDqk;
  if (p.d_v != kDv || p.d_rope != kDr || p.d_kv != row)
    return unsupported(kOp, ": CUDA supports d_v ", kDv, " and d_rope ", kDr, " (kv_cache rows of ", kDqk,
                       " bf16 values or ", kFp8RowBytes, " FP8-656 bytes)");
  if (p.out_dtype != DType::bf16) return unsupported(kOp, ": out must be bf16 on CUDA");
  if (p.num_pages * p.page_size >= (int64_t(1) << 31))
    return unsupported(kOp, ": pool too large for 32-bit slot indices");
  if (p.total_q > 0 && p.max_seqlen_q <= 0) return unsupported(kOp, ": max_seqlen_q must be > 0 on CUDA");
  if (smem_bytes(16, 2, fp8_of(p)) > caps.smem_per_block)
    return unsupported(kOp, ": needs ", smem_bytes(16, 2, fp8_of(p)),
                       " bytes of shared memory per block, the device allows ", caps.smem_per_block);
  return {};
}

Plan make_plan(const Problem& p, const DeviceCaps& caps, const MlaTuning& tune, const Targets& targets) {
  const Support s = can_implement(p, caps);
  ATTNSERVE_CHECK(s.ok(), s.reason);
  Plan c;
  c.problem = p;
  const bool fp8 = fp8_of(p);
  // The block covers every packed row of a request up to 64 (each K/V byte read once per 64 rows);
  // the batch's longest query picks it, which the bits do not depend on (sm80/kernel.cuh).
  const int64_t rows_max = int64_t(std::max(1, p.max_seqlen_q)) * p.h_q;
  c.rows_per_block = rows_max <= 16 ? 16 : rows_max <= 32 ? 32 : 64;
  if (RowsPerBlock::contains(tune.rows_per_block)) c.rows_per_block = tune.rows_per_block;
  // A100 (163 KB per block) cannot hold HB 64 with two tiles: fall back to HB 32 (same bits).
  while (c.rows_per_block > 16 && smem_bytes(c.rows_per_block, 2, fp8) > caps.smem_per_block) c.rows_per_block /= 2;
  const int hb = c.rows_per_block;
  c.m_blocks = ceil_div(rows_max, hb);
  // Deepest ring that fits one CTA per SM (H100/H200: HB 64 3 tiles, HB 32 4). HB 16 (memory bound)
  // takes the deepest ring that lets two CTAs share an SM (H200: 2 tiles; the kernel is capped at 128
  // registers for it): one 8-warp CTA per SM measured 1779 GB/s at b128 x h_q 16 (session 2).
  const std::size_t two_ctas = (caps.smem_per_block + 1024) / 2 - 1024;
  c.stages = 0;
  if (hb == 16)
    for (int s = 5; s >= 2 && !c.stages; --s)
      if (smem_bytes(hb, s, fp8) <= two_ctas) c.stages = s;
  for (int s = 5; s >= 2 && !c.stages; --s)
    if (smem_bytes(hb, s, fp8) <= caps.smem_per_block) c.stages = s;
  if (tune.stages >= 2 && tune.stages <= kMaxStages && smem_bytes(hb, tune.stages, fp8) <= caps.smem_per_block)
    c.stages = tune.stages;
  ATTNSERVE_CHECK(c.stages >= 2, kOp, ": needs ", smem_bytes(hb, 2, fp8),
                  " bytes of shared memory per block, the device allows ", caps.smem_per_block);
  c.smem = smem_bytes(hb, c.stages, fp8);
  const int64_t max_keys = p.max_pages * p.page_size;
  const int max_tiles = ceil_div(std::max<int64_t>(max_keys, 1), kTileKeys);
  if (p.deterministic) {
    c.split_keys = kDeterministicSplitKeys;
    c.num_splits = std::max(1, ceil_div(max_keys, kDeterministicSplitKeys));
  } else {
    const int ctas_per_sm = hb == 16 && c.smem <= two_ctas ? 2 : 1;
    // >= 4 key tiles per split
    c.num_splits = heuristic_splits(p.b * c.m_blocks, caps.num_sms * ctas_per_sm, max_tiles / 4);
    if (tune.num_splits > 0) c.num_splits = std::min(tune.num_splits, std::max(1, max_tiles));
  }
  // Hopper: 64-row blocks, 64-key tiles, its own split count (>= 2 tiles per split: one CTA per SM).
  // The auto choice wherever it runs: measured faster than the portable kernel at every head count on
  // the H200, also with 48 of 64 rows padding (b128 x 8K: h_q 16 296 against 491 us, h_q 32 294 against
  // 784, h_q 128 547 against 1936; bench/NOTES.md "Session 4"). The auto mode leaves the portable kernel
  // every call that pins a portable field (rows, stages).
  const bool pinned = RowsPerBlock::contains(tune.rows_per_block) || tune.stages != 0;
  const bool want90 = tune.sm90 > 0 || (tune.sm90 < 0 && !pinned);
  if (want90 && sm90_supports(p, caps, targets)) {
    const int tiles = ceil_div(std::max<int64_t>(max_keys, 1), mla90::kTileKeys);
    c.kernel = Kernel::sm90;
    c.rows_per_block = mla90::kRows;
    c.m_blocks = ceil_div(rows_max, mla90::kRows);
    c.stages = mla90::kStages;
    c.smem = mla90::smem_bytes();
    c.split_keys = 0;
    c.sm90_tma = mla90::tma_applies(p.page_size) &&
                 (tune.sm90_tma > 0 || (tune.sm90_tma < 0 && (fp8 || c.m_blocks >= mla90::kTmaMinRowBlocks)));
    c.num_splits = heuristic_splits(p.b * c.m_blocks, caps.num_sms, tiles / 2);
    if (tune.num_splits > 0) c.num_splits = std::min(tune.num_splits, std::max(1, tiles));
  }
  ATTNSERVE_CHECK(c.num_splits < 65536, kOp, ": too many splits");
  c.ws_bytes = workspace_layout(c, nullptr).bytes;
  return c;
}

WorkspaceLayout workspace_layout(const Plan& plan, void* base) {
  WorkspaceLayout l;
  if (plan.num_splits <= 1) return l;
  const std::size_t rows = std::size_t(plan.problem.total_q) * std::size_t(plan.problem.h_q);
  WorkspaceCarver carve(base);
  l.part_o = carve.take<float>(std::size_t(plan.num_splits) * rows * kDv);
  l.part_lse = carve.take<float>(std::size_t(plan.num_splits) * rows);
  l.bytes = carve.bytes();
  return l;
}

}  // namespace attnserve::cuda::mla
