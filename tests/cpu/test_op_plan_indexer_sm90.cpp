// The lightning indexer's choice of the Hopper kernel (src/cuda/indexer/plan.h) on fabricated devices:
// chosen on sm_90 in an sm_90a build for 64 heads (paged next_n 1..4, any page size: the warp-specialized
// kernel; ragged: the session-4 kernel, the ws one when asked), its groups and column blocks; the portable
// kernel on an A100, without the sm_90a build, for other head counts or next_n, and when the tuning says never.
#include <gtest/gtest.h>

#include "cuda/indexer/plan.h"
#include "cuda/indexer/sm80/config.h"
#include "cuda/indexer/sm90/config.h"

namespace attnserve {
namespace {

using cuda::indexer::Kernel;
using cuda::indexer::make_plan;
using cuda::indexer::Problem;
using cuda::indexer::Targets;
using cuda::indexer::Tuning;

const DeviceCaps kH200{.num_sms = 132, .smem_per_block = 227 * 1024, .arch = 90};
const DeviceCaps kA100{.num_sms = 108, .smem_per_block = 163 * 1024, .arch = 80};
const Targets kSm90a{.sm90a = true};

Problem paged(int next_n, int64_t page_size = 64, int heads = 64, bool q_scale = false) {
  return Problem{.paged = true,
                 .rows = 128 * next_n,
                 .heads = heads,
                 .num_cols = 32768,
                 .next_n = next_n,
                 .page_size = page_size,
                 .q_scale = q_scale};
}

TEST(OpPlanIndexerSm90, PagedNextN1To4On64HeadsTakesTheHopperKernel) {
  for (int next_n = 1; next_n <= 4; ++next_n) {
    const auto plan = make_plan(paged(next_n), kH200, {}, kSm90a);
    EXPECT_EQ(plan.kernel, Kernel::sm90ws_paged) << next_n;
    EXPECT_TRUE(cuda::indexer::is_sm90(plan.kernel));
    EXPECT_TRUE(cuda::indexer::is_sm90_ws(plan.kernel));
    EXPECT_EQ(plan.rows_per_group, next_n);
    EXPECT_EQ(plan.num_groups, 128);
    // ~kWsWaves CTAs an SM: 4 * 132 / 128 groups -> 5 column blocks of 6592 (103 blocks of 64 keys)
    EXPECT_EQ(plan.col_blocks, 5);
    EXPECT_EQ(plan.cols_per_cta, 6592);
    EXPECT_TRUE(plan.key_vec16);
    // Paged has only the ws kernel: sm90_ws 0 changes nothing.
    EXPECT_EQ(make_plan(paged(next_n), kH200, Tuning{.sm90_ws = 0}, kSm90a).kernel, Kernel::sm90ws_paged);
  }
  EXPECT_EQ(make_plan(paged(2, 64, 64, true), kH200, {}, kSm90a).kernel, Kernel::sm90ws_paged_q_scale);
  // Pages of 5 keys break 16-byte alignment: the ws kernel's 4-byte key copies, by default too (page 1
  // measured faster than the portable kernel, session 6).
  EXPECT_EQ(make_plan(paged(1, 5), kH200, {}, kSm90a).kernel, Kernel::sm90ws_paged);
  EXPECT_EQ(make_plan(paged(1, 1), kH200, {}, kSm90a).kernel, Kernel::sm90ws_paged);
  const auto odd_pages = make_plan(paged(1, 5), kH200, Tuning{.sm90 = 1}, kSm90a);
  EXPECT_EQ(odd_pages.kernel, Kernel::sm90ws_paged);
  EXPECT_FALSE(odd_pages.key_vec16);
  EXPECT_STREQ(cuda::indexer::kernel_name(odd_pages.kernel), "sm90ws_paged");
  EXPECT_EQ(make_plan(paged(3, 16), kH200, {}, kSm90a).kernel, Kernel::sm90ws_paged);
}

// The ws kernel's column spans: whole 64-key blocks covering the columns, at least kWsMinCols unless one
// span covers everything, about kWsWaves CTAs an SM; a forced span is rounded up to whole blocks.
TEST(OpPlanIndexerSm90, WsColumnSpans) {
  using cuda::indexer90::kWsBlockKeys;
  for (int64_t cols : {1, 63, 64, 1000, 5000, 32768, 131072})
    for (int64_t rows : {1, 8, 128, 4096}) {
      const auto plan = make_plan({.rows = rows, .heads = 64, .num_cols = cols}, kH200, Tuning{.sm90_ws = 1}, kSm90a);
      ASSERT_EQ(plan.kernel, Kernel::sm90ws_ragged);
      EXPECT_EQ(plan.cols_per_cta % kWsBlockKeys, 0);
      EXPECT_GE(plan.col_blocks * plan.cols_per_cta, cols);
      EXPECT_LT((plan.col_blocks - 1) * plan.cols_per_cta, cols);
      if (plan.col_blocks > 1) {
        EXPECT_GE(plan.cols_per_cta, cuda::indexer90::kWsMinCols);
        EXPECT_LE(plan.ctas(), 2 * cuda::indexer90::kWsWaves * 132);
      }
    }
  const auto ragged8k = make_plan({.rows = 8192, .heads = 64, .num_cols = 8192}, kH200, Tuning{.sm90_ws = 1}, kSm90a);
  EXPECT_EQ(ragged8k.num_groups, 8192 / cuda::indexer90::kWsRaggedRows);
  EXPECT_EQ(ragged8k.col_blocks, 1);  // 2048 groups: a CTA takes a group's whole causal window
  const auto forced = make_plan({.rows = 8, .heads = 64, .num_cols = 5000}, kH200,
                                Tuning{.sm90_ws = 1, .ws_cols_per_cta = 1000}, kSm90a);
  EXPECT_EQ(forced.cols_per_cta, 1024);
  EXPECT_EQ(forced.col_blocks, 5);
}

TEST(OpPlanIndexerSm90, RaggedGroupsOfFourRows) {
  // The ws kernel by default (auto or sm90_ws 1), the session-4 one when asked (sm90_ws 0).
  const auto s4 = make_plan({.rows = 9, .heads = 64, .num_cols = 1000}, kH200, Tuning{.sm90_ws = 0}, kSm90a);
  EXPECT_EQ(s4.kernel, Kernel::sm90_ragged);
  EXPECT_EQ(s4.rows_per_group, cuda::indexer90::kRaggedRows);
  EXPECT_EQ(s4.num_groups, 3);
  EXPECT_EQ(s4.col_blocks, 1);
  EXPECT_EQ(s4.cols_per_cta, cuda::indexer90::kColsPerCta);
  EXPECT_EQ(make_plan({.rows = 9, .heads = 64, .num_cols = 1000, .q_scale = true}, kH200, Tuning{.sm90_ws = 0}, kSm90a)
                .kernel,
            Kernel::sm90_ragged_q_scale);
  for (const Tuning ws : {Tuning{}, Tuning{.sm90_ws = 1}}) {
    const auto wsp = make_plan({.rows = 9, .heads = 64, .num_cols = 1000}, kH200, ws, kSm90a);
    EXPECT_EQ(wsp.kernel, Kernel::sm90ws_ragged);
    EXPECT_EQ(wsp.rows_per_group, cuda::indexer90::kWsRaggedRows);
    EXPECT_EQ(wsp.num_groups, 3);
    EXPECT_EQ(wsp.col_blocks, 1);
    EXPECT_EQ(make_plan({.rows = 9, .heads = 64, .num_cols = 1000, .q_scale = true}, kH200, ws, kSm90a).kernel,
              Kernel::sm90ws_ragged_q_scale);
  }
}

// The ws kernel's mode: the default, or the forced one, where it has modes: the overlap bits (ping-pong, split)
// ragged and paged next_n 2 and 4 with 16-byte keys, the batched epilogue's bit every form of the ws kernel;
// the other bits dropped. Both defaults have the batched epilogue (ragged with the split commit groups, paged
// the four math warpgroups where they exist).
TEST(OpPlanIndexerSm90, WsModeOnlyWhereTheKernelHasIt) {
  using cuda::indexer90::kWsBatched;
  const Problem ragged{.rows = 9, .heads = 64, .num_cols = 1000};
  EXPECT_EQ(make_plan(ragged, kH200, Tuning{.sm90_ws = 1}, kSm90a).ws_mode, cuda::indexer90::kWsRaggedDefaultMode);
  EXPECT_EQ(make_plan(ragged, kH200, {}, kSm90a).ws_mode, cuda::indexer90::kWsRaggedDefaultMode);
  EXPECT_EQ(cuda::indexer90::kWsRaggedDefaultMode, kWsBatched | cuda::indexer90::kWsSplit);
  EXPECT_EQ(cuda::indexer90::kWsPagedDefaultMode, cuda::indexer90::kWsQuadMode);
  for (int next_n = 1; next_n <= 4; ++next_n) {
    const bool quad = next_n == 2 || next_n == 4;  // instantiated there (16-byte keys)
    EXPECT_EQ(make_plan(paged(next_n), kH200, {}, kSm90a).ws_mode, quad ? cuda::indexer90::kWsQuadMode : kWsBatched);
    EXPECT_EQ(make_plan(paged(next_n, 5), kH200, {}, kSm90a).ws_mode, kWsBatched);  // the bit every form has
  }
  EXPECT_EQ(cuda::indexer90::kWsModes, 8);
  for (int mode = 0; mode < cuda::indexer90::kWsModes; ++mode) {
    const Tuning t{.sm90_ws = 1, .ws_mode = mode};
    EXPECT_EQ(make_plan(ragged, kH200, t, kSm90a).ws_mode, mode);
    EXPECT_EQ(make_plan(paged(2), kH200, t, kSm90a).ws_mode, mode);
    EXPECT_EQ(make_plan(paged(4), kH200, t, kSm90a).ws_mode, mode);
    EXPECT_EQ(make_plan(paged(1), kH200, t, kSm90a).ws_mode, mode & kWsBatched);
    EXPECT_EQ(make_plan(paged(3), kH200, t, kSm90a).ws_mode, mode & kWsBatched);
    EXPECT_EQ(make_plan(paged(4, 5), kH200, t, kSm90a).ws_mode, mode & kWsBatched);  // 4-byte key copies
    EXPECT_EQ(make_plan(paged(1, 1), kH200, t, kSm90a).ws_mode, mode & kWsBatched);
    EXPECT_EQ(make_plan(ragged, kH200, Tuning{.sm90_ws = 0, .ws_mode = mode}, kSm90a).ws_mode, 0);  // session-4
    EXPECT_EQ(make_plan(paged(2), kA100, t, kSm90a).ws_mode, 0);  // the portable kernel
  }
  // Out of range: the bits the form has (bit 16 is none; bit 8 is the quad kernel, below).
  EXPECT_EQ(make_plan(ragged, kH200, Tuning{.sm90_ws = 1, .ws_mode = 21}, kSm90a).ws_mode, 21 & 7);
}

// The four-math-warpgroup kernel (opt-in bit kWsQuad): forced, it runs as kWsQuadMode (batched, no ping-pong or
// split) where it is instantiated (ragged, paged next_n 2 and 4 with 16-byte keys); elsewhere the bit is dropped
// and the other bits are kept as for any mode. The paged default, not the ragged one. Its twin (the same bits)
// per group size.
TEST(OpPlanIndexerSm90, QuadModeOnlyWhereInstantiated) {
  using cuda::indexer90::kWsBatched;
  using cuda::indexer90::kWsQuad;
  using cuda::indexer90::kWsQuadMode;
  const Problem ragged{.rows = 9, .heads = 64, .num_cols = 1000};
  EXPECT_EQ(kWsQuadMode, kWsQuad | kWsBatched);
  EXPECT_EQ(cuda::indexer90::kWsRaggedDefaultMode & kWsQuad, 0);
  EXPECT_EQ(cuda::indexer90::kWsPagedDefaultMode, kWsQuadMode);
  for (int mode = kWsQuad; mode < 2 * kWsQuad; ++mode) {
    const Tuning t{.sm90_ws = 1, .ws_mode = mode};
    EXPECT_EQ(make_plan(ragged, kH200, t, kSm90a).ws_mode, kWsQuadMode);
    EXPECT_EQ(make_plan(ragged, kH200, t, kSm90a).kernel, Kernel::sm90ws_ragged);
    EXPECT_EQ(make_plan(paged(2), kH200, t, kSm90a).ws_mode, kWsQuadMode);
    EXPECT_EQ(make_plan(paged(4), kH200, t, kSm90a).ws_mode, kWsQuadMode);
    EXPECT_EQ(make_plan(paged(4, 16), kH200, t, kSm90a).ws_mode, kWsQuadMode);
    EXPECT_EQ(make_plan(paged(1), kH200, t, kSm90a).ws_mode, mode & kWsBatched);
    EXPECT_EQ(make_plan(paged(3), kH200, t, kSm90a).ws_mode, mode & kWsBatched);
    EXPECT_EQ(make_plan(paged(4, 5), kH200, t, kSm90a).ws_mode, mode & kWsBatched);                 // 4-byte key copies
    EXPECT_EQ(make_plan(ragged, kH200, Tuning{.sm90_ws = 0, .ws_mode = mode}, kSm90a).ws_mode, 0);  // session-4
    EXPECT_EQ(make_plan(paged(2), kA100, t, kSm90a).ws_mode, 0);  // the portable kernel
  }
  // The quad plan's grid is the two-warpgroup one's (same groups and column spans).
  const auto quad = make_plan(paged(4), kH200, Tuning{.ws_mode = kWsQuadMode}, kSm90a);
  const auto base = make_plan(paged(4), kH200, {}, kSm90a);
  EXPECT_EQ(quad.ctas(), base.ctas());
  EXPECT_EQ(quad.cols_per_cta, base.cols_per_cta);
  EXPECT_EQ(cuda::indexer90::ws_quad_twin(4), kWsBatched | cuda::indexer90::kWsSplit);
  EXPECT_EQ(cuda::indexer90::ws_quad_twin(2), kWsBatched);
  EXPECT_EQ(cuda::indexer90::ws_threads(kWsQuadMode), 640);
  EXPECT_EQ(cuda::indexer90::ws_threads(cuda::indexer90::kWsRaggedDefaultMode), cuda::indexer90::kWsThreads);
}

TEST(OpPlanIndexerSm90, PortableWhereTheHopperKernelDoesNotApply) {
  EXPECT_EQ(make_plan(paged(1), kA100, {}, kSm90a).kernel, Kernel::paged);          // not sm_90
  EXPECT_EQ(make_plan(paged(1), kH200, {}, Targets{}).kernel, Kernel::paged);       // no sm_90a build
  EXPECT_EQ(make_plan(paged(5), kH200, {}, kSm90a).kernel, Kernel::paged);          // next_n > 4
  EXPECT_EQ(make_plan(paged(1, 64, 32), kH200, {}, kSm90a).kernel, Kernel::paged);  // 32 heads
  EXPECT_EQ(make_plan(paged(1), kH200, Tuning{.sm90 = 0}, kSm90a).kernel, Kernel::paged);
  EXPECT_EQ(make_plan(paged(1), kH200, Tuning{.sm90 = 1}, kSm90a).kernel, Kernel::sm90ws_paged);
  Problem strided = paged(1);
  strided.q_head_stride16 = false;  // 16-byte q copies impossible
  EXPECT_EQ(make_plan(strided, kH200, {}, kSm90a).kernel, Kernel::paged);
  const DeviceCaps small_smem{.num_sms = 132, .smem_per_block = 48 * 1024, .arch = 90};
  EXPECT_EQ(make_plan(paged(4), small_smem, {}, kSm90a).kernel, Kernel::paged);
  // The portable plan's groups and blocks are unchanged by the choice.
  const auto p = make_plan(paged(2), kA100, {}, kSm90a);
  EXPECT_EQ(p.col_blocks, 32768 / cuda::indexer::kColsPerCta);
}

TEST(OpPlanIndexerSm90, SharedMemoryFitsTwoCtasPerSmWhereRegistersAllow) {
  using cuda::indexer90::smem_bytes;
  EXPECT_LE(2 * smem_bytes(cuda::indexer90::ragged_shape()), std::size_t(227 * 1024));
  for (int rows = 1; rows <= 4; ++rows) EXPECT_LE(cuda::indexer90::ws_smem_bytes(rows), std::size_t(227 * 1024));
}

}  // namespace
}  // namespace attnserve
