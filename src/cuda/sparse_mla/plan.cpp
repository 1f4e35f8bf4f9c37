// Sparse MLA's plan (plan.h): the kernel (portable mma.sync or Hopper wgmma), head block, split-K count
// and ring depth.
#include "cuda/sparse_mla/plan.h"

#include <algorithm>

#include "attnserve/cache_formats.h"
#include "attnserve/error.h"
#include "cuda/mla/sm90/config.h"
#include "cuda/sparse_mla/sm80/config.h"
#include "cuda/sparse_mla/sm90/config.h"
#include "cuda/sparse_mla/sm90/small_config.h"

namespace attnserve::cuda::sparse_mla_op {
namespace {

constexpr const char* kOp = "sparse_mla";
// A split covers at least 4 tiles (128 keys): below that the partial state (2 KB per head) and the
// pipeline fill cost more than the split saves.
constexpr int kMinTilesPerSplit = 4;

// The smallest head block of the instantiations (HeadBlocks) that holds h_q, else the largest.
int head_block_of(int64_t h_q) { return h_q <= 16 ? 16 : (h_q <= 32 ? 32 : 64); }
static_assert(HeadBlocks::contains(16) && HeadBlocks::contains(32) && HeadBlocks::contains(64));

// The Hopper kernel can run the problem: built, sm_90 device, room for its shared memory. It takes
// blocks of 64 heads (fewer: zero rows of Q, computed and never stored).
bool sm90_can_run(const DeviceCaps& caps, const Targets& t) {
  return t.sm90a && caps.arch == 90 && sparse_mla90::smem_bytes() <= caps.smem_per_block;
}
// ... and is the auto choice: head counts that fill its 64-head blocks (h_q 16 / 32 keep the
// portable kernel's smaller head blocks).
bool sm90_auto(const Problem& p) { return p.h_q % sparse_mla90::kHeadBlock == 0; }

// The small-head FP8 kernel: FP8-656 cache, at most 32 heads (one CTA of 16 or 32 per row), the Hopper
// build on an sm_90 device (its e4m3 -> f16 conversions need sm_89+; only the sm_90a leaf is built).
constexpr int kSmallMaxHeads = 32;
bool small_can_run(const Problem& p, const DeviceCaps& caps, const Targets& t) {
  return t.sm90a && caps.arch == 90 && p.kv_dtype == DType::u8 && p.h_q <= kSmallMaxHeads &&
         sparse_mla90::small_smem_layout(32, 2).total <= caps.smem_per_block;
}

}  // namespace

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::sm80_bf16: return "sm80_bf16";
    case Kernel::sm80_fp8: return "sm80_fp8";
    case Kernel::sm90_bf16: return "sm90_bf16";
    case Kernel::sm90_fp8: return "sm90_fp8";
    case Kernel::sm90_fp8_small: return "sm90_fp8_small";
    case Kernel::sm90_bf16_dense: return "sm90_bf16_dense";
    case Kernel::sm90_fp8_dense: return "sm90_fp8_dense";
  }
  return "?";
}

Targets Targets::built() { return Targets{.sm90a = sparse_mla90::kBuilt}; }

Problem problem_of(const SparseMlaArgs& a) {
  return Problem{.rows = a.q.size(0),
                 .h_q = int(a.q.size(1)),
                 .d_qk = int(a.q.size(2)),
                 .topk = a.indices.size(1),
                 .dtype = a.q.dtype,
                 .kv_dtype = a.kv.dtype,
                 .deterministic = a.deterministic};
}

Support can_implement(const Problem& p, const DeviceCaps& caps) {
  if (p.dtype != DType::bf16) return unsupported(kOp, ": CUDA supports bf16 q, got ", dtype_name(p.dtype));
  if (p.d_qk != kDimQk) return unsupported(kOp, ": CUDA supports d_qk ", kDimQk, "; q has ", p.d_qk);
  if (p.kv_dtype != DType::bf16 && p.kv_dtype != DType::u8)
    return unsupported(kOp, ": CUDA supports a bf16 or an FP8-656 (u8) cache, got ", dtype_name(p.kv_dtype));
  const bool fp8 = p.kv_dtype == DType::u8;
  const int hb = head_block_of(p.h_q);
  if (smem_layout(hb, fp8, 2).total > caps.smem_per_block)
    return unsupported(kOp, ": the CUDA kernel needs ", smem_layout(hb, fp8, 2).total,
                       " bytes of shared memory per block (head block ", hb, ", ", fp8 ? "FP8-656" : "bf16",
                       " cache); the device offers ", caps.smem_per_block, " (sm_80 / sm_90 class GPUs are supported)");
  return {};
}

