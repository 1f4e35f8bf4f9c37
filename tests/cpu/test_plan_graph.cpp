// CUDA-graph state of both planners: capture gives views into the static buffers; replay rewrites
// them in place (same addresses, same shapes) with exactly what a fresh plan of the batch gives;
// requests and rows past the live batch are rewritten as padding (SEED_NOTES 6, 9).
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "plan_test_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

const ForwardMode kCapturable[] = {ForwardMode::decode, ForwardMode::draft_decode, ForwardMode::target_verify,
                                   ForwardMode::draft_extend};

// Addresses and shapes of every view, as a flat list.
void add_view(std::vector<int64_t>& v, const TensorView& t) {
  v.push_back(int64_t(reinterpret_cast<intptr_t>(t.data)));
  for (int d = 0; d < t.ndim; ++d) v.push_back(t.shape[std::size_t(d)]), v.push_back(t.strides[std::size_t(d)]);
}
std::vector<int64_t> layout_of(const DenseMetadata& m) {
  std::vector<int64_t> v{m.batch_size, m.num_q_rows, m.max_seq_len_q, m.max_seq_len_k};
  for (const TensorView* t : {&m.cache_seqlens_int32, &m.cu_seqlens_q, &m.cu_seqlens_k, &m.page_table,
                              &m.local_attn_metadata.local_query_start_loc, &m.local_attn_metadata.local_seqused_k,
                              &m.local_attn_metadata.local_block_table})
    add_view(v, *t);
  v.push_back(m.local_attn_metadata.num_virtual_batches);
  return v;
}
std::vector<int64_t> layout_of(const SparseMetadata& m) {
  std::vector<int64_t> v{m.batch_size, m.num_rows, m.max_seq_len_q, m.max_seq_len_k};
  for (const TensorView* t :
       {&m.cache_seqlens_int32, &m.cu_seqlens_q, &m.cu_seqlens_k, &m.page_table_1, &m.real_page_table,
        &m.nsa_seqlens_expanded, &m.nsa_cache_seqlens_int32, &m.nsa_cu_seqlens_q, &m.nsa_cu_seqlens_k})
    add_view(v, *t);
  return v;
}

constexpr int kMaxBs = 8, kCtx = 120;
const PlanCapacity kCap{.max_bs = kMaxBs, .max_num_tokens = 64, .max_context_len = kCtx};
const SpeculativeConfig kSpec{.draft_token_num = 4, .num_steps = 3, .step_id = 1};

BatchShape shape() { return {.max_ctx = kCtx, .max_q = 8, .spec = kSpec}; }

}  // namespace

TEST(PlanGraph, DenseReplayEqualsFreshPlan) {
  auto g = rng_for_test();
  for (int P : {1, 4})
    for (int chunk : {0, 2 * P, 16 * P})
      for (ForwardMode mode : kCapturable) {
        SCOPED_TRACE(std::string(to_string(mode)) + " page " + std::to_string(P) + " chunk " + std::to_string(chunk));
        TestPool pool(16, kCtx, P, g);
        DensePlanConfig cfg{
            .page_size = P, .attention_chunk_size = chunk, .sliding_window_size = chunk ? -1 : 32, .spec = kSpec};
        DensePlanner graph(cfg, Device::cpu()), fresh(cfg, Device::cpu());
        graph.init(kCap);
        fresh.init(kCap);
        for (int bs : {1, 3, kMaxBs}) {
          const DenseMetadata& cap = graph.capture(bs, mode);
          EXPECT_TRUE(cap.captured);
          const std::vector<int64_t> addresses = layout_of(cap);
          for (int live : {bs, std::max(1, bs / 2), bs}) {
            TestBatch b = random_batch(g, mode, live, shape(), pool);
            const DenseMetadata& rep = graph.replay(bs, mode, b.spec(pool.view()));
            EXPECT_EQ(&rep, &cap);
            EXPECT_EQ(layout_of(rep), addresses) << "replay moved or reshaped a view";
            check_dense(rep, b, pool, cfg);
            const DenseMetadata& eager = fresh.plan(b.spec(pool.view()));
            EXPECT_EQ(live_contents(rep, live, P), live_contents(eager, live, P));
          }
        }
      }
}

