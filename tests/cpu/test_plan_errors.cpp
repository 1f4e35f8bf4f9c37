// Bad input gives attnserve::Error naming the problem, and leaves the planner's buffers and
// metadata exactly as they were.
#include <gtest/gtest.h>

#include <functional>

#include "common/test_util.h"
#include "plan_test_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an attnserve::Error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

// Every view's address, shape and full contents, and the host fields.
std::vector<int64_t> dump(const DenseMetadata& m) {
  std::vector<int64_t> v{int(m.mode),
                         m.batch_size,
                         m.num_q_rows,
                         m.max_seq_len_q,
                         m.max_seq_len_k,
                         m.local_attn_metadata.num_virtual_batches,
                         m.local_attn_metadata.local_max_query_len};
  for (const TensorView* t : {&m.cache_seqlens_int32, &m.cu_seqlens_q, &m.cu_seqlens_k, &m.page_table,
                              &m.local_attn_metadata.local_query_start_loc, &m.local_attn_metadata.local_seqused_k,
                              &m.local_attn_metadata.local_block_table}) {
    v.push_back(int64_t(reinterpret_cast<intptr_t>(t->data)));
    v.push_back(t->numel());
    for (int32_t x : read_i32(*t)) v.push_back(x);
  }
  return v;
}
std::vector<int64_t> dump(const SparseMetadata& m) {
  std::vector<int64_t> v{int(m.mode), m.batch_size, m.num_rows, m.max_seq_len_q, m.max_seq_len_k};
  v.insert(v.end(), m.nsa_extend_seq_lens_list.begin(), m.nsa_extend_seq_lens_list.end());
  for (const TensorView* t :
       {&m.cache_seqlens_int32, &m.cu_seqlens_q, &m.cu_seqlens_k, &m.page_table_1, &m.real_page_table,
        &m.nsa_seqlens_expanded, &m.nsa_cache_seqlens_int32, &m.nsa_cu_seqlens_q, &m.nsa_cu_seqlens_k}) {
    v.push_back(int64_t(reinterpret_cast<intptr_t>(t->data)));
    v.push_back(t->numel());
    for (int32_t x : read_i32(*t)) v.push_back(x);
  }
  return v;
}

constexpr int kCtx = 48;
const PlanCapacity kCap{.max_bs = 4, .max_num_tokens = 32, .max_context_len = kCtx};
const SpeculativeConfig kSpec{.draft_token_num = 3, .num_steps = 3, .step_id = 1};

// A batch and how to break it.
struct BadCase {
  std::string name, needle;
  std::function<void(TestBatch&)> edit;
  ForwardMode mode;
  std::string replay_needle = "";  // when replay's own check fires first
};

std::vector<BadCase> bad_cases() {
  using M = ForwardMode;
  return {
      {"negative_seq_len", "seq_lens[1] = -1", [](TestBatch& b) { b.seq[1] = -1; }, M::decode},
      {"zero_decode_len", "must be >= 1", [](TestBatch& b) { b.seq[0] = 0; }, M::decode},
      {"prefix_gt_seq_len", "extend_prefix_lens[0] = 40 exceeds seq_lens[0]",
       [](TestBatch& b) { b.pre[0] = 40, b.seq[0] = 20; }, M::extend},
      {"inconsistent_lengths", "inconsistent lengths for request 1", [](TestBatch& b) { b.seq[1] += 1; }, M::extend},
      {"negative_prefix", "extend_prefix_lens[0] = -2 is negative", [](TestBatch& b) { b.pre[0] = -2; }, M::extend},
      {"zero_extend", "extend_seq_lens[1] = 0 must be >= 1", [](TestBatch& b) { b.seq[1] -= b.ext[1], b.ext[1] = 0; },
       M::extend},
      {"missing_prefix_lens", "extend_prefix_lens has 0 entries", [](TestBatch& b) { b.pre.clear(); }, M::extend},
      {"pool_size_mismatch", "req_pool_indices has 1 entries, expected 2", [](TestBatch& b) { b.pool.pop_back(); },
       M::decode},
      {"req_index_out_of_range", "req_pool_indices[1] = 99 is out of range", [](TestBatch& b) { b.pool[1] = 99; },
       M::decode},
      {"req_index_negative", "req_pool_indices[0] = -1 is out of range", [](TestBatch& b) { b.pool[0] = -1; },
       M::target_verify},
      {"bs_over_capacity", "exceeds capacity max_bs 4",
       [](TestBatch& b) {
         for (int i = 0; i < 3; ++i) b.seq.push_back(1), b.pool.push_back(i);
       },
       M::decode},
      {"context_over_capacity", "more than capacity max_context_len 48", [](TestBatch& b) { b.seq[0] = kCtx - 1; },
       M::target_verify},
      {"tokens_over_capacity", "exceed capacity max_num_tokens 32",
       [](TestBatch& b) {
         b.seq = {30, 30}, b.ext = {17, 16}, b.pre = {13, 14};
       },
       M::extend},
      {"draft_slots_size", "draft_slots has 5 entries, expected 6", [](TestBatch& b) { b.drafts.pop_back(); },
       M::draft_decode},
      {"draft_slot_negative", "draft_slots[0, 1] = -3 is negative", [](TestBatch& b) { b.drafts[1] = -3; },
       M::draft_decode},
      {"draft_extend_too_many", "exceeds seq_lens[0]", [](TestBatch& b) { b.ext[0] = b.seq[0] + 1; }, M::draft_extend,
       "extend_seq_lens[0] = 11 accepted tokens exceed spec.draft_token_num 3"},
      {"idle_with_requests", "an idle batch has no requests", [](TestBatch& b) { b.mode = ForwardMode::idle; },
       M::decode},
  };
}

