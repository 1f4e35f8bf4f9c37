// Local (chunked) attention: the virtual-batch split (seed 001 make_local_attention_virtual_batches,
// SEED_NOTES 1-3) and its block table.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "plan/local_attention.h"
#include "plan_test_util.h"

using namespace attnserve;
using namespace attnserve::test;
using attnserve::plan_detail::VirtualBatch;

namespace {

void split(const std::vector<int32_t>& q, const std::vector<int32_t>& kv, int chunk, std::vector<int32_t>& vq,
           std::vector<int32_t>& vk, std::vector<int32_t>& start, std::vector<int32_t>& cu) {
  std::vector<VirtualBatch> vbs;
  plan_detail::split_virtual_batches(q, kv, chunk, vbs);
  vq.clear(), vk.clear(), start.clear(), cu.assign(1, 0);
  for (const VirtualBatch& v : vbs) {
    vq.push_back(v.q_len), vk.push_back(v.k_len), start.push_back(v.k_start);
    cu.push_back(cu.back() + v.q_len);
  }
}

}  // namespace

// The seed's worked example; its comment's cu_seqlens_q_local [0, 4, 6, 10, 14, 18, 19, 23, 24]
// contradicts its own q lengths: the prefix sums are [0, 2, 4, 5, 9, 13, 14, 18, 19].
TEST(PlanLocal, SeedWorkedExample) {
  std::vector<int32_t> vq, vk, start, cu;
  split({4, 10, 5}, {6, 17, 9}, 4, vq, vk, start, cu);
  EXPECT_EQ(vq, (std::vector<int32_t>{2, 2, 1, 4, 4, 1, 4, 1}));
  EXPECT_EQ(cu, (std::vector<int32_t>{0, 2, 4, 5, 9, 13, 14, 18, 19}));
  EXPECT_EQ(vk, (std::vector<int32_t>{4, 2, 4, 4, 4, 1, 4, 1}));
  EXPECT_EQ(start, (std::vector<int32_t>{0, 4, 4, 8, 12, 16, 4, 8}));
}

// The seed's block-table example (page_size 2, request b owns pages 10b .. 10b + 9) through the
// planner: rows match the seed's listing where they hold keys, and are 0 past a virtual batch's keys.
TEST(PlanLocal, SeedWorkedExampleBlockTablePage2) {
  const int P = 2, ctx = 20;
  std::vector<int32_t> r2t(3 * ctx);
  for (int b = 0; b < 3; ++b)
    for (int p = 0; p < ctx; ++p) r2t[std::size_t(b * ctx + p)] = (10 * b + p / P) * P + p % P;
  DensePlanner planner(DensePlanConfig{.page_size = P, .attention_chunk_size = 4}, Device::cpu());
  planner.init({.max_bs = 4, .max_num_tokens = 64, .max_context_len = ctx});
  TestBatch tb;
  tb.mode = ForwardMode::extend;
  tb.seq = {6, 17, 9}, tb.ext = {4, 10, 5}, tb.pre = {2, 7, 4}, tb.pool = {0, 1, 2};
  const DenseMetadata& m = planner.plan(tb.spec(TensorView::contiguous(r2t.data(), DType::i32, {3, ctx})));
  ASSERT_TRUE(m.has_local_attn);
  const LocalAttentionMetadata& la = m.local_attn_metadata;
  EXPECT_EQ(la.effective_chunk_size, 4);
  EXPECT_EQ(la.num_virtual_batches, 8);
  EXPECT_EQ(read_i32(la.local_query_start_loc), (std::vector<int32_t>{0, 2, 4, 5, 9, 13, 14, 18, 19}));
  EXPECT_EQ(read_i32(la.local_seqused_k), (std::vector<int32_t>{4, 2, 4, 4, 4, 1, 4, 1}));
  // Seed: [[0,1],[2,3],[12,13],[14,15],[16,17],[18,19],[22,23],[24,25]]; pages past a virtual
  // batch's keys (k_len 2 or 1 = one page) are 0 here.
  EXPECT_EQ(read_i32(la.local_block_table),
            (std::vector<int32_t>{0, 1, 2, 0, 12, 13, 14, 15, 16, 17, 18, 0, 22, 23, 24, 0}));
  EXPECT_EQ(la.local_max_query_len, 4);
  EXPECT_EQ(la.local_max_seq_len, 4);
}

TEST(PlanLocal, EffectiveChunkRule) {
  using plan_detail::effective_chunk_size;
  EXPECT_EQ(effective_chunk_size(4, 17, 2), 4);      // longest request beyond the chunk
  EXPECT_EQ(effective_chunk_size(8192, 5, 1), 5);    // page 1: min(chunk, max len), as the seed
  EXPECT_EQ(effective_chunk_size(8192, 10, 4), 12);  // rounded UP to a page (the seed: down, to 8)
  EXPECT_EQ(effective_chunk_size(8192, 12, 4), 12);
  EXPECT_EQ(effective_chunk_size(8, 0, 4), 4);  // at least one page
  EXPECT_EQ(effective_chunk_size(16, 15, 16), 16);
}

