// Paged attention's plan (plan.h): the selector of the portable and Hopper kernels, in host code.
#include "cuda/attention/plan.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "attnserve/error.h"
#include "cuda/attention/sm80/config.h"
#include "cuda/attention/sm90/config.h"
#include "cuda/attention/sm90/fp8_config.h"

namespace attnserve::cuda::attn {
namespace {

constexpr const char* kOp = "paged_attention";

// ATTNSERVE_ATTN_SM90=0 in the environment keeps the auto choice on the portable kernel (read once).
bool sm90_env_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("ATTNSERVE_ATTN_SM90");
    return !(v && v[0] == '0');
  }();
  return allowed;
}

// The Hopper kernel supports the problem: built, sm_90 device, bf16/f16 K/V of q's dtype, its head
// dims (and this variant instantiated for them), no descale, not deterministic (its row blocks
// differ from the portable MT = 1 order).
bool sm90_supports(const Problem& p, const DeviceCaps& caps, const Targets& t, int variant) {
  return t.sm90a && caps.arch == 90 && p.kv_dtype == p.dtype && attn90::HeadDims::contains(p.d, p.d_v) &&
         attn90::variant_built(p.d, p.d_v, variant) && !p.descale && !p.deterministic &&
         attn90::smem_bytes(p.d, p.d_v, variant) <= caps.smem_per_block &&
         // 32-bit byte-stride arithmetic in its K/V gather (sm90/tile_load.cuh); slots are 32-bit for
         // every kernel (can_implement)
         p.kv_token_stride * 2 <= INT32_MAX;
}

// The Hopper FP8 kernel: q, K and V fp8_e4m3 (sm90/fp8_config.h's head dims, d_v = d).
bool sm90_fp8_supports(const Problem& p, const DeviceCaps& caps, const Targets& t) {
  return t.sm90a && caps.arch == 90 && p.dtype == DType::fp8_e4m3 && p.kv_dtype == DType::fp8_e4m3 &&
         attn90::Fp8HeadDims::contains(p.d) && p.d_v == p.d && !p.deterministic &&
         attn90::fp8_smem_bytes(p.d) <= caps.smem_per_block && p.kv_token_stride <= INT32_MAX;
}

}  // namespace

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::sm80: return "sm80";
    case Kernel::sm90_coop: return "sm90_coop";
    case Kernel::sm90_warp_specialized: return "sm90_warp_specialized";
    case Kernel::sm90_ping_pong: return "sm90_ping_pong";
    case Kernel::sm90_ping_pong_eager: return "sm90_ping_pong_eager";
    case Kernel::sm90_fp8: return "sm90_fp8";
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

Problem problem_of(const PagedAttentionArgs& a) {
  return Problem{.b = a.cache_seqlens.size(0),
                 .total_q = a.q.size(0),
                 .h_q = int(a.q.size(1)),
                 .h_kv = int(a.k_cache.size(2)),
                 .d = int(a.q.size(2)),
                 .d_v = int(a.v_cache.size(3)),
                 .num_pages = a.k_cache.size(0),
                 .page_size = a.k_cache.size(1),
                 .max_pages = a.page_table.size(1),
                 .kv_token_stride = std::max(a.k_cache.stride(1), a.v_cache.stride(1)),
                 .max_seqlen_q = a.max_seqlen_q,
                 .dtype = a.q.dtype,
                 .out_dtype = a.out.dtype,
                 .kv_dtype = a.k_cache.dtype,
                 .descale = !a.q_descale.empty_view() || !a.k_descale.empty_view() || !a.v_descale.empty_view(),
                 .deterministic = a.deterministic};
}

