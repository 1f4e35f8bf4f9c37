// Paged attention's plan (src/cuda/attention/plan.h) on fabricated devices: every kernel choice, the
// tiles, splits and workspace layout, and can_implement's reasons. Host code: runs in every build.
#include <gtest/gtest.h>

#include "attnserve/error.h"
#include "cuda/attention/plan.h"
#include "cuda/attention/sm80/config.h"
#include "cuda/attention/sm90/config.h"

namespace attnserve {
namespace {

using cuda::attn::Kernel;
using cuda::attn::Plan;
using cuda::attn::Problem;
using cuda::attn::Targets;

const DeviceCaps kH200{.num_sms = 132, .smem_per_block = 227 * 1024, .arch = 90};
const DeviceCaps kA100{.num_sms = 108, .smem_per_block = 163 * 1024, .arch = 80};
const DeviceCaps kSmallSm90{.num_sms = 32, .smem_per_block = 227 * 1024, .arch = 90};
const Targets kWithSm90{.sm90a = true};
const Targets kNoSm90{.sm90a = false};

// b requests of q_len query rows over ctx keys, h_q 32 / h_kv 8 (group 4), pages of 16.
Problem problem(int64_t b, int q_len, int64_t ctx, int d = 128, DType kv = DType::bf16, int d_v = 0) {
  return Problem{.b = b,
                 .total_q = b * q_len,
                 .h_q = 32,
                 .h_kv = 8,
                 .d = d,
                 .d_v = d_v > 0 ? d_v : d,
                 .num_pages = 1 << 16,
                 .page_size = 16,
                 .max_pages = (ctx + 15) / 16,
                 .kv_token_stride = 8 * 128,
                 .max_seqlen_q = q_len,
                 .dtype = DType::bf16,
                 .out_dtype = DType::bf16,
                 .kv_dtype = kv,
                 .descale = kv == DType::fp8_e4m3};
}

TEST(OpPlanAttention, DecodeLargeBatchOneSplitNoWorkspace) {
  const Plan p = cuda::attn::make_plan(problem(64, 1, 8192), kH200, {}, kWithSm90);
  EXPECT_EQ(p.kernel, Kernel::sm80);  // decode shapes stay on the portable kernel
  EXPECT_EQ(p.mt, 1);                 // 4 packed rows <= 16
  EXPECT_EQ(p.m_blocks, 1);
  EXPECT_EQ(p.num_splits, 1);  // 64 x 8 CTAs fill 132 SMs x 2
  EXPECT_EQ(p.stages, 3);      // d 128 bf16: 3 stages fit two CTAs per SM
  EXPECT_EQ(p.smem, cuda::attn::smem_bytes(128, false, 1, 3));
  EXPECT_EQ(workspace_size(p), 0u);
}

TEST(OpPlanAttention, DecodeSmallBatchSplitsWithItsWorkspaceLayout) {
  const Plan p = cuda::attn::make_plan(problem(1, 1, 8192), kH200, {}, kWithSm90);
  EXPECT_EQ(p.kernel, Kernel::sm80);
  ASSERT_GT(p.num_splits, 1);
  EXPECT_LE(p.num_splits, 8192 / 64 / 2);  // >= 2 key tiles per split
  const std::size_t rows = 1 * 32, part_o = std::size_t(p.num_splits) * rows * 128 * 4;
  const std::size_t part_lse = std::size_t(p.num_splits) * rows * 4;
  EXPECT_EQ(workspace_size(p), cuda::align_up(part_o) + cuda::align_up(part_lse));
  // The layout that counted the size hands out the same regions from real memory.
  alignas(256) static char base[1];
  const auto w = cuda::attn::workspace_layout(p, base);
  EXPECT_EQ(reinterpret_cast<char*>(w.part_o), base);
  EXPECT_EQ(reinterpret_cast<char*>(w.part_lse), base + cuda::align_up(part_o));
  EXPECT_EQ(w.bytes, workspace_size(p));
  EXPECT_EQ(cuda::attn::workspace_layout(p, nullptr).part_o, nullptr);
}

TEST(OpPlanAttention, PrefillPicksHopperOnlyWhereBuiltAndOnSm90) {
  const Plan h = cuda::attn::make_plan(problem(1, 8192, 8192), kH200, {}, kWithSm90);
  EXPECT_EQ(h.kernel, Kernel::sm90_ping_pong);  // the fastest measured (bench/NOTES.md "Session 3")
  EXPECT_EQ(h.sm90(), 3);
  EXPECT_EQ(h.m_blocks, 8192 * 4 / 128);
  EXPECT_EQ(h.num_splits, 1);
  EXPECT_EQ(workspace_size(h), 0u);

  const Plan not_built = cuda::attn::make_plan(problem(1, 8192, 8192), kH200, {}, kNoSm90);
  EXPECT_EQ(not_built.kernel, Kernel::sm80);
  EXPECT_EQ(not_built.mt, 4);
  EXPECT_EQ(not_built.m_blocks, 8192 * 4 / 64);

  const Plan a100 = cuda::attn::make_plan(problem(1, 8192, 8192), kA100, {}, kWithSm90);
  EXPECT_EQ(a100.kernel, Kernel::sm80);
  EXPECT_EQ(a100.mt, 4);
}

TEST(OpPlanAttention, HopperNeedsItsHeadDimsDtypesAndNoDescale) {
  EXPECT_EQ(cuda::attn::make_plan(problem(1, 4096, 4096, 64), kH200, {}, kWithSm90).kernel, Kernel::sm90_ping_pong);
  for (auto [d, d_v] : {std::pair{96, 96}, {192, 192}, {192, 128}, {256, 256}}) {
    const Plan p = cuda::attn::make_plan(problem(1, 4096, 4096, d, DType::bf16, d_v), kH200, {}, kWithSm90);
    EXPECT_EQ(p.kernel, Kernel::sm90_ping_pong) << d << "/" << d_v;
    EXPECT_EQ(p.smem, cuda::attn90::smem_bytes(d, d_v, cuda::attn90::kPingPong));
    EXPECT_LE(p.smem, kH200.smem_per_block) << d << "/" << d_v;
    // The A/B baseline is instantiated at d 64 and 128 only: forcing it elsewhere keeps the portable kernel.
    EXPECT_EQ(cuda::attn::make_plan(problem(1, 4096, 4096, d, DType::bf16, d_v), kH200, {.sm90 = 4}, kWithSm90).kernel,
              Kernel::sm80);
  }
  // Every variant but the A/B baseline fits the H200's shared memory at every head dim.
  for (int variant : {1, 2, 3})
    for (auto [d, d_v] : {std::pair{64, 64}, {96, 96}, {128, 128}, {192, 192}, {192, 128}, {256, 256}})
      EXPECT_EQ(cuda::attn::make_plan(problem(1, 4096, 4096, d, DType::bf16, d_v), kH200, {.sm90 = variant}, kWithSm90)
                    .sm90(),
                variant)
          << d << "/" << d_v << " variant " << variant;
  EXPECT_EQ(cuda::attn::make_plan(problem(1, 4096, 4096, 128, DType::fp8_e4m3), kH200, {}, kWithSm90).kernel,
            Kernel::sm80);
  Problem det = problem(1, 4096, 4096);
  det.deterministic = true;
  EXPECT_EQ(cuda::attn::make_plan(det, kH200, {}, kWithSm90).kernel, Kernel::sm80);
  // Its gather does 32-bit byte-stride arithmetic (slots are 32-bit for every kernel: can_implement).
  Problem wide_stride = problem(1, 4096, 4096);
  wide_stride.kv_token_stride = int64_t(1) << 30;  // 2 GiB between bf16 token slots
  EXPECT_EQ(cuda::attn::make_plan(wide_stride, kH200, {}, kWithSm90).kernel, Kernel::sm80);
}

TEST(OpPlanAttention, PrefillThatUnderfillsTheGpuSplitsOnThePortableKernel) {
  // 1 request x 64 rows: 8 kv heads x 4 m-blocks = 32 CTAs on 32 SMs x 2 slots: split, so no Hopper kernel.
  const Plan p = cuda::attn::make_plan(problem(1, 64, 32768), kSmallSm90, {}, kWithSm90);
  EXPECT_EQ(p.kernel, Kernel::sm80);
  EXPECT_EQ(p.mt, 4);
  EXPECT_GT(p.num_splits, 1);
  EXPECT_GT(workspace_size(p), 0u);
}

TEST(OpPlanAttention, TuningForcesKernelsAndTiles) {
  EXPECT_EQ(cuda::attn::make_plan(problem(1, 4096, 4096), kH200, {.sm90 = 1}, kWithSm90).kernel, Kernel::sm90_coop);
  EXPECT_EQ(cuda::attn::make_plan(problem(1, 4096, 4096), kH200, {.sm90 = 2}, kWithSm90).kernel,
            Kernel::sm90_warp_specialized);
  EXPECT_EQ(cuda::attn::make_plan(problem(1, 4096, 4096), kH200, {.sm90 = 3}, kWithSm90).kernel,
            Kernel::sm90_ping_pong);
  EXPECT_EQ(cuda::attn::make_plan(problem(1, 4096, 4096), kH200, {.sm90 = 0}, kWithSm90).kernel, Kernel::sm80);
  // A pinned tile or split count keeps the auto mode on the portable kernel.
  const Plan mt1 = cuda::attn::make_plan(problem(1, 4096, 4096), kH200, {.mt = 1}, kWithSm90);
  EXPECT_EQ(mt1.kernel, Kernel::sm80);
  EXPECT_EQ(mt1.mt, 1);
  const Plan s4 = cuda::attn::make_plan(problem(64, 1, 8192), kH200, {.num_splits = 4}, kWithSm90);
  EXPECT_EQ(s4.num_splits, 4);
  EXPECT_GT(workspace_size(s4), 0u);
  EXPECT_EQ(cuda::attn::make_plan(problem(64, 1, 8192), kH200, {.stages = 2}, kWithSm90).stages, 2);
}

// The TMA K/V loader (Plan::sm90_tma): only the producer kernels, only pages of a multiple of 16, and
// by default where it measured faster (whole tiles: d 128 on pages of a multiple of 64, d 64 on any page it
// takes; K by TMA with V by the lean gather: d 128 and 192/128 on the other pages of a multiple of 16).
TEST(OpPlanAttention, TmaLoaderOnlyForProducerKernelsOnPagesOf16) {
  using cuda::attn::Tuning;
  auto plan = [](const Tuning& t, int64_t page = 16, int d = 128, int d_v = 0) {
    Problem p = problem(1, 4096, 4096, d, DType::bf16, d_v);
    p.page_size = page;
    p.max_pages = (4096 + page - 1) / page;
    return cuda::attn::make_plan(p, kH200, t, kWithSm90);
  };
  EXPECT_TRUE(plan({}).sm90_tma) << "d 128 page 16: K by TMA by default";
  EXPECT_EQ(plan({}).sm90_kv_load, cuda::attn90::kKvKTma);
  EXPECT_EQ(plan({}, 32).sm90_kv_load, cuda::attn90::kKvKTma);
  EXPECT_EQ(plan({}, 48).sm90_kv_load, cuda::attn90::kKvKTma);
  EXPECT_EQ(plan({}, 8).sm90_kv_load, cuda::attn90::kKvGather) << "page 8: no box fits";
  EXPECT_TRUE(plan({}, 64).sm90_tma) << "d 128 page 64: TMA by default";
  EXPECT_TRUE(plan({}, 128).sm90_tma);
  EXPECT_TRUE(plan({}, 16, 64).sm90_tma) << "d 64: TMA by default on every page it takes";
  EXPECT_FALSE(plan({}, 8, 64).sm90_tma);
  EXPECT_EQ(plan({}, 16, 192, 128).sm90_kv_load, cuda::attn90::kKvKTma) << "d 192/128: K by TMA";
  EXPECT_EQ(plan({}, 64, 192, 128).sm90_kv_load, cuda::attn90::kKvKTma);
  EXPECT_FALSE(plan({}, 64, 256).sm90_tma) << "d 256: cp.async";
  EXPECT_FALSE(plan({}, 16, 256).sm90_tma) << "d 256: cp.async";
  EXPECT_EQ(plan({.sm90 = 2}).sm90_kv_load, cuda::attn90::kKvGather) << "the split loaders: the ping-pong only";
  EXPECT_TRUE(plan({.sm90_tma = 1}, 64).sm90_tma);
  EXPECT_FALSE(plan({.sm90_tma = 0}, 64).sm90_tma);
  EXPECT_FALSE(plan({.sm90 = 1}, 64).sm90_tma) << "kCoop has no producer";
  for (int v : {2, 3, 4}) {
    EXPECT_TRUE(plan({.sm90 = v, .sm90_tma = 1}).sm90_tma) << v;
    for (int64_t page : {32, 48, 64, 128, 256}) EXPECT_TRUE(plan({.sm90 = v, .sm90_tma = 1}, page).sm90_tma) << page;
    for (int64_t page : {1, 2, 8, 24}) EXPECT_FALSE(plan({.sm90 = v, .sm90_tma = 1}, page).sm90_tma) << page;
  }
  EXPECT_FALSE(plan({.sm90 = 1, .sm90_tma = 1}).sm90_tma) << "kCoop has no producer";
  EXPECT_FALSE(plan({.sm90 = 0, .sm90_tma = 1}).sm90_tma) << "the portable kernel";
  // Plan::sm90_kv_load follows: whole-tile TMA exactly where sm90_tma, else the gather.
  EXPECT_EQ(plan({.sm90_tma = 0}).sm90_kv_load, cuda::attn90::kKvGather);
  EXPECT_EQ(plan({}, 64).sm90_kv_load, cuda::attn90::kKvTma);
  EXPECT_EQ(plan({.sm90_tma = 0}, 64).sm90_kv_load, cuda::attn90::kKvGather);
}

// The split loaders (Tuning::sm90_tma 2 / 3 / 4, sm90/tile_load_split.cuh; 2 is the default at d 128 and 192/128
// where whole-tile TMA is not, see above): forced, only on the ping-pong
// (the auto kernel) at d 128, 192/128 and 256, on pages of a multiple of 16; elsewhere the gather.
TEST(OpPlanAttention, SplitLoadersOnlyOnThePingPongAtTheirHeadDims) {
  using cuda::attn::Tuning;
  namespace a90 = cuda::attn90;
  auto plan = [](const Tuning& t, int64_t page = 16, int d = 128, int d_v = 0) {
    Problem p = problem(1, 4096, 4096, d, DType::bf16, d_v);
    p.page_size = page;
    p.max_pages = (4096 + page - 1) / page;
    return cuda::attn::make_plan(p, kH200, t, kWithSm90);
  };
  for (int kv : {a90::kKvKTma, a90::kKvVTma, a90::kKvLean}) {
    SCOPED_TRACE("sm90_tma " + std::to_string(kv));
    for (int64_t page : {16, 32, 48, 64, 128, 256}) {
      const Plan c = plan({.sm90_tma = kv}, page);
      EXPECT_EQ(c.kernel, Kernel::sm90_ping_pong) << page;
      EXPECT_EQ(c.sm90_kv_load, kv) << page;
      EXPECT_EQ(c.sm90_tma, kv != a90::kKvLean) << page << ": tensor maps for the TMA halves only";
    }
    EXPECT_EQ(plan({.sm90_tma = kv}, 16, 192, 128).sm90_kv_load, kv);
    EXPECT_EQ(plan({.sm90_tma = kv}, 16, 256).sm90_kv_load, kv);
    EXPECT_EQ(plan({.sm90 = 3, .sm90_tma = kv}).sm90_kv_load, kv);
    for (int64_t page : {1, 8, 24}) {
      EXPECT_EQ(plan({.sm90_tma = kv}, page).sm90_kv_load, a90::kKvGather) << page;
      EXPECT_FALSE(plan({.sm90_tma = kv}, page).sm90_tma) << page;
    }
    for (auto [d, d_v] : {std::pair{64, 64}, {96, 96}, {192, 192}})
      EXPECT_EQ(plan({.sm90_tma = kv}, 16, d, d_v).sm90_kv_load, a90::kKvGather) << d << "/" << d_v << ": not built";
    for (int v : {1, 2, 4}) {
      const Plan c = plan({.sm90 = v, .sm90_tma = kv});
      EXPECT_EQ(c.sm90_kv_load, a90::kKvGather) << "kernel " << v << ": the ping-pong only";
      EXPECT_FALSE(c.sm90_tma) << v;
    }
  }
  EXPECT_FALSE(a90::split_built(64, 64));
  EXPECT_TRUE(a90::split_built(128, 128) && a90::split_built(192, 128) && a90::split_built(256, 256));
}

TEST(OpPlanAttention, DeterministicUsesFixedSplitsOfRowBlocksOf16) {
  Problem p = problem(3, 5, 5000);
  p.deterministic = true;
  const Plan c = cuda::attn::make_plan(p, kH200, {.mt = 4}, kWithSm90);
  EXPECT_EQ(c.mt, 1);  // the tuning cannot change the summation order
  EXPECT_EQ(c.split_keys, cuda::attn::kDeterministicSplitKeys);
  const int sk = cuda::attn::kDeterministicSplitKeys;
  EXPECT_EQ(c.num_splits, (313 * 16 + sk - 1) / sk);  // 313 pages of 16 keys
  EXPECT_EQ(c.m_blocks, (5 * 4 + 15) / 16);
  // The batch does not change the splits (bits independent of the other requests).
  Problem big = p;
  big.b = 200;
  big.total_q = 1000;
  EXPECT_EQ(cuda::attn::make_plan(big, kH200).num_splits, c.num_splits);
}

TEST(OpPlanAttention, ThreeCtasPerSmOnlyWhereTheKernelFits) {
  using cuda::attn::Tuning;
  // Decode at d 128: the 2-stage pipeline fits three CTAs, and the splits count 3 x 132 slots.
  const Plan three = cuda::attn::make_plan(problem(64, 1, 8192), kH200, Tuning{.ctas = 3}, kWithSm90);
  EXPECT_EQ(three.kernel, Kernel::sm80);
  EXPECT_EQ(three.ctas_per_sm, 3);
  EXPECT_EQ(three.stages, 2);
  EXPECT_LE(3 * (three.smem + 1024), kH200.smem_per_block + 1024);
  // FP8: the widening kernel's conversion tiles leave room for 2 stages; the direct operands' kernel (the default)
  // for 4.
  const Problem fp8_decode = problem(64, 1, 8192, 128, DType::fp8_e4m3);
  const Plan fp8 = cuda::attn::make_plan(fp8_decode, kH200, Tuning{.ctas = 3, .fp8_direct = 0});
  EXPECT_EQ(fp8.ctas_per_sm, 3);
  EXPECT_EQ(fp8.stages, 2);
  const Plan fp8_direct = cuda::attn::make_plan(fp8_decode, kH200, Tuning{.ctas = 3});
  EXPECT_EQ(fp8_direct.ctas_per_sm, 3);
  EXPECT_EQ(fp8_direct.stages, 4);
  // d 256 and 64-row tiles hold too many accumulators for 168 registers: the untuned count.
  EXPECT_EQ(cuda::attn::make_plan(problem(64, 1, 8192, 256), kH200, Tuning{.ctas = 3}).ctas_per_sm, 1);
  const Plan extend = cuda::attn::make_plan(problem(4, 1024, 4096), kH200, Tuning{.ctas = 3}, kWithSm90);
  EXPECT_EQ(extend.kernel, Kernel::sm80);  // a pinned field keeps the portable kernel
  EXPECT_EQ(extend.mt, 4);
  EXPECT_EQ(extend.ctas_per_sm, 2);
  // The default: two CTAs, three stages; page runs on unless turned off.
  const Plan def = cuda::attn::make_plan(problem(64, 1, 8192), kH200, {}, kWithSm90);
  EXPECT_EQ(def.ctas_per_sm, 2);
  EXPECT_EQ(def.page_runs, 1);
  EXPECT_EQ(cuda::attn::make_plan(problem(64, 1, 8192), kH200, Tuning{.page_runs = 0}).page_runs, 0);
}

// Lane page ids (measured faster, session 7): on by default, off when asked, and a pinned field like the
// others: it keeps a prefill shape on the portable kernel.
TEST(OpPlanAttention, LanePagesUnlessTurnedOff) {
  EXPECT_EQ(cuda::attn::make_plan(problem(64, 1, 8192), kH200, {}, kWithSm90).lane_pages, 1);
  EXPECT_EQ(cuda::attn::make_plan(problem(64, 1, 8192), kH200, cuda::attn::Tuning{.lane_pages = 0}).lane_pages, 0);
  EXPECT_EQ(cuda::attn::make_plan(problem(64, 1, 8192), kH200, cuda::attn::Tuning{.lane_pages = 1}).lane_pages, 1);
  const Plan prefill =
      cuda::attn::make_plan(problem(4, 1024, 4096), kH200, cuda::attn::Tuning{.lane_pages = 1}, kWithSm90);
  EXPECT_EQ(prefill.kernel, Kernel::sm80);
  EXPECT_EQ(prefill.lane_pages, 1);
  EXPECT_NE(cuda::attn::make_plan(problem(4, 1024, 4096), kH200, {}, kWithSm90).kernel, Kernel::sm80);
}

// Ring counters (session 7, measured faster): on by default, off when asked, only on 16-row (MT = 1) tiles;
// the rest of the plan is the same either way; a pinned field keeps prefill portable.
TEST(OpPlanAttention, RingCountersUnlessTurnedOffAndOnlyMt1) {
  using cuda::attn::Tuning;
  const Plan def = cuda::attn::make_plan(problem(64, 1, 8192), kH200, Tuning{.ring_counters = 0}, kWithSm90);
  EXPECT_EQ(def.ring_counters, 0);
  EXPECT_EQ(cuda::attn::make_plan(problem(64, 1, 8192), kH200, {}, kWithSm90).ring_counters, 1);
  const Plan rc = cuda::attn::make_plan(problem(64, 1, 8192), kH200, Tuning{.ring_counters = 1}, kWithSm90);
  EXPECT_EQ(rc.ring_counters, 1);
  EXPECT_EQ(rc.kernel, def.kernel);
  EXPECT_EQ(rc.mt, def.mt);
  EXPECT_EQ(rc.stages, def.stages);
  EXPECT_EQ(rc.num_splits, def.num_splits);
  EXPECT_EQ(rc.ctas_per_sm, def.ctas_per_sm);
  EXPECT_EQ(rc.smem, def.smem);
  const Plan prefill = cuda::attn::make_plan(problem(4, 1024, 4096), kH200, Tuning{.ring_counters = 1}, kWithSm90);
  EXPECT_EQ(prefill.kernel, Kernel::sm80);  // pinned: the portable kernel
  EXPECT_EQ(prefill.mt, 4);
  EXPECT_EQ(prefill.ring_counters, 0);  // 64-row tiles keep the modulo indexing
  EXPECT_EQ(cuda::attn::make_plan(problem(4, 1024, 4096), kH200, Tuning{.mt = 1, .ring_counters = 1}).ring_counters, 1);
  // The kernel's page products are 32-bit: a page of more than 4 GiB (16 slots x 2^28-element strides)
  // keeps the modulo kernel.
  Problem wide = problem(64, 1, 8192);
  wide.kv_token_stride = int64_t(1) << 28;
  EXPECT_EQ(cuda::attn::make_plan(wide, kH200, Tuning{.ring_counters = 1}).ring_counters, 0);
  wide.kv_token_stride = int64_t(1) << 26;  // 2 GiB pages: still 32-bit
  EXPECT_EQ(cuda::attn::make_plan(wide, kH200, Tuning{.ring_counters = 1}).ring_counters, 1);
}

// FP8 operands straight from the e4m3 bytes (session 8, measured: plan.cpp): on unless turned off; only FP8 caches,
// 16-row tiles and d = d_v in {64, 128}; without conversion tiles the CTA needs less shared memory (three
// CTAs per SM at 4 stages for d 128), and the padding keeps the epilogue's partial-O buffer inside the tiles.
TEST(OpPlanAttention, Fp8DirectByDefaultWhereBuilt) {
  using cuda::attn::Tuning;
  const Problem fp8 = problem(64, 1, 8192, 128, DType::fp8_e4m3);
  const Plan def = cuda::attn::make_plan(fp8, kH200, Tuning{.fp8_direct = 0}, kWithSm90);  // the widening kernel
  EXPECT_EQ(def.fp8_direct, 0);
  const Plan automatic = cuda::attn::make_plan(fp8, kH200, {}, kWithSm90);
  EXPECT_EQ(automatic.fp8_direct, 2);  // auto: on, the lean key loop (measured, plan.cpp)
  const Plan on = cuda::attn::make_plan(fp8, kH200, Tuning{.fp8_direct = 1}, kWithSm90);
  EXPECT_EQ(on.fp8_direct, 1);
  EXPECT_EQ(on.smem, automatic.smem);
  EXPECT_EQ(on.kernel, Kernel::sm80);
  EXPECT_EQ(on.mt, 1);
  EXPECT_EQ(on.stages, def.stages);  // max_stages_for caps both at 4
  EXPECT_LT(on.smem, def.smem);      // no conversion tiles
  EXPECT_EQ(on.smem, cuda::attn::smem_bytes(128, true, 1, on.stages, true));
  const Plan on3 = cuda::attn::make_plan(fp8, kH200, Tuning{.ctas = 3, .fp8_direct = 1}, kWithSm90);
  EXPECT_EQ(on3.ctas_per_sm, 3);
  EXPECT_EQ(on3.stages, 4);
  // Not built: bf16 caches, d 256, 64-row tiles, d_v != d.
  EXPECT_EQ(cuda::attn::make_plan(problem(64, 1, 8192), kH200, Tuning{.fp8_direct = 1}, kWithSm90).fp8_direct, 0);
  EXPECT_EQ(
      cuda::attn::make_plan(problem(64, 1, 8192, 256, DType::fp8_e4m3), kH200, Tuning{.fp8_direct = 1}).fp8_direct, 0);
  EXPECT_EQ(
      cuda::attn::make_plan(problem(4, 1024, 4096, 128, DType::fp8_e4m3), kH200, Tuning{.fp8_direct = 1}).fp8_direct,
      0);
  EXPECT_EQ(
      cuda::attn::make_plan(problem(64, 1, 8192, 192, DType::fp8_e4m3, 128), kH200, Tuning{.fp8_direct = 1}).fp8_direct,
      0);
  EXPECT_EQ(cuda::attn::make_plan(problem(64, 1, 8192, 64, DType::fp8_e4m3), kH200, Tuning{.fp8_direct = 1}).fp8_direct,
            1);
  // The direct kernel's K/V stage tiles plus padding always hold the epilogue's [64][d + 8] f32 buffer.
  for (int d : {64, 128})
    for (int stages = 2; stages <= cuda::attn::kMaxStages; ++stages)
      EXPECT_GE(std::size_t(stages) * 2 * 64 * d + cuda::attn::conv_bytes(d, true, 1, stages, true),
                cuda::attn::epilogue_bytes(d));
  EXPECT_EQ(cuda::attn::conv_bytes(128, true, 1, 2, true), cuda::attn::epilogue_bytes(128) - 2 * 2 * 64 * 128);
  EXPECT_EQ(cuda::attn::conv_bytes(128, true, 1, 4, true), 0u);
  EXPECT_EQ(cuda::attn::conv_bytes(128, true, 1, 4, false), 2u * 64 * 128 * 2);  // the widening kernel's tiles
}

// The direct kernel's lean key loop (Tuning::fp8_direct 2, session 8; the default since session 9): by default or
// asked for, only where the direct operands are built, only with ring counters (the loop it trims; without them the direct kernel, 1); the
// same shared memory, stages and CTAs as the direct kernel (only the loop's instructions differ).
TEST(OpPlanAttention, Fp8DirectLeanByDefaultWithRingCounters) {
  using cuda::attn::Tuning;
  const Problem fp8 = problem(64, 1, 8192, 128, DType::fp8_e4m3);
  EXPECT_EQ(cuda::attn::make_plan(fp8, kH200, {}, kWithSm90).fp8_direct, 2);  // auto: the lean key loop
  const Plan direct = cuda::attn::make_plan(fp8, kH200, Tuning{.fp8_direct = 1}, kWithSm90);
  const Plan lean = cuda::attn::make_plan(fp8, kH200, Tuning{.fp8_direct = 2}, kWithSm90);
  EXPECT_EQ(lean.fp8_direct, 2);
  EXPECT_EQ(lean.ring_counters, 1);
  EXPECT_EQ(lean.kernel, Kernel::sm80);
  EXPECT_EQ(lean.mt, 1);
  EXPECT_EQ(lean.smem, direct.smem);
  EXPECT_EQ(lean.stages, direct.stages);
  EXPECT_EQ(lean.ctas_per_sm, direct.ctas_per_sm);
  EXPECT_EQ(lean.num_splits, direct.num_splits);
  const Plan lean3 = cuda::attn::make_plan(fp8, kH200, Tuning{.ctas = 3, .fp8_direct = 2}, kWithSm90);
  EXPECT_EQ(lean3.fp8_direct, 2);
  EXPECT_EQ(lean3.ctas_per_sm, 3);
  EXPECT_EQ(lean3.stages, 4);
  EXPECT_EQ(cuda::attn::make_plan(problem(64, 1, 8192, 64, DType::fp8_e4m3), kH200, Tuning{.fp8_direct = 2}).fp8_direct,
            2);
  // Without ring counters (turned off, or pages over 4 GiB): the direct kernel.
  EXPECT_EQ(cuda::attn::make_plan(fp8, kH200, Tuning{.ring_counters = 0, .fp8_direct = 2}).fp8_direct, 1);
  Problem wide = fp8;
  wide.kv_token_stride = int64_t(1) << 29;  // 16-slot pages of 8 GiB
  EXPECT_EQ(cuda::attn::make_plan(wide, kH200, Tuning{.fp8_direct = 2}).fp8_direct, 1);
  // Not built: bf16 caches, d 256, 64-row tiles.
  EXPECT_EQ(cuda::attn::make_plan(problem(64, 1, 8192), kH200, Tuning{.fp8_direct = 2}).fp8_direct, 0);
  EXPECT_EQ(
      cuda::attn::make_plan(problem(64, 1, 8192, 256, DType::fp8_e4m3), kH200, Tuning{.fp8_direct = 2}).fp8_direct, 0);
  EXPECT_EQ(
      cuda::attn::make_plan(problem(4, 1024, 4096, 128, DType::fp8_e4m3), kH200, Tuning{.fp8_direct = 2}).fp8_direct,
      0);
}

TEST(OpPlanAttention, DeterministicSplitSizeTuningRoundsToTiles) {
  Problem p = problem(3, 1, 8192);
  p.deterministic = true;
  const Plan c = cuda::attn::make_plan(p, kH200, cuda::attn::Tuning{.split_keys = 2000});
  EXPECT_EQ(c.split_keys, 2048);
  EXPECT_EQ(c.num_splits, 4);
  Problem big = p;
  big.b = 200;
  big.total_q = 200;
  EXPECT_EQ(cuda::attn::make_plan(big, kH200, cuda::attn::Tuning{.split_keys = 2000}).num_splits, 4);
}

TEST(OpPlanAttention, Fp8CacheTakesADeeperPipeline) {
  const Problem fp8 = problem(64, 1, 8192, 128, DType::fp8_e4m3);
  const Plan p = cuda::attn::make_plan(fp8, kH200);  // the direct operands (no conversion tiles)
  EXPECT_EQ(p.stages, 4);
  EXPECT_EQ(p.smem, cuda::attn::smem_bytes(128, true, 1, 4, true));
  const Plan widening = cuda::attn::make_plan(fp8, kH200, cuda::attn::Tuning{.fp8_direct = 0});
  EXPECT_EQ(widening.stages, 4);
  EXPECT_EQ(widening.smem, cuda::attn::smem_bytes(128, true, 1, 4));
}

TEST(OpPlanAttention, CanImplementNamesWhatIsUnsupported) {
  auto reason = [](Problem p, const DeviceCaps& caps = kH200) { return cuda::attn::can_implement(p, caps).reason; };
  EXPECT_TRUE(cuda::attn::can_implement(problem(2, 1, 100), kH200).ok());
  EXPECT_NE(reason(problem(2, 1, 100, 80)).find("head dims 64, 96, 128, 192, 192/128, 256; q has 80"),
            std::string::npos);
  Problem f32 = problem(2, 1, 100);
  f32.dtype = f32.out_dtype = f32.kv_dtype = DType::f32;
  EXPECT_NE(reason(f32).find("q must be bf16, f16 or fp8_e4m3"), std::string::npos);
  Problem dv = problem(2, 1, 100);
  dv.d_v = 64;
  EXPECT_NE(reason(dv).find("q and k_cache have 128, v_cache 64"), std::string::npos);
  Problem grp = problem(2, 1, 100);
  grp.h_q = 12;
  EXPECT_NE(reason(grp).find("multiple of h_kv"), std::string::npos);
  Problem no_max = problem(2, 1, 100);
  no_max.max_seqlen_q = 0;
  EXPECT_NE(reason(no_max).find("max_seqlen_q"), std::string::npos);
  Problem out = problem(2, 1, 100);
  out.out_dtype = DType::f16;
  EXPECT_NE(reason(out).find("out must have q's dtype"), std::string::npos);
  const DeviceCaps tiny{.num_sms = 1, .smem_per_block = 16 * 1024, .arch = 80};
  EXPECT_NE(reason(problem(2, 1, 100, 256), tiny).find("shared memory"), std::string::npos);
  EXPECT_THROW(cuda::attn::make_plan(problem(2, 1, 100, 80), kH200), Error);
}

TEST(OpPlanAttention, HeadDimSupportListIsTheOneTheErrorsName) {
  EXPECT_EQ(cuda::attn::HeadDims::str(), "64, 96, 128, 192, 192/128, 256");
  EXPECT_EQ(cuda::attn90::HeadDims::str(), cuda::attn::HeadDims::str());  // every pair also runs on Hopper
  for (int d : {64, 96, 128, 192, 256}) EXPECT_TRUE(cuda::attn::can_implement(problem(1, 1, 64, d), kH200).ok()) << d;
  EXPECT_TRUE(cuda::attn::can_implement(problem(1, 1, 64, 192, DType::bf16, 128), kH200).ok());
  for (int d : {32, 80, 160, 512}) EXPECT_FALSE(cuda::attn::can_implement(problem(1, 1, 64, d), kH200).ok()) << d;
  EXPECT_FALSE(cuda::attn::can_implement(problem(1, 1, 64, 128, DType::bf16, 192), kH200).ok());
  // The portable kernel's rows: the wider head dim rounded up to a power of two >= 64.
  EXPECT_EQ(cuda::attn::row_elems(96, 96), 128);
  EXPECT_EQ(cuda::attn::row_elems(192, 128), 256);
  EXPECT_EQ(cuda::attn::row_elems(128, 128), 128);
  EXPECT_EQ(cuda::attn::row_elems(192, 192), 256);
  EXPECT_EQ(cuda::attn::row_elems(32, 32), 64);
  // Split-KV partial outputs are d_v wide.
  const Plan split = cuda::attn::make_plan(problem(2, 1, 8192, 192, DType::bf16, 128), kH200, {.num_splits = 4});
  EXPECT_EQ(split.num_splits, 4);
  EXPECT_EQ(workspace_size(split), cuda::align_up(4u * 2 * 32 * 128 * 4) + cuda::align_up(4u * 2 * 32 * 4));
}

}  // namespace
}  // namespace attnserve