TestBatch good_batch(ForwardMode mode, TestPool& pool) {
  TestBatch b;
  b.mode = mode;
  b.pool = {1, 2};
  b.seq = {10, 7};
  if (mode == ForwardMode::extend) b.ext = {4, 7}, b.pre = {6, 0};
  if (mode == ForwardMode::draft_extend) b.ext = {2, 3};
  if (mode == ForwardMode::draft_decode) {
    b.num_steps = kSpec.num_steps;
    for (int r = 0; r < 2; ++r)
      for (int s = 0; s < b.num_steps; ++s)
        b.drafts.push_back(pool.slot(b.pool[std::size_t(r)], b.seq[std::size_t(r)] + s));
  }
  return b;
}

template <class Planner, class Config>
void run_bad_cases(const Config& cfg, TestPool& pool, const char* prefix) {
  for (const BadCase& c : bad_cases()) {
    SCOPED_TRACE(c.name);
    // A good plan and (another planner) a captured graph first; neither may change below.
    Planner planner(cfg, Device::cpu()), graph_planner(cfg, Device::cpu());
    planner.init(kCap);
    graph_planner.init(kCap);
    TestBatch good = good_batch(c.mode, pool);
    const auto& eager = planner.plan(good.spec(pool.view()));
    const auto before = dump(eager);
    const bool graph = is_graph_capturable(c.mode);
    const typename Planner::Metadata* cap = nullptr;
    std::vector<int64_t> cap_before;
    if (graph) {
      cap = &graph_planner.capture(4, c.mode);
      graph_planner.replay(4, c.mode, good.spec(pool.view()));
      cap_before = dump(*cap);
    }
    TestBatch bad = good;
    c.edit(bad);
    expect_error([&] { planner.validate(bad.spec(pool.view())); }, c.needle);
    expect_error([&] { planner.plan(bad.spec(pool.view())); }, c.needle);
    expect_error([&] { planner.plan(bad.spec(pool.view())); }, prefix);
    EXPECT_EQ(dump(eager), before) << "a failed plan changed the state";
    if (graph && c.name != "idle_with_requests") {
      const bool too_big = bad.bs() > 4;
      expect_error([&] { graph_planner.replay(4, c.mode, bad.spec(pool.view())); },
                   too_big                   ? "does not fit the graph captured for 4"
                   : c.replay_needle.empty() ? c.needle
                                             : c.replay_needle);
      EXPECT_EQ(dump(*cap), cap_before) << "a failed replay changed the captured state";
    }
  }
}

}  // namespace

TEST(PlanErrors, DenseBadBatches) {
  auto g = rng_for_test();
  TestPool pool(4, kCtx, 1, g);
  run_bad_cases<DensePlanner>(DensePlanConfig{.attention_chunk_size = 4, .spec = kSpec}, pool, "DensePlanner::plan");
}

TEST(PlanErrors, SparseBadBatches) {
  auto g = rng_for_test();
  TestPool pool(4, kCtx, 1, g);
  run_bad_cases<SparsePlanner>(SparsePlanConfig{.page_size = 1, .topk = 5, .spec = kSpec}, pool, "SparsePlanner::plan");
}