// SEED_NOTES 2 and the rounding: with chunk 8192 nothing may be cut. The seed's rule (10 rounded down
// to 8 with page 4) would cut the 10-token request at position 8.
TEST(PlanLocal, EffectiveChunkNeverChangesTheAttention) {
  auto g = rng_for_test();
  TestPool pool(4, 32, 4, g);
  DensePlanConfig cfg{.page_size = 4, .attention_chunk_size = 8192};
  DensePlanner planner(cfg, Device::cpu());
  planner.init({.max_bs = 4, .max_num_tokens = 64, .max_context_len = 32});
  TestBatch tb;
  tb.mode = ForwardMode::extend;
  tb.seq = {10, 3}, tb.ext = {10, 3}, tb.pre = {0, 0}, tb.pool = {0, 1};
  const DenseMetadata& m = planner.plan(tb.spec(pool.view()));
  EXPECT_EQ(m.local_attn_metadata.num_virtual_batches, 2);
  EXPECT_EQ(m.local_attn_metadata.effective_chunk_size, 12);
  check_dense(m, tb, pool, cfg);
}

// SEED_NOTES 3: the longest request longer than the chunk and not a multiple of it.
TEST(PlanLocal, LongestRequestNotAChunkMultiple) {
  auto g = rng_for_test();
  for (int P : {1, 2, 4}) {
    TestPool pool(3, 64, P, g);
    DensePlanConfig cfg{.page_size = P, .attention_chunk_size = 8};
    DensePlanner planner(cfg, Device::cpu());
    planner.init({.max_bs = 3, .max_num_tokens = 128, .max_context_len = 64});
    TestBatch tb;
    tb.mode = ForwardMode::extend;
    tb.seq = {37, 5, 19}, tb.ext = {30, 5, 2}, tb.pre = {7, 0, 17}, tb.pool = {2, 0, 1};
    check_dense(planner.plan(tb.spec(pool.view())), tb, pool, cfg);
  }
}

TEST(PlanLocal, RandomBatchesEveryRowSeesItsChunk) {
  auto g = rng_for_test();
  const SpeculativeConfig spec{.draft_token_num = 5, .num_steps = 4, .step_id = 2};
  for (int iter = 0; iter < 40; ++iter) {
    const int P = std::vector<int>{1, 2, 4, 8}[std::size_t(iter % 4)];
    const int C = P * rand_int(g, 1, 6);
    const ForwardMode mode =
        std::vector<ForwardMode>{ForwardMode::extend, ForwardMode::decode, ForwardMode::target_verify,
                                 ForwardMode::draft_extend, ForwardMode::draft_decode}[std::size_t(iter % 5)];
    TestPool pool(12, 96, P, g);
    DensePlanConfig cfg{.page_size = P, .attention_chunk_size = C, .spec = spec};
    DensePlanner planner(cfg, Device::cpu());
    planner.init({.max_bs = 8, .max_num_tokens = 8 * 40, .max_context_len = 96});  // bs x max_q
    BatchShape shape{.max_ctx = 96, .max_q = 40, .prefix = iter % 3 != 0, .spec = spec};
    TestBatch tb = random_batch(g, mode, rand_int(g, 1, 8), shape, pool);
    SCOPED_TRACE("page " + std::to_string(P) + " chunk " + std::to_string(C));
    check_dense(planner.plan(tb.spec(pool.view())), tb, pool, cfg);
  }
}

TEST(PlanLocal, BoundsHoldForRandomSplits) {
  auto g = rng_for_test();
  std::vector<VirtualBatch> vbs;
  for (int iter = 0; iter < 500; ++iter) {
    const int C = rand_int(g, 1, 20), bs = rand_int(g, 1, 10);
    std::vector<int32_t> q, kv;
    int64_t rows = 0;
    for (int r = 0; r < bs; ++r) {
      q.push_back(rand_int(g, 1, 50));
      kv.push_back(q.back() + rand_int(g, 0, 50));
      rows += q.back();
    }
    plan_detail::split_virtual_batches(q, kv, C, vbs);
    EXPECT_LE(int64_t(vbs.size()), plan_detail::max_virtual_batches_eager(bs, rows, C));
    int64_t seen_rows = 0;
    for (const VirtualBatch& v : vbs) {
      EXPECT_GE(v.q_len, 1);
      EXPECT_LE(v.q_len, v.k_len);
      EXPECT_LE(v.k_len, C);
      EXPECT_EQ(v.k_start % C, 0);
      seen_rows += v.q_len;
    }
    EXPECT_EQ(seen_rows, rows);
  }
}
