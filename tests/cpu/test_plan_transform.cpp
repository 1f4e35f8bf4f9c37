// transform_index_page_table: top-k positions -> token slots for decode rows (one page-table row
// each) and prefill rows (cu_seqlens_q maps rows to page-table rows); -1 is kept.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "plan_test_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

struct Case {
  std::vector<int32_t> table, idx, out, cu;
  int R = 0, W = 0, rows = 0, k = 0;
};

Case random_case(std::mt19937_64& g, bool prefill) {
  Case c;
  c.R = rand_int(g, 1, 6), c.W = rand_int(g, 1, 40), c.k = rand_int(g, 1, 12);
  c.table.resize(std::size_t(c.R * c.W));
  for (auto& v : c.table) v = rand_int(g, 0, 100000);
  if (prefill) {
    c.cu.push_back(0);
    for (int r = 0; r < c.R; ++r) c.cu.push_back(c.cu.back() + rand_int(g, 0, 5));
    c.rows = c.cu.back() + rand_int(g, 0, 3);  // rows past cu[R]: graph padding
  } else {
    c.rows = c.R;
  }
  c.idx.resize(std::size_t(c.rows * c.k));
  for (auto& v : c.idx) v = rand_int(g, -3, c.W + 3);  // some -1 / negative / out of range
  c.out.assign(c.idx.size(), 0x7f7f7f7f);
  return c;
}

std::vector<int32_t> reference(const Case& c) {
  std::vector<int32_t> want(c.idx.size());
  for (int i = 0; i < c.rows; ++i) {
    int r = c.cu.empty() ? i : -1;
    for (int q = 0; q < c.R && !c.cu.empty(); ++q)
      if (c.cu[std::size_t(q)] <= i && i < c.cu[std::size_t(q) + 1]) r = q;
    for (int j = 0; j < c.k; ++j) {
      const int p = c.idx[std::size_t(i * c.k + j)];
      want[std::size_t(i * c.k + j)] = (r >= 0 && p >= 0 && p < c.W) ? c.table[std::size_t(r * c.W + p)] : -1;
    }
  }
  return want;
}

TransformIndexArgs args(Case& c) {
  TransformIndexArgs a{.page_table_1 = TensorView::contiguous(c.table.data(), DType::i32, {c.R, c.W}),
                       .topk_indices = TensorView::contiguous(c.idx.data(), DType::i32, {c.rows, c.k}),
                       .out = TensorView::contiguous(c.out.data(), DType::i32, {c.rows, c.k})};
  if (!c.cu.empty()) a.cu_seqlens_q = TensorView::contiguous(c.cu.data(), DType::i32, {c.R + 1});
  return a;
}

}  // namespace

TEST(PlanTransform, DecodeRows) {
  auto g = rng_for_test();
  for (int i = 0; i < 200; ++i) {
    Case c = random_case(g, false);
    transform_index_page_table(args(c));
    ASSERT_EQ(c.out, reference(c));
  }
}

TEST(PlanTransform, PrefillRows) {
  auto g = rng_for_test();
  for (int i = 0; i < 200; ++i) {
    Case c = random_case(g, true);
    transform_index_page_table(args(c));
    ASSERT_EQ(c.out, reference(c));
  }
}

// With the sparse planner's own metadata: extend rows through cu_seqlens_q, verify rows through
// their repeated page-table rows.
TEST(PlanTransform, WithPlannerMetadata) {
  auto g = rng_for_test();
  TestPool pool(8, 64, 1, g);
  SparsePlanConfig cfg{.page_size = 1, .topk = 8, .spec = {.draft_token_num = 3}};
  SparsePlanner planner(cfg, Device::cpu());
  planner.init({.max_bs = 6, .max_num_tokens = 128, .max_context_len = 64});
  for (ForwardMode mode : {ForwardMode::extend, ForwardMode::target_verify, ForwardMode::decode}) {
    TestBatch b = random_batch(g, mode, 5, {.max_ctx = 64, .max_q = 10, .spec = cfg.spec}, pool);
    const SparseMetadata& m = planner.plan(b.spec(pool.view()));
    const std::vector<int32_t> exp = read_i32(m.nsa_seqlens_expanded);
    std::vector<int32_t> idx(std::size_t(m.num_rows) * 8), out(idx.size());
    for (int i = 0; i < m.num_rows; ++i)
      for (int j = 0; j < 8; ++j)
        idx[std::size_t(i * 8 + j)] = j < exp[std::size_t(i)] ? rand_int(g, 0, exp[std::size_t(i)] - 1) : -1;
    TransformIndexArgs a{.page_table_1 = m.page_table_1,
                         .topk_indices = TensorView::contiguous(idx.data(), DType::i32, {m.num_rows, 8}),
                         .out = TensorView::contiguous(out.data(), DType::i32, {m.num_rows, 8})};
    if (mode == ForwardMode::extend) a.cu_seqlens_q = m.cu_seqlens_q;
    transform_index_page_table(a);
    const auto cu = read_i32(m.cu_seqlens_q);
    for (int i = 0, pr = 0; i < m.num_rows; ++i) {
      while (cu[std::size_t(pr) + 1] <= i) ++pr;
      const int r = mode == ForwardMode::target_verify ? pr / 3 : pr;
      for (int j = 0; j < 8; ++j) {
        const int p = idx[std::size_t(i * 8 + j)];
        ASSERT_EQ(out[std::size_t(i * 8 + j)], p < 0 ? -1 : expected_slot(b, pool, r, p)) << to_string(mode);
      }
    }
  }
}

TEST(PlanTransform, BadArguments) {
  std::vector<int32_t> t(12), i(6), o(6), cu(2);
  auto v = [](std::vector<int32_t>& x, std::initializer_list<int64_t> s) {
    return TensorView::contiguous(x.data(), DType::i32, s);
  };
  auto expect_error = [](const TransformIndexArgs& a, const std::string& needle) {
    try {
      transform_index_page_table(a);
      ADD_FAILURE() << "no error, expected " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error({.page_table_1 = v(t, {3, 4}), .topk_indices = v(i, {3, 2}), .out = v(o, {2, 3})},
               "'out' has shape [2, 3]");
  expect_error({.page_table_1 = v(t, {2, 6}), .topk_indices = v(i, {3, 2}), .out = v(o, {3, 2})},
               "one 'page_table_1' row per query row");
  expect_error(
      {.page_table_1 = v(t, {3, 4}), .topk_indices = v(i, {3, 2}), .out = v(o, {3, 2}), .cu_seqlens_q = v(cu, {2})},
      "'cu_seqlens_q' has shape [2]");
  expect_error({.page_table_1 = v(t, {3, 4}), .topk_indices = {}, .out = v(o, {3, 2})}, "'topk_indices' is required");
}