namespace {
// The Hopper kernel: blocks of 64 heads, 64-key tiles in a 2-stage ring, one CTA per SM (its 226 KB
// of shared memory); split-K when rows x head blocks underfill the SMs, as for the portable kernel.
Plan make_sm90_plan(Plan c, const DeviceCaps& caps, const SparseMlaTuning& tune) {
  const Problem& p = c.problem;
  c.kernel = p.kv_dtype == DType::u8 ? Kernel::sm90_fp8 : Kernel::sm90_bf16;
  c.head_block = sparse_mla90::kHeadBlock;
  c.head_blocks = int(ceil_div(std::max<int64_t>(p.h_q, 1), c.head_block));
  c.tile_keys = sparse_mla90::kTileKeys;
  c.stages = sparse_mla90::kStages;
  c.ctas_per_sm = 1;
  c.smem = sparse_mla90::smem_bytes();
  // The dense MLA kernel's schedule (same head block, tile and ring; its shared memory plus the key masks) wherever
  // h_q fills its 64-row blocks: the default since session 9 (860b36b, H200, `bench_sparse 's9-dense-ab'`, sm90_bf16
  // / sm90_bf16_dense TFLOP/s: prefill 4096 rows top-k 2048 s_kv 8K h_q 128 424.4 / 587.5, h_q 64 389.3 / 565.9,
  // s_kv 32K h_q 128 392.1 / 549.6, bf16 decode b128 h_q 128 180.0 / 464.9; FP8-656 decode sm90_fp8 / sm90_fp8_dense
  // b128 h_q 128 232.8 / 276.6, h_q 64 222.6 / 262.3, b32 h_q 128 195.4 / 228.8).
  const bool fp8 = p.kv_dtype == DType::u8;
  if ((fp8 ? tune.dense_schedule_fp8 : tune.dense_schedule) != 0 && p.h_q % mla90::kRows == 0 &&
      mla90::smem_bytes_with_key_mask() <= caps.smem_per_block) {
    static_assert(mla90::kRows == sparse_mla90::kHeadBlock && mla90::kTileKeys == sparse_mla90::kTileKeys &&
                  mla90::kStages == sparse_mla90::kStages);
    c.kernel = fp8 ? Kernel::sm90_fp8_dense : Kernel::sm90_bf16_dense;
    c.smem = mla90::smem_bytes_with_key_mask();
  }
  const int tiles = int(std::max<int64_t>(1, ceil_div(p.topk, c.tile_keys)));
  int splits = 1;
  if (!p.deterministic) splits = heuristic_splits(p.rows * c.head_blocks, caps.num_sms, tiles / 2);  // >= 128 keys
  if (tune.num_splits > 0) splits = std::min(tune.num_splits, tiles);
  c.split_tiles = int(ceil_div(tiles, splits));
  c.num_splits = int(ceil_div(tiles, c.split_tiles));
  ATTNSERVE_CHECK(c.num_splits < 65536, kOp, ": too many splits");
  c.ws_bytes = workspace_layout(c, nullptr).bytes;
  return c;
}
// The small-head FP8 kernel: 16 or 32 heads per CTA, 64-key tiles; split-K when rows underfill the SMs (a split covers
// >= 2 tiles). Deterministic: one split whatever the batch (bits independent of it).
Plan make_small_plan(Plan c, const DeviceCaps& caps, const SparseMlaTuning& tune) {
  const Problem& p = c.problem;
  c.kernel = Kernel::sm90_fp8_small;
  c.head_block = p.h_q <= 16 ? 16 : 32;
  c.head_blocks = int(ceil_div(std::max<int64_t>(p.h_q, 1), c.head_block));
  c.tile_keys = sparse_mla90::kSmallTileKeys;
  auto bytes = [&](int s) { return sparse_mla90::small_smem_layout(c.head_block, s).total; };
  // HB 16: two CTAs per SM on 2-stage rings (the kernel's 128-register cap; session 5 measured 2, 3 and 4
  // stages at one CTA per SM within 1 %); HB 32: one CTA, the deepest ring that fits.
  const std::size_t two_ctas = (caps.smem_per_block + 1024) / 2 - 1024;  // each CTA also reserves 1 KB
  const bool pair = c.head_block == 16 && bytes(2) <= two_ctas;
  c.stages = 2;
  if (!pair)
    for (int s = 3; s <= sparse_mla90::kSmallMaxStages; ++s)
      if (bytes(s) <= caps.smem_per_block) c.stages = s;
  if (tune.stages >= 2 && tune.stages <= sparse_mla90::kSmallMaxStages && bytes(tune.stages) <= caps.smem_per_block)
    c.stages = tune.stages;
  c.smem = bytes(c.stages);
  c.ctas_per_sm = pair && c.smem <= two_ctas ? 2 : 1;
  const int tiles = int(std::max<int64_t>(1, ceil_div(p.topk, c.tile_keys)));
  // Deterministic: a split count of the top-k length alone (bits independent of the batch): one per CTA
  // slot of an SM, so a full batch still runs two CTAs per SM.
  int splits = std::max(1, std::min(c.ctas_per_sm, tiles / 2));
  if (!p.deterministic) splits = heuristic_splits(p.rows * c.head_blocks, caps.num_sms * c.ctas_per_sm, tiles / 2);
  if (tune.num_splits > 0) splits = std::min(tune.num_splits, tiles);
  c.split_tiles = int(ceil_div(tiles, splits));
  c.num_splits = int(ceil_div(tiles, c.split_tiles));
  ATTNSERVE_CHECK(c.num_splits < 65536, kOp, ": too many splits");
  c.ws_bytes = workspace_layout(c, nullptr).bytes;
  return c;
}

}  // namespace