Support can_implement(const Problem& p, const DeviceCaps& caps) {
  const bool fp8_q = p.dtype == DType::fp8_e4m3;
  if (p.dtype != DType::bf16 && p.dtype != DType::f16 && !fp8_q)
    return unsupported(kOp, ": q must be bf16, f16 or fp8_e4m3 on CUDA, got ", dtype_name(p.dtype));
  if (fp8_q && p.kv_dtype != DType::fp8_e4m3)
    return unsupported(kOp, ": an fp8_e4m3 q needs an fp8_e4m3 k_cache, got ", dtype_name(p.kv_dtype));
  if (p.kv_dtype != p.dtype && p.kv_dtype != DType::fp8_e4m3)
    return unsupported(kOp, ": k_cache must have q's dtype or fp8_e4m3 on CUDA, got ", dtype_name(p.kv_dtype));
  if (!HeadDims::contains(p.d, p.d_v)) {
    if (p.d == p.d_v) return unsupported(kOp, ": CUDA supports head dims ", HeadDims::str(), "; q has ", p.d);
    return unsupported(kOp, ": CUDA supports head dims (q/k or q/k/v) ", HeadDims::str(), "; q and k_cache have ", p.d,
                       ", v_cache ", p.d_v);
  }
  if (fp8_q ? (p.out_dtype != DType::bf16 && p.out_dtype != DType::f16) : p.out_dtype != p.dtype)
    return unsupported(kOp, fp8_q ? ": out must be bf16 or f16 for an fp8_e4m3 q" : ": out must have q's dtype");
  if (p.num_pages * p.page_size >= (int64_t(1) << 31))
    return unsupported(kOp, ": pool too large for 32-bit slot indices");
  if (p.total_q > 0 && p.max_seqlen_q <= 0)
    return unsupported(kOp, ": max_seqlen_q must be > 0 on CUDA (got ", p.max_seqlen_q, ")");
  if (p.h_kv <= 0 || p.h_q % p.h_kv != 0)
    return unsupported(kOp, ": h_q (", p.h_q, ") must be a multiple of h_kv (", p.h_kv, ")");
  const bool fp8 = p.kv_dtype == DType::fp8_e4m3;
  const int row = row_elems(p.d, p.d_v);
  if (smem_bytes(row, fp8, 1, 2) > caps.smem_per_block)
    return unsupported(kOp, ": head dim ", p.d, " needs ", smem_bytes(row, fp8, 1, 2),
                       " bytes of shared memory per block, the device allows ", caps.smem_per_block);
  return {};
}

