// SparsePlanner (nsa_backend.py init_forward_metadata, SEED_NOTES 7-8): expanded per-row lengths,
// their top-k clip and prefix sums, page_table_1 and the real page table, for every mode.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "plan/plan_device.h"
#include "plan_test_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {
const PlanCapacity kCap{.max_bs = 8, .max_num_tokens = 256, .max_context_len = 64};

std::vector<int32_t> hand_table(int rows, int ctx) {
  std::vector<int32_t> v(std::size_t(rows * ctx));
  for (int i = 0; i < rows; ++i)
    for (int p = 0; p < ctx; ++p) v[std::size_t(i * ctx + p)] = 100 * (i + 1) + p;
  return v;
}
}  // namespace

// Query row t of a request with q new tokens and kv keys sees kv - q + 1 + t keys;
// nsa_cache_seqlens = min(that, topk).
TEST(PlanSparse, ExtendExpandedExample) {
  auto r2t = hand_table(4, 16);
  SparsePlanner planner(SparsePlanConfig{.page_size = 1, .topk = 4}, Device::cpu());
  planner.init(kCap);
  TestBatch b;
  b.mode = ForwardMode::extend, b.seq = {5, 4}, b.ext = {3, 1}, b.pre = {2, 3}, b.pool = {0, 2};
  const SparseMetadata& m = planner.plan(b.spec(TensorView::contiguous(r2t.data(), DType::i32, {4, 16})));
  EXPECT_EQ(read_i32(m.nsa_seqlens_expanded), (std::vector<int32_t>{3, 4, 5, 4}));
  EXPECT_EQ(read_i32(m.nsa_cache_seqlens_int32), (std::vector<int32_t>{3, 4, 4, 4}));
  EXPECT_EQ(read_i32(m.nsa_cu_seqlens_k), (std::vector<int32_t>{0, 3, 7, 11, 15}));
  EXPECT_EQ(read_i32(m.nsa_cu_seqlens_q), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(m.nsa_extend_seq_lens_list, (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(read_i32(m.cu_seqlens_q), (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(read_i32(m.cache_seqlens_int32), (std::vector<int32_t>{5, 4}));
  EXPECT_EQ(m.max_seq_len_q, 3);
  EXPECT_EQ(m.max_seq_len_k, 5);
  EXPECT_EQ(m.nsa_max_seqlen_q, 1);
  EXPECT_EQ(read_i32(m.page_table_1), (std::vector<int32_t>{100, 101, 102, 103, 104, 300, 301, 302, 303, 0}));
  EXPECT_EQ(m.real_page_table.data, m.page_table_1.data);
}

TEST(PlanSparse, DecodeExample) {
  auto r2t = hand_table(3, 16);
  SparsePlanner planner(SparsePlanConfig{.page_size = 4, .topk = 6}, Device::cpu());
  planner.init(kCap);
  TestBatch b;
  b.mode = ForwardMode::decode, b.seq = {9, 3}, b.pool = {1, 0};
  const SparseMetadata& m = planner.plan(b.spec(TensorView::contiguous(r2t.data(), DType::i32, {3, 16})));
  EXPECT_EQ(read_i32(m.nsa_seqlens_expanded), (std::vector<int32_t>{9, 3}));
  EXPECT_EQ(read_i32(m.nsa_cache_seqlens_int32), (std::vector<int32_t>{6, 3}));
  EXPECT_EQ(read_i32(m.nsa_cu_seqlens_k), (std::vector<int32_t>{0, 6, 9}));
  EXPECT_EQ(read_i32(m.cu_seqlens_q), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(m.nsa_extend_seq_lens_list, (std::vector<int32_t>{1, 1}));
  EXPECT_EQ(m.max_seq_len_q, 1);
  // Slots 200 + p: page (200 + p) / 4 at positions 0, 4, 8.
  EXPECT_EQ(read_i32(m.real_page_table), (std::vector<int32_t>{50, 51, 52, 25, 0, 0}));
}

// SEED_NOTES 7: one row per draft token, each with its own copy of the request's page-table row.
TEST(PlanSparse, TargetVerifyOneRowPerDraftToken) {
  auto r2t = hand_table(3, 16);
  SparsePlanner planner(SparsePlanConfig{.page_size = 1, .topk = 5, .spec = {.draft_token_num = 3}}, Device::cpu());
  planner.init(kCap);
  TestBatch b;
  b.mode = ForwardMode::target_verify, b.seq = {4, 1}, b.pool = {2, 0};
  const SparseMetadata& m = planner.plan(b.spec(TensorView::contiguous(r2t.data(), DType::i32, {3, 16})));
  EXPECT_EQ(m.num_rows, 6);
  EXPECT_EQ(read_i32(m.cache_seqlens_int32), (std::vector<int32_t>{7, 4}));
  EXPECT_EQ(read_i32(m.cu_seqlens_k), (std::vector<int32_t>{0, 7, 11}));
  EXPECT_EQ(read_i32(m.cu_seqlens_q), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(read_i32(m.nsa_seqlens_expanded), (std::vector<int32_t>{5, 6, 7, 2, 3, 4}));
  EXPECT_EQ(read_i32(m.nsa_cache_seqlens_int32), (std::vector<int32_t>{5, 5, 5, 2, 3, 4}));
  EXPECT_EQ(m.nsa_extend_seq_lens_list, (std::vector<int32_t>(6, 1)));
  EXPECT_EQ(m.max_seq_len_q, 1);
  EXPECT_EQ(m.max_seq_len_k, 7);
  ASSERT_EQ(m.page_table_1.size(0), 6);
  const auto t1 = read_i32(m.page_table_1);
  for (int row = 0; row < 3; ++row)
    for (int j = 0; j < 7; ++j) EXPECT_EQ(t1[std::size_t(row * 7 + j)], 300 + j);
  for (int row = 3; row < 6; ++row)
    for (int j = 0; j < 7; ++j) EXPECT_EQ(t1[std::size_t(row * 7 + j)], j < 4 ? 100 + j : 0);
}

// SEED_NOTES 8: rows are the accepted tokens; kv_len = seq_lens (accepted tokens included).
TEST(PlanSparse, DraftExtendRowsAreAcceptedTokens) {
  auto r2t = hand_table(3, 16);
  SparsePlanner planner(SparsePlanConfig{.page_size = 1, .topk = 64, .spec = {.draft_token_num = 4}}, Device::cpu());
  planner.init(kCap);
  TestBatch b;
  b.mode = ForwardMode::draft_extend, b.seq = {6, 9}, b.ext = {1, 3}, b.pool = {0, 1};
  const SparseMetadata& m = planner.plan(b.spec(TensorView::contiguous(r2t.data(), DType::i32, {3, 16})));
  EXPECT_EQ(m.num_rows, 4);
  EXPECT_EQ(read_i32(m.cu_seqlens_q), (std::vector<int32_t>{0, 1, 4}));
  EXPECT_EQ(read_i32(m.nsa_seqlens_expanded), (std::vector<int32_t>{6, 7, 8, 9}));
  EXPECT_EQ(m.nsa_extend_seq_lens_list, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(m.max_seq_len_q, 3);
}

TEST(PlanSparse, IdleBatchReportsOneQueryRow) {
  // The seed's decode/idle branch reports max_seq_len_q = 1 for an idle (empty) batch (SEED_NOTES 18).
  SparsePlanner planner(SparsePlanConfig{.page_size = 4, .topk = 8}, Device::cpu());
  planner.init({.max_bs = 4, .max_num_tokens = 16, .max_context_len = 16});
  const SparseMetadata& m = planner.plan(BatchSpec{.mode = ForwardMode::idle});
  EXPECT_EQ(m.batch_size, 0);
  EXPECT_EQ(m.num_rows, 0);
  EXPECT_EQ(m.max_seq_len_q, 1);
  EXPECT_EQ(m.max_seq_len_k, 0);
}

TEST(PlanSparse, ClippedRampSumMatchesLoop) {
  auto g = rng_for_test();
  for (int i = 0; i < 2000; ++i) {
    const int a = rand_int(g, -30, 60), n = rand_int(g, 0, 50), k = rand_int(g, 1, 40);
    int64_t want = 0;
    for (int t = 0; t < n; ++t) want += std::min(std::max(a + t, 0), k);
    ASSERT_EQ(plan_detail::clipped_ramp_sum(a, n, k), want) << a << " " << n << " " << k;
  }
}

TEST(PlanSparse, RandomBatchesEveryMode) {
  auto g = rng_for_test();
  const SpeculativeConfig spec{.draft_token_num = 3, .num_steps = 4, .step_id = 2};
  const ForwardMode modes[] = {ForwardMode::decode,        ForwardMode::extend,       ForwardMode::draft_decode,
                               ForwardMode::target_verify, ForwardMode::draft_extend, ForwardMode::idle};
  for (int P : {1, 4, 64})
    for (ForwardMode mode : modes)
      for (int iter = 0; iter < 5; ++iter) {
        TestPool pool(24, 200, P, g);
        SparsePlanConfig cfg{.page_size = P, .topk = rand_int(g, 1, 80), .spec = spec};
        SparsePlanner planner(cfg, Device::cpu());
        planner.init({.max_bs = 16, .max_num_tokens = 600, .max_context_len = 200});
        const int bs = mode == ForwardMode::idle ? 0 : rand_int(g, 1, 16);
        TestBatch b =
            random_batch(g, mode, bs, {.max_ctx = 200, .max_q = 36, .prefix = iter % 2 == 0, .spec = spec}, pool);
        SCOPED_TRACE("page " + std::to_string(P) + " topk " + std::to_string(cfg.topk));
        check_sparse(planner.plan(b.spec(pool.view())), b, pool, cfg);
        TestBatch b2 = random_batch(g, mode, bs, {.max_ctx = 200, .max_q = 36, .spec = spec}, pool);
        check_sparse(planner.plan(b2.spec(pool.view())), b2, pool, cfg);
      }
}

TEST(PlanSparse, MultiStepPlansEveryDraftStep) {
  auto g = rng_for_test();
  TestPool pool(10, 64, 4, g);
  SparsePlanConfig cfg{.page_size = 4, .topk = 9, .spec = {.num_steps = 3}};
  SparseMultiStepPlanner ms(cfg, Device::cpu());
  ms.init({.max_bs = 6, .max_num_tokens = 64, .max_context_len = 64});
  TestBatch b = random_batch(g, ForwardMode::draft_decode, 5, {.max_ctx = 64, .spec = cfg.spec}, pool);
  const auto& plans = ms.plan(b.spec(pool.view()));
  ASSERT_EQ(plans.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    SparsePlanConfig ci = cfg;
    ci.spec.step_id = i;
    check_sparse(*plans[std::size_t(i)], b, pool, ci);
  }
}