TEST(PlanErrors, BadConfigAndCapacity) {
  expect_error([] { DensePlanner p(DensePlanConfig{.page_size = 4, .attention_chunk_size = 6}, Device::cpu()); },
               "attention_chunk_size = 6 is not a multiple of page_size = 4");
  expect_error([] { DensePlanner p(DensePlanConfig{.page_size = 0}, Device::cpu()); }, "page_size = 0");
  expect_error([] { SparsePlanner p(SparsePlanConfig{.topk = 0}, Device::cpu()); }, "topk = 0");
  expect_error([] { DensePlanner p(DensePlanConfig{.spec = {.num_steps = 2, .step_id = 2}}, Device::cpu()); },
               "spec.step_id = 2");
  expect_error([] { DenseMultiStepPlanner p(DensePlanConfig{.spec = {.num_steps = 1}}, Device::cpu()); },
               "num_steps = 1 must be >= 2");
  DensePlanner p(DensePlanConfig{}, Device::cpu());
  BatchSpec idle;
  idle.mode = ForwardMode::idle;
  expect_error([&] { p.plan(idle); }, "call init(capacity) first");
  expect_error([&] { p.capture(1, ForwardMode::decode); }, "call init(capacity) first");
  expect_error([&] { p.init({.max_bs = 0, .max_num_tokens = 8, .max_context_len = 8}); }, "max_bs = 0");
  expect_error([&] { p.init({.max_bs = 8, .max_num_tokens = 4, .max_context_len = 8}); }, "max_num_tokens = 4");
  p.init({.max_bs = 8, .max_num_tokens = 8, .max_context_len = 8});
  expect_error([&] { p.init({.max_bs = 8, .max_num_tokens = 8, .max_context_len = 8}); }, "already initialized");
}

TEST(PlanErrors, BadGraphCalls) {
  auto g = rng_for_test();
  TestPool pool(4, kCtx, 4, g);
  DensePlanner dense(DensePlanConfig{.page_size = 4}, Device::cpu());
  dense.init(kCap);
  expect_error([&] { dense.capture(2, ForwardMode::extend); }, "mode extend cannot be captured");
  expect_error([&] { dense.capture(5, ForwardMode::decode); }, "graph batch size 5 is outside [1, max_bs = 4]");
  expect_error([&] { dense.capture(2, ForwardMode::target_verify); }, "needs spec.draft_token_num >= 1");
  expect_error([&] { dense.capture(2, ForwardMode::draft_decode); }, "needs spec.num_steps >= 1");
  TestBatch b = good_batch(ForwardMode::decode, pool);
  expect_error([&] { dense.replay(2, ForwardMode::decode, b.spec(pool.view())); },
               "no graph captured for batch size 2 and mode decode");
  dense.capture(2, ForwardMode::decode);
  expect_error([&] { dense.replay(2, ForwardMode::decode, good_batch(ForwardMode::extend, pool).spec(pool.view())); },
               "the batch's mode extend differs from the graph's mode decode");
  dense.capture(1, ForwardMode::decode);
  expect_error([&] { dense.replay(1, ForwardMode::decode, b.spec(pool.view())); },
               "batch of 2 requests does not fit the graph captured for 1");

  SparsePlanner sparse(SparsePlanConfig{.page_size = 4, .topk = 4, .spec = {.draft_token_num = 9}}, Device::cpu());
  sparse.init(kCap);
  expect_error([&] { sparse.capture(4, ForwardMode::target_verify); }, "exceeds capacity max_num_tokens 32");
  sparse.capture(3, ForwardMode::draft_extend);
  TestBatch de = good_batch(ForwardMode::draft_extend, pool);
  de.ext[1] = 10, de.seq[1] = 12;
  expect_error([&] { sparse.replay(3, ForwardMode::draft_extend, de.spec(pool.view())); },
               "extend_seq_lens[1] = 10 accepted tokens exceed spec.draft_token_num 9");
  // Draft slots must fit the page layout: slot % page_size == position % page_size.
  SparsePlanner dd(SparsePlanConfig{.page_size = 4, .topk = 4, .spec = {.num_steps = 2}}, Device::cpu());
  dd.init(kCap);
  TestBatch d;
  d.mode = ForwardMode::draft_decode, d.seq = {5}, d.pool = {0}, d.num_steps = 2, d.drafts = {41, 42};
  d.drafts[0] = 40;  // position 5 needs slot % 4 == 1
  expect_error([&] { dd.plan(d.spec(pool.view())); }, "cannot hold position 5 with page_size 4");
}

TEST(PlanErrors, BadReqToToken) {
  DensePlanner p(DensePlanConfig{}, Device::cpu());
  p.init(kCap);
  std::vector<int64_t> wide(4 * kCtx);
  std::vector<int32_t> narrow(4 * 8);
  TestBatch b;
  b.mode = ForwardMode::decode, b.seq = {9}, b.pool = {0};
  expect_error([&] { p.plan(b.spec(TensorView{})); }, "req_to_token is required");
  expect_error(
      [&] {
        p.plan(b.spec(TensorView::contiguous(wide.data(), DType::i64, {4, kCtx})));
      },
      "req_to_token must be a 2-D i32 table, got i64");
  expect_error(
      [&] {
        p.plan(b.spec(TensorView::contiguous(narrow.data(), DType::i32, {4, 8})));
      },
      "request 0 needs 9 positions of req_to_token, whose rows hold 8");
  expect_error(
      [&] {
        p.plan(b.spec(TensorView::contiguous(narrow.data(), DType::i32, {4, 8}, Device::cuda(0))));
      },
      "req_to_token is on cuda:0, the planner on cpu");
}