TEST(PlanGraph, SparseReplayEqualsFreshPlan) {
  auto g = rng_for_test();
  for (int P : {1, 16})
    for (ForwardMode mode : kCapturable) {
      SCOPED_TRACE(std::string(to_string(mode)) + " page " + std::to_string(P));
      TestPool pool(16, kCtx, P, g);
      SparsePlanConfig cfg{.page_size = P, .topk = 7, .spec = kSpec};
      SparsePlanner graph(cfg, Device::cpu()), fresh(cfg, Device::cpu());
      graph.init(kCap);
      fresh.init(kCap);
      const int per = mode == ForwardMode::target_verify ? kSpec.draft_token_num : 1;
      for (int bs : {1, 5, kMaxBs}) {
        const SparseMetadata& cap = graph.capture(bs, mode);
        const std::vector<int64_t> addresses = layout_of(cap);
        for (int live : {bs, std::max(1, bs - 2), bs}) {
          TestBatch b = random_batch(g, mode, live, shape(), pool);
          const SparseMetadata& rep = graph.replay(bs, mode, b.spec(pool.view()));
          EXPECT_EQ(&rep, &cap);
          EXPECT_EQ(layout_of(rep), addresses) << "replay moved or reshaped a view";
          check_sparse(rep, b, pool, cfg);
          const SparseMetadata& eager = fresh.plan(b.spec(pool.view()));
          EXPECT_EQ(live_contents(rep, live, per), live_contents(eager, live, per));
        }
      }
    }
}

