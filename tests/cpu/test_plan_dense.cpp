// DensePlanner (seed 001 FlashAttentionBackend.init_forward_metadata): worked examples per mode and
// random batches of every mode, checked row by row against req_to_token.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "plan_test_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

// req_to_token for hand examples: pool row i, position p -> slot 100 * (i + 1) + p.
struct HandTable {
  int rows, ctx;
  std::vector<int32_t> v;
  HandTable(int rows_, int ctx_) : rows(rows_), ctx(ctx_), v(std::size_t(rows_ * ctx_)) {
    for (int i = 0; i < rows; ++i)
      for (int p = 0; p < ctx; ++p) v[std::size_t(i * ctx + p)] = 100 * (i + 1) + p;
  }
  TensorView view() { return TensorView::contiguous(v.data(), DType::i32, {rows, ctx}); }
};

const PlanCapacity kCap{.max_bs = 8, .max_num_tokens = 256, .max_context_len = 64};

}  // namespace

TEST(PlanDense, DecodeExample) {
  HandTable t(4, 16);
  DensePlanner planner(DensePlanConfig{}, Device::cpu());
  planner.init(kCap);
  TestBatch b;
  b.mode = ForwardMode::decode, b.seq = {3, 5}, b.pool = {2, 0};
  const DenseMetadata& m = planner.plan(b.spec(t.view()));
  EXPECT_EQ(read_i32(m.cache_seqlens_int32), (std::vector<int32_t>{3, 5}));
  EXPECT_EQ(read_i32(m.cu_seqlens_q), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(read_i32(m.cu_seqlens_k), (std::vector<int32_t>{0, 3, 8}));
  EXPECT_EQ(m.max_seq_len_q, 1);  // SEED_NOTES 4: the seed leaves 0
  EXPECT_EQ(m.max_seq_len_k, 5);
  EXPECT_EQ(m.num_q_rows, 2);
  EXPECT_EQ(read_i32(m.page_table), (std::vector<int32_t>{300, 301, 302, 0, 0, 100, 101, 102, 103, 104}));
  EXPECT_FALSE(m.has_local_attn);
  EXPECT_EQ(m.window_left, -1);
}

// page_size > 1: req_to_token[:, ::page_size] // page_size.
TEST(PlanDense, PageTableIsStridedReqToToken) {
  const int P = 4, ctx = 32;
  std::vector<int32_t> r2t(2 * ctx);
  for (int p = 0; p < ctx; ++p)
    r2t[std::size_t(p)] = (7 + p / P) * P + p % P, r2t[std::size_t(ctx + p)] = (20 - p / P) * P + p % P;
  DensePlanner planner(DensePlanConfig{.page_size = P}, Device::cpu());
  planner.init(kCap);
  TestBatch b;
  b.mode = ForwardMode::decode, b.seq = {9, 4}, b.pool = {0, 1};
  const DenseMetadata& m = planner.plan(b.spec(TensorView::contiguous(r2t.data(), DType::i32, {2, ctx})));
  EXPECT_EQ(read_i32(m.page_table), (std::vector<int32_t>{7, 8, 9, 20, 0, 0}));
}

TEST(PlanDense, ExtendWithoutPrefixSharesCuSeqlensK) {
  HandTable t(4, 16);
  DensePlanner planner(DensePlanConfig{}, Device::cpu());
  planner.init(kCap);
  TestBatch b;
  b.mode = ForwardMode::extend, b.seq = {3, 6}, b.ext = {3, 6}, b.pre = {0, 0}, b.pool = {1, 3};
  const DenseMetadata& m = planner.plan(b.spec(t.view()));
  EXPECT_EQ(m.cu_seqlens_q.data, m.cu_seqlens_k.data);
  EXPECT_EQ(read_i32(m.cu_seqlens_q), (std::vector<int32_t>{0, 3, 9}));
  EXPECT_EQ(m.max_seq_len_q, 6);
  EXPECT_EQ(m.max_seq_len_k, 6);
  EXPECT_EQ(m.num_q_rows, 9);
}

TEST(PlanDense, ExtendWithPrefix) {
  HandTable t(4, 16);
  DensePlanner planner(DensePlanConfig{}, Device::cpu());
  planner.init(kCap);
  TestBatch b;
  b.mode = ForwardMode::extend, b.seq = {5, 6}, b.ext = {2, 6}, b.pre = {3, 0}, b.pool = {1, 3};
  const DenseMetadata& m = planner.plan(b.spec(t.view()));
  EXPECT_NE(m.cu_seqlens_q.data, m.cu_seqlens_k.data);
  EXPECT_EQ(read_i32(m.cu_seqlens_q), (std::vector<int32_t>{0, 2, 8}));
  EXPECT_EQ(read_i32(m.cu_seqlens_k), (std::vector<int32_t>{0, 5, 11}));
  EXPECT_EQ(m.max_seq_len_q, 6);
  EXPECT_EQ(m.max_seq_len_k, 6);
}

// Draft step i: lengths + i + 1, the draft slots of steps 0..i in the page table (request-major
// draft_slots, SEED_NOTES 5).
TEST(PlanDense, DraftDecodeWritesDraftSlots) {
  HandTable t(4, 16);
  DensePlanner planner(DensePlanConfig{.spec = {.num_steps = 3, .step_id = 1}}, Device::cpu());
  planner.init(kCap);
  TestBatch b;
  b.mode = ForwardMode::draft_decode, b.seq = {2, 4}, b.pool = {0, 2};
  b.num_steps = 3, b.drafts = {900, 901, 902, 910, 911, 912};
  const DenseMetadata& m = planner.plan(b.spec(t.view()));
  EXPECT_EQ(read_i32(m.cache_seqlens_int32), (std::vector<int32_t>{4, 6}));
  EXPECT_EQ(read_i32(m.cu_seqlens_q), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(m.max_seq_len_k, 6);
  EXPECT_EQ(read_i32(m.page_table), (std::vector<int32_t>{100, 101, 900, 901, 0, 0, 300, 301, 302, 303, 910, 911}));
}

TEST(PlanDense, TargetVerifyExample) {
  HandTable t(4, 16);
  DensePlanner planner(DensePlanConfig{.spec = {.draft_token_num = 3}}, Device::cpu());
  planner.init(kCap);
  TestBatch b;
  b.mode = ForwardMode::target_verify, b.seq = {2, 5}, b.pool = {3, 1};
  const DenseMetadata& m = planner.plan(b.spec(t.view()));
  EXPECT_EQ(read_i32(m.cache_seqlens_int32), (std::vector<int32_t>{5, 8}));
  EXPECT_EQ(read_i32(m.cu_seqlens_q), (std::vector<int32_t>{0, 3, 6}));
  EXPECT_EQ(read_i32(m.cu_seqlens_k), (std::vector<int32_t>{0, 5, 13}));
  EXPECT_EQ(m.max_seq_len_q, 3);
  EXPECT_EQ(m.max_seq_len_k, 8);
  EXPECT_EQ(m.num_q_rows, 6);
}

TEST(PlanDense, DraftExtendExample) {
  HandTable t(4, 16);
  DensePlanner planner(DensePlanConfig{.spec = {.draft_token_num = 4}}, Device::cpu());
  planner.init(kCap);
  TestBatch b;
  b.mode = ForwardMode::draft_extend, b.seq = {7, 3}, b.ext = {2, 3}, b.pool = {0, 1};
  const DenseMetadata& m = planner.plan(b.spec(t.view()));
  EXPECT_EQ(read_i32(m.cache_seqlens_int32), (std::vector<int32_t>{7, 3}));
  EXPECT_EQ(read_i32(m.cu_seqlens_q), (std::vector<int32_t>{0, 2, 5}));
  EXPECT_EQ(m.max_seq_len_q, 3);
  EXPECT_EQ(m.max_seq_len_k, 7);
}

TEST(PlanDense, IdleIsEmpty) {
  DensePlanner planner(DensePlanConfig{.attention_chunk_size = 4}, Device::cpu());
  planner.init(kCap);
  BatchSpec b;
  b.mode = ForwardMode::idle;
  const DenseMetadata& m = planner.plan(b);
  EXPECT_EQ(m.batch_size, 0);
  EXPECT_EQ(m.cache_seqlens_int32.numel(), 0);
  EXPECT_EQ(read_i32(m.cu_seqlens_q), (std::vector<int32_t>{0}));
  EXPECT_EQ(read_i32(m.cu_seqlens_k), (std::vector<int32_t>{0}));
  EXPECT_EQ(m.page_table.numel(), 0);
  EXPECT_FALSE(m.has_local_attn);
}

TEST(PlanDense, SlidingWindow) {
  HandTable t(2, 8);
  DensePlanner planner(DensePlanConfig{.sliding_window_size = 128}, Device::cpu());
  planner.init(kCap);
  TestBatch b;
  b.mode = ForwardMode::decode, b.seq = {3}, b.pool = {1};
  const DenseMetadata& m = planner.plan(b.spec(t.view()));
  EXPECT_EQ(m.window_left, 128);
  EXPECT_EQ(m.window_right, 0);
}

TEST(PlanDense, RandomBatchesEveryMode) {
  auto g = rng_for_test();
  const SpeculativeConfig spec{.draft_token_num = 4, .num_steps = 5, .step_id = 3};
  const ForwardMode modes[] = {ForwardMode::decode,        ForwardMode::extend,       ForwardMode::draft_decode,
                               ForwardMode::target_verify, ForwardMode::draft_extend, ForwardMode::idle};
  for (int P : {1, 2, 16})
    for (ForwardMode mode : modes)
      for (int iter = 0; iter < 6; ++iter) {
        TestPool pool(24, 160, P, g);
        DensePlanConfig cfg{.page_size = P, .spec = spec};
        DensePlanner planner(cfg, Device::cpu());
        planner.init({.max_bs = 16, .max_num_tokens = 16 * 48, .max_context_len = 160});  // bs x max_q
        const int bs = mode == ForwardMode::idle ? 0 : rand_int(g, 1, 16);
        TestBatch b =
            random_batch(g, mode, bs, {.max_ctx = 160, .max_q = 48, .prefix = iter % 2 == 0, .spec = spec}, pool);
        SCOPED_TRACE("page " + std::to_string(P) + " iter " + std::to_string(iter));
        check_dense(planner.plan(b.spec(pool.view())), b, pool, cfg);
        // The same planner again, another batch: buffers are reused.
        TestBatch b2 = random_batch(g, mode, bs, {.max_ctx = 160, .max_q = 48, .spec = spec}, pool);
        check_dense(planner.plan(b2.spec(pool.view())), b2, pool, cfg);
      }
}

TEST(PlanDense, MultiStepPlansEveryDraftStep) {
  auto g = rng_for_test();
  const int steps = 4;
  for (int P : {1, 4}) {
    TestPool pool(10, 64, P, g);
    DensePlanConfig cfg{.page_size = P, .attention_chunk_size = 2 * P, .spec = {.num_steps = steps}};
    DenseMultiStepPlanner ms(cfg, Device::cpu());
    ms.init({.max_bs = 6, .max_num_tokens = 64, .max_context_len = 64});
    ASSERT_EQ(ms.num_plans(), steps - 1);
    TestBatch b = random_batch(g, ForwardMode::draft_decode, 6, {.max_ctx = 64, .spec = {.num_steps = steps}}, pool);
    const auto& plans = ms.plan(b.spec(pool.view()));
    ASSERT_EQ(int(plans.size()), steps - 1);
    for (int i = 0; i < steps - 1; ++i) {
      SCOPED_TRACE("step " + std::to_string(i));
      DensePlanConfig ci = cfg;
      ci.spec.step_id = i;
      check_dense(*plans[std::size_t(i)], b, pool, ci);
      if (i > 0) EXPECT_NE(plans[std::size_t(i)]->page_table.data, plans[std::size_t(i) - 1]->page_table.data);
    }
  }
}

TEST(PlanDense, RequestsMayShareAPoolRow) {
  auto g = rng_for_test();
  TestPool pool(2, 32, 1, g);
  DensePlanConfig cfg{};
  DensePlanner planner(cfg, Device::cpu());
  planner.init(kCap);
  TestBatch b;
  b.mode = ForwardMode::decode, b.seq = {5, 9, 1}, b.pool = {1, 1, 0};
  check_dense(planner.plan(b.spec(pool.view())), b, pool, cfg);
}

// Draft positions are never read from req_to_token: its rows may end at seq_lens.
TEST(PlanDense, DraftDecodeTableMayEndAtSeqLens) {
  for (int P : {1, 2}) {
    HandTable t(2, 6);
    if (P == 2)
      for (int i = 0; i < 2; ++i)
        for (int p = 0; p < 6; ++p) t.v[std::size_t(i * 6 + p)] = (50 * (i + 1) + p / 2) * 2 + p % 2;
    DensePlanner planner(DensePlanConfig{.page_size = P, .spec = {.num_steps = 2, .step_id = 1}}, Device::cpu());
    planner.init(kCap);
    TestBatch b;
    b.mode = ForwardMode::draft_decode, b.seq = {6, 3}, b.pool = {0, 1}, b.num_steps = 2;
    b.drafts = P == 1 ? std::vector<int32_t>{900, 901, 910, 911} : std::vector<int32_t>{80, 81, 203, 92};
    const DenseMetadata& m = planner.plan(b.spec(t.view()));
    if (P == 1)
      EXPECT_EQ(read_i32(m.page_table),
                (std::vector<int32_t>{100, 101, 102, 103, 104, 105, 900, 901, 200, 201, 202, 910, 911, 0, 0, 0}));
    else  // pages: request 0 = 50, 51, 52 then the draft page 40; request 1 = 100, 101 (draft 203 completes page 101),
          // 46
      EXPECT_EQ(read_i32(m.page_table), (std::vector<int32_t>{50, 51, 52, 40, 100, 101, 46, 0}));
  }
}