// Heads per CTA: the smallest of 16 / 32 / 64 that holds h_q (larger h_q: several blocks of 64).
// Unsplit (the grid fills the GPU, e.g. 128 rows x h_q 128 = 256 CTAs): as many tiles in flight as one
// CTA's shared memory allows. Split-K when rows x head blocks leave the GPU underfilled
// (heuristic_splits over SMs x CTAs per SM): each row's top-k list is cut into num_splits runs of
// split_tiles tiles; HB 16 then takes the deepest ring that lets two CTAs share an SM (H200: 2 stages,
// 106 KB), since one 8-warp CTA per SM is latency-bound on its gathers (128 rows x h_q 16: 175 us
// against a 41 us memory floor, NOTES.md) and splitting only helps when the extra CTAs run side by side.
Plan make_plan(const Problem& p, const DeviceCaps& caps, const SparseMlaTuning& tune, const Targets& targets) {
  const Support s = can_implement(p, caps);
  ATTNSERVE_CHECK(s.ok(), s.reason);
  Plan c;
  c.problem = p;
  const int64_t rows = p.rows, h_q = p.h_q;
  const bool fp8 = p.kv_dtype == DType::u8;
  const bool small = small_can_run(p, caps, targets) && (tune.small > 0 || (tune.small < 0 && tune.sm90 < 0));
  if (small) return make_small_plan(c, caps, tune);
  const bool sm90 = sm90_can_run(caps, targets) && (tune.sm90 > 0 || (tune.sm90 < 0 && sm90_auto(p)));
  if (sm90) return make_sm90_plan(c, caps, tune);
  c.kernel = fp8 ? Kernel::sm80_fp8 : Kernel::sm80_bf16;
  c.head_block = head_block_of(h_q);
  c.head_blocks = int(ceil_div(std::max<int64_t>(h_q, 1), c.head_block));
  const std::size_t per_block = caps.smem_per_block;
  const std::size_t two_ctas = (per_block + 1024) / 2 - 1024;  // each CTA also reserves 1 KB
  auto bytes = [&](int s) { return smem_layout(c.head_block, fp8, s).total; };
  int deep = 0, shared2 = 0;
  for (int s = 2; s <= kMaxStages; ++s) {
    if (bytes(s) <= per_block) deep = s;
    if (c.head_block == 16 && bytes(s) <= two_ctas) shared2 = s;  // HB 16 alone is capped at 128 registers
  }

  const int tiles = int(std::max<int64_t>(1, ceil_div(p.topk, kTileKeys)));
  int splits = 1;
  if (!p.deterministic) {  // deterministic: one CTA per row whatever the batch (bits independent of it)
    const int slots = caps.num_sms * (shared2 ? 2 : 1);
    splits = heuristic_splits(rows * c.head_blocks, slots, tiles / kMinTilesPerSplit);
  }
  if (tune.num_splits > 0) splits = std::min(tune.num_splits, tiles);
  c.split_tiles = int(ceil_div(tiles, splits));
  c.num_splits = int(ceil_div(tiles, c.split_tiles));  // no split left without tiles by the cut
  ATTNSERVE_CHECK(c.num_splits < 65536, kOp, ": too many splits");

  // HB 16 always takes the two-CTA ring (H200, session 2: 256 rows x h_q 16 unsplit ran 365 us on the deep
  // ring, 253 us on the two-CTA ring; 128 rows, 1 split: 188 vs 192 us).
  c.stages = shared2 ? shared2 : deep;
  if (tune.stages >= 2 && tune.stages <= kMaxStages && bytes(tune.stages) <= per_block) c.stages = tune.stages;
  c.smem = bytes(c.stages);
  c.ctas_per_sm = c.head_block == 16 && c.smem <= two_ctas ? 2 : 1;
  c.ws_bytes = workspace_layout(c, nullptr).bytes;
  return c;
}

WorkspaceLayout workspace_layout(const Plan& plan, void* base) {
  WorkspaceLayout l;
  const Problem& p = plan.problem;
  if (plan.num_splits <= 1 || p.rows == 0 || p.h_q == 0) return l;
  const std::size_t parts = std::size_t(plan.num_splits) * std::size_t(p.rows) * std::size_t(p.h_q);
  WorkspaceCarver carve(base);
  l.part_o = carve.take<float>(parts * kDimV);
  l.part_ml = carve.take<float>(parts * 2);
  l.bytes = carve.bytes();
  return l;
}

}  // namespace attnserve::cuda::sparse_mla_op