// Graph shapes and host scalars are the capture's bounds, independent of any batch.
TEST(PlanGraph, CapturedBounds) {
  DensePlanner dense(DensePlanConfig{.page_size = 4, .attention_chunk_size = 8, .spec = kSpec}, Device::cpu());
  dense.init(kCap);
  const DenseMetadata& tv = dense.capture(3, ForwardMode::target_verify);
  EXPECT_EQ(tv.max_seq_len_q, 4);
  EXPECT_EQ(tv.max_seq_len_k, kCtx);
  EXPECT_EQ(tv.num_q_rows, 12);
  EXPECT_EQ(tv.page_table.size(1), kCtx / 4);
  EXPECT_EQ(tv.local_attn_metadata.num_virtual_batches, 3 * 2);  // 4 rows cross at most one chunk edge
  EXPECT_EQ(tv.local_attn_metadata.local_block_table.size(1), 2);
  const DenseMetadata& de = dense.capture(3, ForwardMode::draft_extend);  // the seed cannot; we can
  EXPECT_EQ(de.max_seq_len_q, 4);
  EXPECT_EQ(de.num_q_rows, 12);
  const DenseMetadata& dec = dense.capture(5, ForwardMode::decode);
  EXPECT_EQ(dec.max_seq_len_q, 1);
  EXPECT_EQ(read_i32(dec.cu_seqlens_q), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(read_i32(dec.cache_seqlens_int32), (std::vector<int32_t>(5, 0)));  // padding until replay

  SparsePlanner sparse(SparsePlanConfig{.page_size = 4, .topk = 16, .spec = kSpec}, Device::cpu());
  sparse.init(kCap);
  const SparseMetadata& stv = sparse.capture(3, ForwardMode::target_verify);
  EXPECT_EQ(stv.num_rows, 12);
  EXPECT_EQ(stv.page_table_1.size(0), 12);
  EXPECT_EQ(stv.page_table_1.size(1), kCtx);
  EXPECT_EQ(stv.max_seq_len_q, 1);
  const SparseMetadata& sde = sparse.capture(3, ForwardMode::draft_extend);
  EXPECT_EQ(sde.num_rows, 12);
  EXPECT_EQ(sde.page_table_1.size(0), 3);
  EXPECT_EQ(sde.cu_seqlens_q.numel(), 4);
  EXPECT_EQ(sde.max_seq_len_q, 4);
}

// SEED_NOTES 8-9: draft_extend rows past the accepted tokens are rewritten with no keys, and a
// smaller live batch rewrites the requests it no longer has.
TEST(PlanGraph, StaleRowsAreRewritten) {
  auto g = rng_for_test();
  TestPool pool(16, kCtx, 1, g);
  SparsePlanConfig cfg{.page_size = 1, .topk = 50, .spec = kSpec};
  SparsePlanner sparse(cfg, Device::cpu());
  sparse.init(kCap);
  sparse.capture(6, ForwardMode::draft_extend);
  TestBatch full;
  full.mode = ForwardMode::draft_extend;
  for (int r = 0; r < 6; ++r) full.seq.push_back(20 + r), full.ext.push_back(4), full.pool.push_back(r);
  check_sparse(sparse.replay(6, ForwardMode::draft_extend, full.spec(pool.view())), full, pool, cfg);
  TestBatch small;
  small.mode = ForwardMode::draft_extend;
  small.seq = {9, 30}, small.ext = {1, 2}, small.pool = {7, 8};
  const SparseMetadata& m = sparse.replay(6, ForwardMode::draft_extend, small.spec(pool.view()));
  check_sparse(m, small, pool, cfg);
  const auto exp = read_i32(m.nsa_seqlens_expanded), ncu = read_i32(m.nsa_cu_seqlens_k);
  EXPECT_EQ(exp, (std::vector<int32_t>{9, 29, 30, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(ncu.back(), 9 + 29 + 30);
  EXPECT_EQ(read_i32(m.cache_seqlens_int32), (std::vector<int32_t>{9, 30, 0, 0, 0, 0}));
  EXPECT_EQ(read_i32(m.cu_seqlens_q), (std::vector<int32_t>{0, 1, 3, 3, 3, 3, 3}));
  EXPECT_EQ(m.nsa_extend_seq_lens_list, (std::vector<int32_t>{1, 2, 0, 0, 0, 0}));

  DensePlanConfig dcfg{.page_size = 1, .spec = kSpec};
  DensePlanner dense(dcfg, Device::cpu());
  dense.init(kCap);
  dense.capture(6, ForwardMode::target_verify);
  TestBatch tv = random_batch(g, ForwardMode::target_verify, 6, shape(), pool);
  dense.replay(6, ForwardMode::target_verify, tv.spec(pool.view()));
  TestBatch tv2 = random_batch(g, ForwardMode::target_verify, 2, shape(), pool);
  const DenseMetadata& dm = dense.replay(6, ForwardMode::target_verify, tv2.spec(pool.view()));
  check_dense(dm, tv2, pool, dcfg);
  EXPECT_EQ(read_i32(dm.cu_seqlens_q), (std::vector<int32_t>{0, 4, 8, 12, 16, 20, 24}));
}

// Eager plans share the buffers; a replay rewrites everything its graph reads.
TEST(PlanGraph, EagerPlansBetweenReplays) {
  auto g = rng_for_test();
  for (int P : {1, 4}) {
    TestPool pool(16, kCtx, P, g);
    DensePlanConfig dcfg{.page_size = P, .attention_chunk_size = 4 * P, .spec = kSpec};
    SparsePlanConfig scfg{.page_size = P, .topk = 10, .spec = kSpec};
    DensePlanner dense(dcfg, Device::cpu());
    SparsePlanner sparse(scfg, Device::cpu());
    dense.init(kCap);
    sparse.init(kCap);
    const DenseMetadata& dcap = dense.capture(4, ForwardMode::decode);
    const SparseMetadata& scap = sparse.capture(4, ForwardMode::target_verify);
    const auto daddr = layout_of(dcap);
    const auto saddr = layout_of(scap);
    for (int round = 0; round < 3; ++round) {
      TestBatch ext = random_batch(g, ForwardMode::extend, 7, shape(), pool);
      check_dense(dense.plan(ext.spec(pool.view())), ext, pool, dcfg);
      check_sparse(sparse.plan(ext.spec(pool.view())), ext, pool, scfg);
      TestBatch dec = random_batch(g, ForwardMode::decode, 3, shape(), pool);
      check_dense(dense.replay(4, ForwardMode::decode, dec.spec(pool.view())), dec, pool, dcfg);
      TestBatch tv = random_batch(g, ForwardMode::target_verify, 4, shape(), pool);
      check_sparse(sparse.replay(4, ForwardMode::target_verify, tv.spec(pool.view())), tv, pool, scfg);
      EXPECT_EQ(layout_of(dcap), daddr);
      EXPECT_EQ(layout_of(scap), saddr);
    }
  }
}

// Two different batches of the same capacity: identical buffer addresses and sizes; nothing is
// allocated after init.
TEST(PlanGraph, SameCapacitySameAddresses) {
  auto g = rng_for_test();
  TestPool pool(16, kCtx, 4, g);
  SparsePlanner sparse(SparsePlanConfig{.page_size = 4, .topk = 8, .spec = kSpec}, Device::cpu());
  sparse.init(kCap);
  const std::size_t bytes = sparse.device_bytes();
  const SparseMetadata& m = sparse.capture(kMaxBs, ForwardMode::decode);
  TestBatch a = random_batch(g, ForwardMode::decode, kMaxBs, shape(), pool);
  const auto la = layout_of(sparse.replay(kMaxBs, ForwardMode::decode, a.spec(pool.view())));
  TestBatch b = random_batch(g, ForwardMode::decode, 2, shape(), pool);
  const auto lb = layout_of(sparse.replay(kMaxBs, ForwardMode::decode, b.spec(pool.view())));
  EXPECT_EQ(la, lb);
  EXPECT_EQ(la, layout_of(m));
  EXPECT_EQ(sparse.device_bytes(), bytes);
  // Capturing again returns the same metadata object and views.
  EXPECT_EQ(&sparse.capture(kMaxBs, ForwardMode::decode), &m);
  EXPECT_EQ(layout_of(m), la);
}

TEST(PlanGraph, MultiStepCaptureReplay) {
  auto g = rng_for_test();
  for (int P : {1, 4}) {
    TestPool pool(16, kCtx, P, g);
    DensePlanConfig cfg{.page_size = P, .spec = {.num_steps = 4}};
    DenseMultiStepPlanner ms(cfg, Device::cpu());
    ms.init(kCap);
    const std::vector<const DenseMetadata*> caps = ms.capture(5);
    ASSERT_EQ(caps.size(), 3u);
    for (int round = 0; round < 2; ++round) {
      TestBatch b =
          random_batch(g, ForwardMode::draft_decode, round ? 2 : 5, {.max_ctx = kCtx, .spec = cfg.spec}, pool);
      const auto& reps = ms.replay(5, b.spec(pool.view()));
      ASSERT_EQ(reps, caps);
      for (int i = 0; i < 3; ++i) {
        DensePlanConfig ci = cfg;
        ci.spec.step_id = i;
        check_dense(*reps[std::size_t(i)], b, pool, ci);
      }
    }
    SparsePlanConfig scfg{.page_size = P, .topk = 6, .spec = {.num_steps = 3}};
    SparseMultiStepPlanner sms(scfg, Device::cpu());
    sms.init(kCap);
    sms.capture(4);
    TestBatch b = random_batch(g, ForwardMode::draft_decode, 3, {.max_ctx = kCtx, .spec = scfg.spec}, pool);
    const auto& reps = sms.replay(4, b.spec(pool.view()));
    for (int i = 0; i < 2; ++i) {
      SparsePlanConfig ci = scfg;
      ci.spec.step_id = i;
      check_sparse(*reps[std::size_t(i)], b, pool, ci);
    }
  }
}
