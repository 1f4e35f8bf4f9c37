// The plans of MLA, sparse MLA, the indexer and top-k (src/cuda/<op>/plan.h) on fabricated devices: every choice,
// the workspace layouts, can_implement's reasons. Host code: runs in every build.
#include <gtest/gtest.h>

#include "attnserve/error.h"
#include "cuda/indexer/plan.h"
#include "cuda/indexer/sm80/config.h"
#include "cuda/mla/plan.h"
#include "cuda/mla/sm80/config.h"
#include "cuda/mla/sm90/config.h"
#include "cuda/sparse_mla/plan.h"
#include "cuda/topk/plan.h"

namespace attnserve {
namespace {

const DeviceCaps kH200{.num_sms = 132, .smem_per_block = 227 * 1024, .arch = 90};
const DeviceCaps kA100{.num_sms = 108, .smem_per_block = 163 * 1024, .arch = 80};

// ---- MLA -------------------------------------------------------------------------------------------

cuda::mla::Problem mla(int64_t b, int q_len, int h_q, int64_t ctx, int page = 64) {
  return cuda::mla::Problem{.b = b,
                            .total_q = b * q_len,
                            .h_q = h_q,
                            .d_v = 512,
                            .d_rope = 64,
                            .d_kv = 576,
                            .num_pages = 4096,
                            .page_size = page,
                            .max_pages = (ctx + page - 1) / page,
                            .max_seqlen_q = q_len};
}

// The portable kernel's choices on a build without sm_90a (kPortableBuild); the Hopper kernel's with it.
const cuda::mla::Targets kPortableBuild{.sm90a = false}, kSm90Build{.sm90a = true};

TEST(OpPlanMla, RowsPerBlockFollowTheRequestsPackedRows) {
  EXPECT_EQ(cuda::mla::make_plan(mla(128, 1, 16, 8192), kH200, {}, kPortableBuild).rows_per_block, 16);
  EXPECT_EQ(cuda::mla::make_plan(mla(128, 2, 16, 8192), kH200, {}, kPortableBuild).rows_per_block, 32);
  const cuda::mla::Plan h128 = cuda::mla::make_plan(mla(128, 1, 128, 8192), kH200, {}, kPortableBuild);
  EXPECT_EQ(h128.kernel, cuda::mla::Kernel::sm80);
  EXPECT_EQ(h128.rows_per_block, 64);
  EXPECT_EQ(h128.m_blocks, 2);
  EXPECT_EQ(h128.num_splits, 1);  // 256 CTAs fill the GPU
  EXPECT_EQ(workspace_size(h128), 0u);
  // A100: HB 64 with two tiles does not fit 163 KB: HB 32 (same bits).
  EXPECT_EQ(cuda::mla::make_plan(mla(128, 1, 128, 8192), kA100).rows_per_block, 32);
  EXPECT_EQ(cuda::mla::make_plan(mla(128, 1, 128, 8192), kH200, {.rows_per_block = 16}, kPortableBuild).rows_per_block,
            16);
}

TEST(OpPlanMla, HB16TakesTheTwoCtaRing) {
  const cuda::mla::Plan p = cuda::mla::make_plan(mla(128, 1, 16, 8192), kH200, {}, kPortableBuild);
  EXPECT_LE(p.smem, (kH200.smem_per_block + 1024) / 2 - 1024);
  EXPECT_EQ(p.smem, cuda::mla::smem_bytes(16, p.stages));
}

TEST(OpPlanMla, SmallBatchSplitsWithItsWorkspaceLayout) {
  const cuda::mla::Plan p = cuda::mla::make_plan(mla(2, 1, 16, 32768), kH200, {}, kPortableBuild);
  ASSERT_GT(p.num_splits, 1);
  const std::size_t rows = 2 * 16, n = std::size_t(p.num_splits);
  EXPECT_EQ(workspace_size(p), cuda::align_up(n * rows * 512 * 4) + cuda::align_up(n * rows * 4));
  alignas(256) static char base[1];
  const auto w = cuda::mla::workspace_layout(p, base);
  EXPECT_EQ(reinterpret_cast<char*>(w.part_lse), base + cuda::align_up(n * rows * 512 * 4));
}

TEST(OpPlanMla, DeterministicSplitsByKeysOnly) {
  cuda::mla::Problem p = mla(2, 1, 16, 5000);
  p.deterministic = true;
  const cuda::mla::Plan c = cuda::mla::make_plan(p, kH200, {}, kPortableBuild);
  EXPECT_EQ(c.split_keys, cuda::mla::kDeterministicSplitKeys);
  EXPECT_EQ(c.num_splits, (79 * 64 + 1023) / 1024);  // 79 pages of 64 keys
  p.b = 256;
  p.total_q = 256;
  EXPECT_EQ(cuda::mla::make_plan(p, kH200, {}, kPortableBuild).num_splits, c.num_splits);
}

cuda::mla::Problem mla_fp8(int64_t b, int q_len, int h_q, int64_t ctx, int page = 64);

TEST(OpPlanMla, HopperKernelOnSm90) {
  using cuda::mla::Kernel;
  // b128 x 8K, h_q 128: two 64-row blocks per request, 256 CTAs on 132 SMs: no split.
  const cuda::mla::Plan h128 = cuda::mla::make_plan(mla(128, 1, 128, 8192), kH200, {}, kSm90Build);
  EXPECT_EQ(h128.kernel, Kernel::sm90);
  EXPECT_EQ(h128.rows_per_block, cuda::mla90::kRows);
  EXPECT_EQ(h128.m_blocks, 2);
  EXPECT_EQ(h128.num_splits, 1);
  EXPECT_EQ(h128.smem, cuda::mla90::smem_bytes());
  EXPECT_LE(h128.smem, kH200.smem_per_block);
  EXPECT_EQ(workspace_size(h128), 0u);
  // b64, s_q 2, h_q 128: 256 packed rows per request = 4 blocks.
  EXPECT_EQ(cuda::mla::make_plan(mla(64, 2, 128, 4096), kH200, {}, kSm90Build).m_blocks, 4);
  // b16 x 32K: 32 CTAs split 4 ways (128 of 132 SMs), with the partial states' workspace.
  const cuda::mla::Plan b16 = cuda::mla::make_plan(mla(16, 1, 128, 32768), kH200, {}, kSm90Build);
  EXPECT_EQ(b16.kernel, Kernel::sm90);
  EXPECT_EQ(b16.num_splits, 4);
  const std::size_t rows = 16 * 128;
  EXPECT_EQ(workspace_size(b16), cuda::align_up(4 * rows * 512 * 4) + cuda::align_up(4 * rows * 4));
  // Every head count, also part of one block (h_q 16: 16 of 64 rows).
  EXPECT_EQ(cuda::mla::make_plan(mla(128, 1, 64, 8192), kH200, {}, kSm90Build).kernel, Kernel::sm90);
  EXPECT_EQ(cuda::mla::make_plan(mla(128, 1, 32, 8192), kH200, {}, kSm90Build).kernel, Kernel::sm90);
  const cuda::mla::Plan h16 = cuda::mla::make_plan(mla(128, 1, 16, 8192), kH200, {}, kSm90Build);
  EXPECT_EQ(h16.kernel, Kernel::sm90);
  EXPECT_EQ(h16.m_blocks, 1);
  EXPECT_EQ(h16.rows_per_block, 64);
  EXPECT_EQ(cuda::mla::make_plan(mla(128, 2, 20, 8192), kH200, {}, kSm90Build).m_blocks, 1);  // 40 rows
  EXPECT_EQ(cuda::mla::make_plan(mla(128, 4, 20, 8192), kH200, {}, kSm90Build).m_blocks, 2);  // 80 rows
  // The bf16 producer: TMA boxes where a 64-key tile is one page's part (page_size % 64 == 0), by default
  // where a request spans >= 2 row blocks (h_q 128, or s_q 2 at h_q 64), or when asked; cp.async at other
  // page sizes, with one row block per request by default, or sm90_tma = 0; on an FP8 cache wherever it applies.
  EXPECT_TRUE(h128.sm90_tma);
  EXPECT_TRUE(cuda::mla::make_plan(mla(64, 2, 64, 4096), kH200, {}, kSm90Build).sm90_tma);
  EXPECT_FALSE(h16.sm90_tma);
  EXPECT_FALSE(cuda::mla::make_plan(mla(128, 1, 64, 8192), kH200, {}, kSm90Build).sm90_tma);
  EXPECT_FALSE(cuda::mla::make_plan(mla(128, 1, 128, 8192, 16), kH200, {}, kSm90Build).sm90_tma);
  EXPECT_TRUE(cuda::mla::make_plan(mla(128, 1, 16, 8192), kH200, {.sm90_tma = 1}, kSm90Build).sm90_tma);
  for (int page : {64, 128, 256})
    EXPECT_TRUE(cuda::mla::make_plan(mla(128, 1, 128, 8192, page), kH200, {.sm90_tma = 1}, kSm90Build).sm90_tma);
  for (int page : {1, 16, 32, 96})
    EXPECT_FALSE(cuda::mla::make_plan(mla(128, 1, 128, 8192, page), kH200, {.sm90_tma = 1}, kSm90Build).sm90_tma);
  EXPECT_FALSE(cuda::mla::make_plan(mla(128, 1, 128, 8192), kH200, {.sm90_tma = 0}, kSm90Build).sm90_tma);
  EXPECT_TRUE(cuda::mla::make_plan(mla_fp8(128, 1, 128, 8192), kH200, {}, kSm90Build).sm90_tma);
  EXPECT_TRUE(cuda::mla::make_plan(mla_fp8(128, 1, 16, 8192), kH200, {}, kSm90Build).sm90_tma);  // one row block too
  EXPECT_FALSE(cuda::mla::make_plan(mla_fp8(128, 1, 16, 8192, 1), kH200, {}, kSm90Build).sm90_tma);
  EXPECT_FALSE(cuda::mla::make_plan(mla_fp8(128, 1, 16, 8192), kH200, {.sm90_tma = 0}, kSm90Build).sm90_tma);
  EXPECT_TRUE(cuda::mla::make_plan(mla_fp8(128, 1, 16, 8192), kH200, {.sm90_tma = 1}, kSm90Build).sm90_tma);
  EXPECT_FALSE(cuda::mla::make_plan(mla_fp8(128, 1, 16, 8192, 1), kH200, {.sm90_tma = 1}, kSm90Build).sm90_tma);
  // Forced splits apply to it; pinned portable fields and sm90 = 0 keep the portable kernel.
  EXPECT_EQ(cuda::mla::make_plan(mla(2, 1, 128, 1000), kH200, {.num_splits = 3, .sm90 = 1}, kSm90Build).num_splits, 3);
  EXPECT_EQ(cuda::mla::make_plan(mla(128, 1, 128, 8192), kH200, {.rows_per_block = 32}, kSm90Build).kernel,
            Kernel::sm80);
  EXPECT_EQ(cuda::mla::make_plan(mla(128, 1, 128, 8192), kH200, {.stages = 3}, kSm90Build).kernel, Kernel::sm80);
  EXPECT_EQ(cuda::mla::make_plan(mla(128, 1, 128, 8192), kH200, {.sm90 = 0}, kSm90Build).kernel, Kernel::sm80);
}

TEST(OpPlanMla, HopperKernelNeedsItsBuildDeviceAndNondeterminism) {
  using cuda::mla::Kernel;
  // A100: the portable kernel even when forced; HB 32 there (HB 64 with two tiles does not fit).
  const cuda::mla::Plan a100 = cuda::mla::make_plan(mla(128, 1, 128, 8192), kA100, {.sm90 = 1}, kSm90Build);
  EXPECT_EQ(a100.kernel, Kernel::sm80);
  EXPECT_EQ(a100.rows_per_block, 32);
  // A build without sm_90a on an H200.
  EXPECT_EQ(cuda::mla::make_plan(mla(128, 1, 128, 8192), kH200, {.sm90 = 1}, kPortableBuild).kernel, Kernel::sm80);
  // Deterministic mode: the portable kernel with its fixed 1024-key splits.
  cuda::mla::Problem det = mla(128, 1, 128, 8192);
  det.deterministic = true;
  const cuda::mla::Plan d = cuda::mla::make_plan(det, kH200, {.sm90 = 1}, kSm90Build);
  EXPECT_EQ(d.kernel, Kernel::sm80);
  EXPECT_EQ(d.split_keys, cuda::mla::kDeterministicSplitKeys);
  EXPECT_STREQ(cuda::mla::kernel_name(Kernel::sm90), "sm90");
}

// FP8-656 cache (u8 rows of 656 bytes): the Hopper kernel with the bf16 kernel's shared memory (raw tokens
// staged in the bf16 stage); the portable kernel's ring of raw tiles plus one bf16 tile; deterministic as bf16.
cuda::mla::Problem mla_fp8(int64_t b, int q_len, int h_q, int64_t ctx, int page) {
  cuda::mla::Problem p = mla(b, q_len, h_q, ctx, page);
  p.kv_dtype = DType::u8;
  p.d_kv = 656;
  return p;
}

TEST(OpPlanMla, Fp8CacheOnBothKernels) {
  using cuda::mla::Kernel;
  EXPECT_TRUE(cuda::mla::can_implement(mla_fp8(1, 1, 16, 64), kH200).ok());
  const cuda::mla::Plan h16 = cuda::mla::make_plan(mla_fp8(128, 1, 16, 8192), kH200, {}, kSm90Build);
  EXPECT_EQ(h16.kernel, Kernel::sm90);
  EXPECT_EQ(h16.smem, cuda::mla90::smem_bytes());
  EXPECT_EQ(cuda::mla::make_plan(mla_fp8(128, 1, 128, 8192), kH200, {}, kSm90Build).m_blocks, 2);
  // Portable: smem = Q + one bf16 tile + stages raw tiles + scores; HB 16 still two CTAs per SM.
  const cuda::mla::Plan p16 = cuda::mla::make_plan(mla_fp8(128, 1, 16, 8192), kH200, {}, kPortableBuild);
  EXPECT_EQ(p16.kernel, Kernel::sm80);
  EXPECT_EQ(p16.smem, cuda::mla::smem_bytes(16, p16.stages, true));
  EXPECT_EQ(cuda::mla::smem_bytes(16, 2, true), cuda::mla::smem_bytes(16, 2) - 2 * cuda::mla::kTileBytes +
                                                    cuda::mla::kTileBytes + 2 * cuda::mla::kRawTileBytes);
  EXPECT_LE(p16.smem, (kH200.smem_per_block + 1024) / 2 - 1024);
  EXPECT_GE(p16.stages, 2);
  const cuda::mla::Plan a100 = cuda::mla::make_plan(mla_fp8(128, 1, 128, 8192), kA100, {.sm90 = 1}, kSm90Build);
  EXPECT_EQ(a100.kernel, Kernel::sm80);
  EXPECT_LE(a100.smem, kA100.smem_per_block);
  cuda::mla::Problem det = mla_fp8(128, 1, 128, 8192);
  det.deterministic = true;
  const cuda::mla::Plan d = cuda::mla::make_plan(det, kH200, {}, kSm90Build);
  EXPECT_EQ(d.kernel, Kernel::sm80);
  EXPECT_EQ(d.split_keys, cuda::mla::kDeterministicSplitKeys);
  // The row width must match the format: 576 bytes of u8 or 656 bf16 values are not a cache.
  cuda::mla::Problem bad = mla_fp8(1, 1, 16, 64);
  bad.d_kv = 576;
  EXPECT_NE(cuda::mla::can_implement(bad, kH200).reason.find("656"), std::string::npos);
  bad = mla(1, 1, 16, 64);
  bad.d_kv = 656;
  EXPECT_FALSE(cuda::mla::can_implement(bad, kH200).ok());
  bad = mla_fp8(1, 1, 16, 64);
  bad.kv_dtype = DType::fp8_e4m3;
  EXPECT_NE(cuda::mla::can_implement(bad, kH200).reason.find("FP8-656"), std::string::npos);
}

TEST(OpPlanMla, CanImplementNamesWhatIsUnsupported) {
  cuda::mla::Problem p = mla(1, 1, 16, 64);
  EXPECT_TRUE(cuda::mla::can_implement(p, kH200).ok());
  p.d_v = 256;
  EXPECT_NE(cuda::mla::can_implement(p, kH200).reason.find("d_v 512 and d_rope 64"), std::string::npos);
  p = mla(1, 1, 16, 64);
  p.dtype = DType::f16;
  EXPECT_NE(cuda::mla::can_implement(p, kH200).reason.find("bf16"), std::string::npos);
  EXPECT_THROW(cuda::mla::make_plan(p, kH200), Error);
}

// ---- Sparse MLA ------------------------------------------------------------------------------------

cuda::sparse_mla_op::Problem sparse(int64_t rows, int h_q, int64_t topk, bool fp8) {
  return cuda::sparse_mla_op::Problem{
      .rows = rows, .h_q = h_q, .d_qk = 576, .topk = topk, .kv_dtype = fp8 ? DType::u8 : DType::bf16};
}

const cuda::sparse_mla_op::Targets kPortableOnly{.sm90a = false}, kWithSm90{.sm90a = true};

TEST(OpPlanSparseMla, HeadBlocksKernelsAndSplits) {
  using cuda::sparse_mla_op::Kernel;
  const auto d16 = cuda::sparse_mla_op::make_plan(sparse(128, 16, 2048, true), kH200, {}, kPortableOnly);
  EXPECT_EQ(d16.kernel, Kernel::sm80_fp8);
  EXPECT_EQ(d16.head_block, 16);
  EXPECT_EQ(d16.ctas_per_sm, 2);
  EXPECT_GE(d16.num_splits, 2);  // 128 CTAs on 264 slots
  EXPECT_GT(workspace_size(d16), 0u);
  const auto d128 = cuda::sparse_mla_op::make_plan(sparse(128, 128, 2048, false), kH200, {}, kPortableOnly);
  EXPECT_EQ(d128.kernel, Kernel::sm80_bf16);
  EXPECT_EQ(d128.head_block, 64);
  EXPECT_EQ(d128.head_blocks, 2);
  EXPECT_EQ(d128.num_splits, 1);
  EXPECT_EQ(workspace_size(d128), 0u);
  EXPECT_EQ(cuda::sparse_mla_op::make_plan(sparse(8, 32, 2048, false), kH200).head_block, 32);
  EXPECT_EQ(cuda::sparse_mla_op::make_plan(sparse(4096, 16, 2048, false), kH200).num_splits, 1);
  EXPECT_EQ(cuda::sparse_mla_op::make_plan(sparse(1, 16, 96, true), kH200, {}, kPortableOnly).num_splits,
            1);  // 3 tiles < 4 per split
  // Deterministic: a split count that does not depend on the batch. The portable kernel runs unsplit; the
  // small-head Hopper kernel splits by the top-k length alone (one split per CTA slot of an SM).
  auto det = sparse(1, 16, 2048, true), det_big = sparse(4096, 16, 2048, true);
  det.deterministic = det_big.deterministic = true;
  EXPECT_EQ(cuda::sparse_mla_op::make_plan(det, kH200, {}, kPortableOnly).num_splits, 1);
  const auto small = cuda::sparse_mla_op::make_plan(det, kH200, {}, kWithSm90);
  EXPECT_EQ(small.kernel, Kernel::sm90_fp8_small);
  EXPECT_EQ(small.num_splits, cuda::sparse_mla_op::make_plan(det_big, kH200, {}, kWithSm90).num_splits);
  EXPECT_EQ(small.num_splits, small.ctas_per_sm);
}

// The Hopper kernel (built and an sm_90 device): the auto choice for head counts that fill its blocks
// of 64, on request for the others; 64-key tiles; never on sm_80.
TEST(OpPlanSparseMla, HopperKernelWhereItFits) {
  using cuda::sparse_mla_op::Kernel;
  using cuda::sparse_mla_op::make_plan;
  const auto d128 = make_plan(sparse(128, 128, 2048, true), kH200, {}, kWithSm90);
  EXPECT_EQ(d128.kernel, Kernel::sm90_fp8_dense);
  EXPECT_EQ(d128.head_block, 64);
  EXPECT_EQ(d128.head_blocks, 2);
  EXPECT_EQ(d128.tile_keys, 64);
  EXPECT_EQ(d128.num_splits, 1);  // 256 CTAs fill 132 SMs
  EXPECT_LE(d128.smem, kH200.smem_per_block);
  EXPECT_EQ(make_plan(sparse(4096, 64, 2048, false), kH200, {}, kWithSm90).kernel, Kernel::sm90_bf16_dense);
  EXPECT_GE(make_plan(sparse(32, 128, 2048, true), kH200, {}, kWithSm90).num_splits, 2);  // 64 CTAs
  EXPECT_EQ(make_plan(sparse(128, 16, 2048, true), kH200, {}, kWithSm90).kernel, Kernel::sm90_fp8_small);
  EXPECT_EQ(make_plan(sparse(128, 32, 2048, true), kH200, {}, kWithSm90).kernel, Kernel::sm90_fp8_small);
  EXPECT_EQ(make_plan(sparse(128, 48, 2048, true), kH200, {}, kWithSm90).kernel, Kernel::sm80_fp8);
  EXPECT_EQ(make_plan(sparse(128, 16, 2048, false), kH200, {}, kWithSm90).kernel, Kernel::sm80_bf16);
  EXPECT_EQ(make_plan(sparse(128, 16, 2048, true), kH200, {.sm90 = 1}, kWithSm90).kernel, Kernel::sm90_fp8);
  EXPECT_EQ(make_plan(sparse(128, 128, 2048, true), kH200, {.sm90 = 0}, kWithSm90).kernel, Kernel::sm80_fp8);
  EXPECT_EQ(make_plan(sparse(128, 128, 2048, true), kA100, {.sm90 = 1}, kWithSm90).kernel, Kernel::sm80_fp8);
  EXPECT_EQ(make_plan(sparse(128, 128, 2048, true), kH200, {.sm90 = 1}, kPortableOnly).kernel, Kernel::sm80_fp8);
  const auto cut = make_plan(sparse(2, 64, 500, true), kH200, {.num_splits = 3}, kWithSm90);
  EXPECT_EQ(cut.num_splits, 3);
  EXPECT_EQ(cut.split_tiles, 3);  // 8 tiles of 64: 3 / 3 / 2
  auto det = sparse(1, 128, 2048, true);
  det.deterministic = true;
  EXPECT_EQ(make_plan(det, kH200, {}, kWithSm90).num_splits, 1);
}

// The small-head FP8 kernel (sm90/small_heads.cuh): the auto choice on sm_90 for an FP8 cache and h_q <= 32
// (16- or 32-head CTAs), never for a bf16 cache, on sm_80, without the build, or when `sm90` is forced
// either way; 64-key tiles in a 4-deep ring; split-K for few rows, none when deterministic.
TEST(OpPlanSparseMla, SmallHeadKernel) {
  using cuda::sparse_mla_op::Kernel;
  using cuda::sparse_mla_op::make_plan;
  const auto h16 = make_plan(sparse(128, 16, 2048, true), kH200, {}, kWithSm90);
  EXPECT_EQ(h16.kernel, Kernel::sm90_fp8_small);
  EXPECT_EQ(h16.head_block, 16);
  EXPECT_EQ(h16.head_blocks, 1);
  EXPECT_EQ(h16.tile_keys, 64);
  EXPECT_EQ(h16.stages, 2);  // two CTAs per SM
  EXPECT_EQ(h16.ctas_per_sm, 2);
  EXPECT_LE(2 * (h16.smem + 1024), kH200.smem_per_block + 1024);
  EXPECT_EQ(h16.num_splits, 2);  // 256 CTAs on 264 slots
  EXPECT_LE(h16.smem, kH200.smem_per_block);
  const auto h32 = make_plan(sparse(128, 32, 2048, true), kH200, {}, kWithSm90);
  EXPECT_EQ(h32.head_block, 32);
  EXPECT_EQ(h32.stages, 4);
  EXPECT_EQ(h32.ctas_per_sm, 1);
  EXPECT_LE(h32.smem, kH200.smem_per_block);
  const auto odd = make_plan(sparse(7, 20, 2048, true), kH200, {}, kWithSm90);
  EXPECT_EQ(odd.kernel, Kernel::sm90_fp8_small);
  EXPECT_EQ(odd.head_block, 32);
  EXPECT_GE(odd.num_splits, 8);  // 7 CTAs unsplit
  EXPECT_GT(workspace_size(odd), 0u);
  auto det = sparse(7, 20, 2048, true);
  det.deterministic = true;
  EXPECT_EQ(make_plan(det, kH200, {}, kWithSm90).num_splits, 1);  // HB 32: one CTA per SM
  auto det16 = sparse(3, 16, 2048, true);
  det16.deterministic = true;
  EXPECT_EQ(make_plan(det16, kH200, {}, kWithSm90).num_splits, 2);  // HB 16: two per SM, whatever the batch
  det16.rows = 4096;
  EXPECT_EQ(make_plan(det16, kH200, {}, kWithSm90).num_splits, 2);
  EXPECT_EQ(make_plan(sparse(128, 16, 2048, true), kH200, {.sm90 = 0}, kWithSm90).kernel, Kernel::sm80_fp8);
  EXPECT_EQ(make_plan(sparse(128, 16, 2048, true), kH200, {.sm90 = 1}, kWithSm90).kernel, Kernel::sm90_fp8);
  EXPECT_EQ(make_plan(sparse(128, 16, 2048, true), kH200, {.sm90 = 0, .small = 1}, kWithSm90).kernel,
            Kernel::sm90_fp8_small);
  EXPECT_EQ(make_plan(sparse(128, 16, 2048, true), kH200, {.small = 0}, kWithSm90).kernel, Kernel::sm80_fp8);
  EXPECT_EQ(make_plan(sparse(128, 16, 2048, true), kA100, {.small = 1}, kWithSm90).kernel, Kernel::sm80_fp8);
  EXPECT_EQ(make_plan(sparse(128, 16, 2048, true), kH200, {.small = 1}, kPortableOnly).kernel, Kernel::sm80_fp8);
  EXPECT_EQ(make_plan(sparse(128, 64, 2048, true), kH200, {.small = 1}, kWithSm90).kernel, Kernel::sm90_fp8_dense);
  const auto cut = make_plan(sparse(2, 16, 500, true), kH200, {.num_splits = 3, .stages = 2}, kWithSm90);
  EXPECT_EQ(cut.num_splits, 3);
  EXPECT_EQ(cut.split_tiles, 3);  // 8 tiles of 64: 3 / 3 / 2
  EXPECT_EQ(cut.stages, 2);
  EXPECT_STREQ(cuda::sparse_mla_op::kernel_name(Kernel::sm90_fp8_small), "sm90_fp8_small");
}

// The dense-schedule kernel (sm90/dense_schedule.cuh, on the dense MLA kernel's schedule): by default (or with
// dense_schedule = 1) on a bf16 cache, h_q a multiple of 64 and the Hopper plan; dense_schedule = 0 keeps sm90_bf16;
// the sm90_bf16 plan's head blocks, tiles, splits and workspace otherwise (one partial-state layout and combine), the
// dense kernel's shared memory plus the key masks.
TEST(OpPlanSparseMla, DenseScheduleKernelByDefault) {
  using cuda::sparse_mla_op::Kernel;
  using cuda::sparse_mla_op::make_plan;
  const cuda::sparse_mla_op::SparseMlaTuning dense{.dense_schedule = 1}, old{.dense_schedule = 0};
  for (int h : {64, 128}) {
    const auto base = make_plan(sparse(4096, h, 2048, false), kH200, old, kWithSm90);
    const auto d = make_plan(sparse(4096, h, 2048, false), kH200, dense, kWithSm90);
    EXPECT_EQ(base.kernel, Kernel::sm90_bf16);
    EXPECT_EQ(d.kernel, Kernel::sm90_bf16_dense);
    EXPECT_EQ(make_plan(sparse(4096, h, 2048, false), kH200, {}, kWithSm90).kernel, Kernel::sm90_bf16_dense);
    EXPECT_EQ(d.head_block, 64);
    EXPECT_EQ(d.head_blocks, h / 64);
    EXPECT_EQ(d.tile_keys, 64);
    EXPECT_EQ(d.stages, 2);
    EXPECT_EQ(d.num_splits, base.num_splits);
    EXPECT_EQ(d.split_tiles, base.split_tiles);
    EXPECT_EQ(d.ws_bytes, base.ws_bytes);
    EXPECT_EQ(d.smem, cuda::mla90::smem_bytes_with_key_mask());
    EXPECT_LE(d.smem, kH200.smem_per_block);
  }
  const auto few = make_plan(sparse(2, 128, 2048, false), kH200, dense, kWithSm90);  // 4 CTAs: split-K
  EXPECT_EQ(few.kernel, Kernel::sm90_bf16_dense);
  EXPECT_GE(few.num_splits, 8);
  EXPECT_EQ(few.ws_bytes, make_plan(sparse(2, 128, 2048, false), kH200, old, kWithSm90).ws_bytes);
  const auto cut = make_plan(sparse(2, 64, 500, false), kH200, {.num_splits = 3, .dense_schedule = 1}, kWithSm90);
  EXPECT_EQ(cut.kernel, Kernel::sm90_bf16_dense);
  EXPECT_EQ(cut.num_splits, 3);
  EXPECT_EQ(cut.split_tiles, 3);
  // Not taken: FP8 cache (its own switch), h_q not a multiple of 64 (padded head blocks keep sm90_bf16), the portable
  // choice, sm_80, a build without sm_90a.
  EXPECT_EQ(
      make_plan(sparse(128, 128, 2048, true), kH200, {.dense_schedule = 1, .dense_schedule_fp8 = 0}, kWithSm90).kernel,
      Kernel::sm90_fp8);
  EXPECT_EQ(make_plan(sparse(128, 96, 2048, false), kH200, {.sm90 = 1, .dense_schedule = 1}, kWithSm90).kernel,
            Kernel::sm90_bf16);
  EXPECT_EQ(make_plan(sparse(128, 16, 2048, false), kH200, dense, kWithSm90).kernel, Kernel::sm80_bf16);
  EXPECT_EQ(make_plan(sparse(128, 128, 2048, false), kH200, {.sm90 = 0, .dense_schedule = 1}, kWithSm90).kernel,
            Kernel::sm80_bf16);
  EXPECT_EQ(make_plan(sparse(128, 128, 2048, false), kA100, dense, kWithSm90).kernel, Kernel::sm80_bf16);
  EXPECT_EQ(make_plan(sparse(128, 128, 2048, false), kH200, dense, kPortableOnly).kernel, Kernel::sm80_bf16);
  auto det = sparse(1, 128, 2048, false);
  det.deterministic = true;
  EXPECT_EQ(make_plan(det, kH200, dense, kWithSm90).num_splits, 1);
  EXPECT_TRUE(cuda::sparse_mla_op::is_sm90(Kernel::sm90_bf16_dense));
  EXPECT_STREQ(cuda::sparse_mla_op::kernel_name(Kernel::sm90_bf16_dense), "sm90_bf16_dense");
  // The FP8-656 cache: its own switch (dense_schedule_fp8; by default on), the sm90_fp8 plan's splits and workspace
  // otherwise.
  const cuda::sparse_mla_op::SparseMlaTuning dense_fp8{.dense_schedule = 0, .dense_schedule_fp8 = 1};
  for (int64_t rows : {128, 32}) {
    const auto base = make_plan(sparse(rows, 128, 2048, true), kH200, {.dense_schedule_fp8 = 0}, kWithSm90);
    const auto d = make_plan(sparse(rows, 128, 2048, true), kH200, dense_fp8, kWithSm90);
    EXPECT_EQ(base.kernel, Kernel::sm90_fp8);
    EXPECT_EQ(d.kernel, Kernel::sm90_fp8_dense);
    EXPECT_EQ(make_plan(sparse(rows, 128, 2048, true), kH200, {}, kWithSm90).kernel, Kernel::sm90_fp8_dense);
    EXPECT_EQ(d.num_splits, base.num_splits);
    EXPECT_EQ(d.split_tiles, base.split_tiles);
    EXPECT_EQ(d.ws_bytes, base.ws_bytes);
    EXPECT_EQ(d.smem, cuda::mla90::smem_bytes_with_key_mask());
  }
  EXPECT_EQ(make_plan(sparse(128, 128, 2048, false), kH200, dense_fp8, kWithSm90).kernel, Kernel::sm90_bf16);
  EXPECT_EQ(make_plan(sparse(128, 16, 2048, true), kH200, dense_fp8, kWithSm90).kernel, Kernel::sm90_fp8_small);
  EXPECT_EQ(make_plan(sparse(128, 128, 2048, true), kH200, dense_fp8, kPortableOnly).kernel, Kernel::sm80_fp8);
  EXPECT_TRUE(cuda::sparse_mla_op::is_sm90(Kernel::sm90_fp8_dense));
  EXPECT_STREQ(cuda::sparse_mla_op::kernel_name(Kernel::sm90_fp8_dense), "sm90_fp8_dense");
}

TEST(OpPlanSparseMla, ForcedSplitsCutTheListEvenly) {
  const auto cut = cuda::sparse_mla_op::make_plan(sparse(2, 16, 500, true), kH200, {.num_splits = 3}, kPortableOnly);
  EXPECT_EQ(cut.num_splits, 3);
  EXPECT_EQ(cut.split_tiles, 6);  // 16 tiles: 6 / 6 / 4
  const auto many = cuda::sparse_mla_op::make_plan(sparse(2, 16, 100, true), kH200, {.num_splits = 8}, kPortableOnly);
  EXPECT_EQ(many.num_splits, 4);  // 100 keys = 4 tiles
  const std::size_t parts = 4 * 2 * 16;
  EXPECT_EQ(workspace_size(many), cuda::align_up(parts * 512 * 4) + cuda::align_up(parts * 2 * 4));
  alignas(256) static char base[1];
  const auto w = cuda::sparse_mla_op::workspace_layout(many, base);
  EXPECT_EQ(reinterpret_cast<char*>(w.part_ml), base + cuda::align_up(parts * 512 * 4));
}

TEST(OpPlanSparseMla, CanImplementNamesWhatIsUnsupported) {
  auto p = sparse(1, 16, 64, false);
  EXPECT_TRUE(cuda::sparse_mla_op::can_implement(p, kH200).ok());
  p.d_qk = 512;
  EXPECT_NE(cuda::sparse_mla_op::can_implement(p, kH200).reason.find("d_qk 576"), std::string::npos);
  p = sparse(1, 16, 64, false);
  p.kv_dtype = DType::f16;
  EXPECT_NE(cuda::sparse_mla_op::can_implement(p, kH200).reason.find("FP8-656"), std::string::npos);
  const DeviceCaps small{.num_sms = 80, .smem_per_block = 48 * 1024, .arch = 80};
  EXPECT_NE(cuda::sparse_mla_op::can_implement(sparse(1, 128, 64, true), small).reason.find("shared memory"),
            std::string::npos);
  EXPECT_THROW(cuda::sparse_mla_op::make_plan(sparse(1, 128, 64, true), small), Error);
}

// ---- Top-k -------------------------------------------------------------------------------------------

TEST(OpPlanTopk, ThreadsPerRowFollowTheRowWidth) {
  using cuda::topk_op::Kernel;
  const auto short_rows = cuda::topk_op::make_plan({.rows = 128, .width = 8192, .k = 2048}, kH200);
  EXPECT_EQ(short_rows.kernel, Kernel::rows_256);
  EXPECT_EQ(short_rows.threads, 256);
  const auto long_rows = cuda::topk_op::make_plan({.rows = 1, .width = 8193, .k = 2048}, kH200);
  EXPECT_EQ(long_rows.kernel, Kernel::rows_1024);
  EXPECT_EQ(long_rows.threads, 1024);
  EXPECT_EQ(workspace_size(long_rows), 0u);
  EXPECT_FALSE(cuda::topk_op::can_implement({.rows = int64_t(1) << 31, .width = 16, .k = 4}, kH200).ok());
}

// ---- Indexer -----------------------------------------------------------------------------------------

TEST(OpPlanIndexer, KernelVariantsGroupsAndColumnBlocks) {
  using cuda::indexer::Kernel;
  const cuda::indexer::Targets
      portable{};  // a build without the Hopper kernel (tests/cpu/test_op_plan_indexer_sm90.cpp: with)
  const auto ragged = cuda::indexer::make_plan({.rows = 9, .heads = 64, .num_cols = 1000}, kH200, {}, portable);
  EXPECT_EQ(ragged.kernel, Kernel::ragged);
  EXPECT_EQ(ragged.rows_per_group, cuda::indexer::kRaggedGroupRows);
  EXPECT_EQ(ragged.num_groups, 3);  // 9 rows in groups of 4
  EXPECT_EQ(ragged.col_blocks, (1000 + cuda::indexer::kColsPerCta - 1) / cuda::indexer::kColsPerCta);
  EXPECT_TRUE(ragged.key_vec16);
  EXPECT_EQ(
      cuda::indexer::make_plan({.rows = 9, .heads = 64, .num_cols = 1000, .q_scale = true}, kH200, {}, portable).kernel,
      Kernel::ragged_q_scale);
  const auto paged = cuda::indexer::make_plan(
      {.paged = true, .rows = 128 * 2, .heads = 64, .num_cols = 32768, .next_n = 2, .page_size = 64}, kH200, {},
      portable);
  EXPECT_EQ(paged.kernel, Kernel::paged);
  EXPECT_EQ(paged.rows_per_group, 2);
  EXPECT_EQ(paged.num_groups, 128);
  EXPECT_EQ(paged.ctas(), 128 * (32768 / cuda::indexer::kColsPerCta));
  EXPECT_TRUE(paged.key_vec16);
  const auto odd = cuda::indexer::make_plan(
      {.paged = true, .rows = 4, .heads = 64, .num_cols = 64, .next_n = 1, .page_size = 2, .q_scale = true}, kH200, {},
      portable);
  EXPECT_EQ(odd.kernel, Kernel::paged_q_scale);
  EXPECT_FALSE(odd.key_vec16);  // pages of 2 x 132 bytes break 16-byte alignment
  EXPECT_FALSE(cuda::indexer::can_implement({.paged = true, .rows = 4, .next_n = 0}, kH200).ok());
  EXPECT_FALSE(cuda::indexer::can_implement({.rows = int64_t(1) << 40, .heads = 64, .num_cols = 1 << 20}, kH200).ok());
}

}  // namespace
}  // namespace attnserve