Plan make_plan(const Problem& p, const DeviceCaps& caps, const Tuning& tune, const Targets& targets) {
  const Support s = can_implement(p, caps);
  ATTNSERVE_CHECK(s.ok(), s.reason);
  Plan c;
  c.problem = p;
  const int d = p.d;
  const int row = row_elems(p.d, p.d_v);  // the portable kernel's shared-memory row (elements)
  const bool fp8 = p.kv_dtype == DType::fp8_e4m3;
  const int h_kv = p.h_kv, group = p.h_q / std::max(1, h_kv);
  const int64_t rows_max = int64_t(std::max(1, p.max_seqlen_q)) * group;
  // Deterministic mode always uses MT = 1 (16-row blocks, 4 warps splitting each key tile), so a
  // row's summation order never depends on the other requests of the batch.
  c.mt = p.deterministic ? 1 : (rows_max <= 16 ? 1 : 4);
  if (!p.deterministic && (tune.mt == 1 || tune.mt == 4)) c.mt = tune.mt;
  c.m_blocks = ceil_div(rows_max, 16 * c.mt);
  // FP8 operands straight from the e4m3 bytes, where it is built (auto: on; session 8, 184302e, H200, same buffers,
  // GB/s of FP8 bytes, widening / direct: b64 x 8K page 16 2088-2093 / 3394-3406, page 64 2202 / 3710-3715, page 1
  // 2082-2086 / 3285-3286, b128 x 4K h 16/2 1970-1972 / 3128-3129, verify4 2046-2052 / 3205-3214).
  // Auto and 2: the direct kernel's lean key loop (kept only with ring counters, below; session 9, ea573db, H200,
  // same buffers, GB/s of FP8 bytes, direct / lean: b64 x 8K page 16 3429-3435 / 3633-3637, page 1 3301-3308 /
  // 3618-3621, page 64 3749-3750 / 3818-3827, b128 x 4K h 16/2 3151-3155 / 3317-3330, verify4 3243-3250 / 3575-3586).
  c.fp8_direct =
      tune.fp8_direct != 0 && fp8 && supports_fp8_direct(p.d, p.d_v, c.mt) ? (tune.fp8_direct == 1 ? 1 : 2) : 0;
  const bool direct = c.fp8_direct != 0;

  // Pipeline depth: the deepest that still lets two CTAs share an SM, else the deepest that fits.
  // Tuning::ctas = 3 (MT = 1, d <= 128): the deepest that lets three share one (2 stages at d 128).
  const std::size_t per_block = caps.smem_per_block;
  const std::size_t two_ctas = (per_block + 1024) / 2 - 1024;
  const std::size_t three_ctas = (per_block + 1024) / 3 - 1024;
  const bool want3 = tune.ctas == 3 && supports_three_ctas(row, c.mt);
  const int smax = max_stages_for(row, fp8);
  c.stages = 0;
  for (int s = smax; s >= 2 && !c.stages && want3; --s)
    if (smem_bytes(row, fp8, c.mt, s, direct) <= three_ctas) c.stages = s;
  for (int s = smax; s >= 2 && !c.stages; --s)
    if (smem_bytes(row, fp8, c.mt, s, direct) <= two_ctas) c.stages = s;
  for (int s = smax; s >= 2 && !c.stages; --s)
    if (smem_bytes(row, fp8, c.mt, s, direct) <= per_block) c.stages = s;
  if (tune.stages >= 2 && tune.stages <= kMaxStages) c.stages = tune.stages;
  ATTNSERVE_CHECK(c.stages >= 2, kOp, ": head dim ", d, " needs ", smem_bytes(row, fp8, c.mt, 2, direct),
                  " bytes of shared memory per block, the device allows ", per_block);
  c.smem = smem_bytes(row, fp8, c.mt, c.stages, direct);
  // Three CTAs per SM also need the 168-register kernel (launch: __launch_bounds__(128, 3)).
  c.ctas_per_sm = want3 && c.smem <= three_ctas ? 3 : c.smem <= two_ctas ? 2 : 1;
  const int ctas_per_sm = c.ctas_per_sm;

  const int64_t max_keys = p.max_pages * p.page_size;
  const int max_tiles = ceil_div(std::max<int64_t>(max_keys, 1), tile_keys(c.mt));
  if (p.deterministic) {
    c.split_keys =
        tune.split_keys > 0 ? int(ceil_div(tune.split_keys, kTileKeys)) * kTileKeys : kDeterministicSplitKeys;
    c.num_splits = std::max(1, ceil_div(max_keys, c.split_keys));
  } else {
    c.split_keys = 0;
    // >= 2 key tiles per split
    c.num_splits = heuristic_splits(p.b * h_kv * c.m_blocks, caps.num_sms * ctas_per_sm, max_tiles / 2);
    if (tune.num_splits > 0) c.num_splits = std::min(tune.num_splits, std::max(1, max_tiles));
  }
  c.page_shifts = tune.page_shifts == 0 ? 0 : 1;  // on unless a benchmark turns it off
  c.page_runs = tune.page_runs == 0 ? 0 : 1;
  // Lane page ids on unless turned off (0a0271b, H200, b64 x 8K page 1 / 8: 498 / 499 us against the per-row
  // path's 584 / 587; h 16/2 b128 x 4K page 1: 137 against 157; same bits).
  c.lane_pages = tune.lane_pages == 0 ? 0 : 1;
  // Ring counters on unless turned off (26d4201, H200, same buffers: b64 x 8K page 16 500.2-502.8 us against
  // 509.1-542.7, FP8 page 16 515-517 against 644-650, b256 x 2K 506-509 against 519-521, no shape slower; same
  // bits): 16-row tiles, and a page's bytes within 32 bits (the kernel's page products; the launcher checks the
  // strides of the views again).
  const int64_t page_bytes = p.page_size * p.kv_token_stride * (fp8 ? 1 : 2);
  c.ring_counters = tune.ring_counters != 0 && c.mt == 1 && page_bytes <= int64_t(0xffffffffu) ? 1 : 0;
  if (c.fp8_direct == 2 && !c.ring_counters) c.fp8_direct = 1;  // the lean loop is built on the ring counters
  ATTNSERVE_CHECK(int64_t(h_kv) * c.num_splits < 65536, kOp, ": h_kv * splits exceeds the grid limit");
  // Hopper: prefill/extend shapes (MT = 4, one split) in auto mode; any supported call when forced.
  // The auto mode leaves the portable kernel every call a Tuning field pins (tests, benchmarks).
  const bool tuned = tune.mt != 0 || tune.stages != 0 || tune.num_splits != 0 || tune.ctas != 0 ||
                     tune.page_runs >= 0 || tune.lane_pages >= 0 || tune.ring_counters >= 0 || tune.fp8_direct >= 0;
  // Auto picks kPingPong: measured fastest on the H200 (553 TFLOP/s at b1 x 8K against 525 for
  // kWarpSpecialized and 406 for kCoop in one run, bench/NOTES.md "Session 3"); Tuning::sm90 = 1..4
  // forces one.
  const int variant = tune.sm90 >= attn90::kCoop && tune.sm90 <= attn90::kPingPongEager ? tune.sm90 : attn90::kPingPong;
  const bool want90 =
      tune.sm90 > 0 || (tune.sm90 < 0 && sm90_env_allowed() && !tuned && c.mt == 4 && c.num_splits == 1);
  if (want90 && p.dtype == DType::fp8_e4m3) {
    if (sm90_fp8_supports(p, caps, targets)) {
      c.kernel = Kernel::sm90_fp8;
      c.fp8_direct = 0;  // the portable kernel's switch
      c.num_splits = 1;
      c.split_keys = 0;
      c.m_blocks = ceil_div(rows_max, attn90::kRows);
      c.smem = attn90::fp8_smem_bytes(d);
      c.ctas_per_sm = 1;
      // The FP8 kernel loads K and V by cp.async (K by TMA measured no faster: session 8, 184302e, b1 x 8K
      // TFLOP/s, gather / K by TMA: page 16 675.7 / 613.8, page 64 675.5 / 669.1; the code on branch s8-prefill).
    }
  } else if (want90 && sm90_supports(p, caps, targets, variant)) {
    c.kernel = Kernel(variant);
    c.num_splits = 1;
    c.split_keys = 0;
    c.m_blocks = ceil_div(rows_max, attn90::kRows);
    c.smem = attn90::smem_bytes(d, p.d_v, variant);
    c.ctas_per_sm = 1;
    // TMA K/V tiles where they measured faster (bench/NOTES.md "Session 6: Hopper prefill by TMA" and
    // session 7, 610e825 b1 x 8K: d 128 page 64 623 TFLOP/s against cp.async's 526, d 64 page 16 370 against
    // 325); on pages of 16 at d >= 128 its 2 KB boxes are slower than the cp.async gather (d 128 511 vs 564,
    // d 192/128 481 vs 547, d 256 437 vs 600). The whole GPU suite passed on both loaders (610e825).
    const bool tma_auto = (d == 128 && p.d_v == 128 && p.page_size % 64 == 0) || (d == 64 && p.d_v == 64);
    const bool tma_ok = attn90::is_ws(variant) && attn90::tma_applies(p.page_size);
    // Elsewhere at d 128 and 192/128 (pages of a multiple of 16, the ping-pong): K by TMA and V by the lean gather
    // (session 8, 184302e, "kvsplit" rows, TFLOP/s, gather / K by TMA: b1 x 8K causal 32/8 page 16 570.0 / 638.6
    // and 505.7 / 589.8 at the capped clock, extend b8 4K + 1K 566.5 / 622.8, b1 x 16K 64/8 569.5 / 611.0, page 32
    // 536.2 / 617.0, d 192/128 page 16 516.8 / 571.4; V by TMA within 1 % of it; at page 64 whole tiles by TMA
    // stay ahead, 621.2 / 607.7; d 256 equal, 587.6 / 589.5, so it keeps the gather).
    const bool ktma_auto = !tma_auto && variant == attn90::kPingPong && p.d_v == 128 && (d == 128 || d == 192) &&
                           attn90::split_built(d, p.d_v);
    const int kv_load = tune.sm90_tma < 0 && ktma_auto ? int(attn90::kKvKTma) : tune.sm90_tma;
    if (attn90::is_split_load(kv_load)) {
      // The split loaders (opt-in): only where their kernels are built, else the gather.
      const bool split = tma_ok && variant == attn90::kPingPong && attn90::split_built(d, p.d_v);
      c.sm90_kv_load = split ? kv_load : attn90::kKvGather;
      c.sm90_tma = split && kv_load != attn90::kKvLean;
    } else {
      c.sm90_tma = tma_ok && (tune.sm90_tma == attn90::kKvTma || (tune.sm90_tma < 0 && tma_auto));
      c.sm90_kv_load = c.sm90_tma ? attn90::kKvTma : attn90::kKvGather;
    }
  }
  c.ws_bytes = workspace_layout(c, nullptr).bytes;
  return c;
}

WorkspaceLayout workspace_layout(const Plan& plan, void* base) {
  WorkspaceLayout l;
  const bool widen_q = plan.kernel == Kernel::sm80 && plan.problem.dtype == DType::fp8_e4m3;
  if (plan.kernel != Kernel::sm80 || (plan.num_splits <= 1 && !widen_q)) return l;
  const std::size_t rows = std::size_t(plan.problem.total_q) * std::size_t(plan.problem.h_q);
  const std::size_t splits = std::size_t(plan.num_splits);
  WorkspaceCarver carve(base);
  if (plan.num_splits > 1) {
    l.part_o = carve.take<float>(splits * rows * std::size_t(plan.problem.d_v));
    l.part_lse = carve.take<float>(splits * rows);
  }
  if (widen_q) l.q_wide = carve.take<uint16_t>(rows * std::size_t(plan.problem.d));
  l.bytes = carve.bytes();
  return l;
}

}  // namespace attnserve::cuda::attn
