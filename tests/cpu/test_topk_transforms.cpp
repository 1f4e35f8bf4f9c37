// Top-k with the fused slot transforms (decode, prefill, ragged) against brute force, and the
// sparse planner's wiring: rows' lengths = seqlens_expanded, slots through the prefill transform.
#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include "attnserve/ops/topk.h"
#include "test_topk_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

// page_table_1 [n, width] of distinct random token slots.
HostTensor random_slot_table(int64_t n, int64_t width, std::mt19937_64& g) {
  HostTensor t(DType::i32, {n, width});
  std::vector<int32_t> slots(static_cast<size_t>(n * width) * 2);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), g);
  std::copy(slots.begin(), slots.begin() + n * width, t.ptr<int32_t>());
  return t;
}

HostTensor cu_seqlens_of(const std::vector<int>& q_lens) {
  HostTensor cu(DType::i32, {int64_t(q_lens.size()) + 1});
  cu.ptr<int32_t>()[0] = 0;
  for (size_t r = 0; r < q_lens.size(); ++r) cu.ptr<int32_t>()[r + 1] = cu.ptr<int32_t>()[r] + q_lens[r];
  return cu;
}

void random_lengths(TopkProblem& p, std::mt19937_64& g) {
  std::uniform_int_distribution<int32_t> len(0, int32_t(p.width));
  for (int64_t r = 0; r < p.rows; ++r) p.lengths.ptr<int32_t>()[r] = len(g);
  p.lengths.ptr<int32_t>()[0] = int32_t(p.width);
  p.lengths.ptr<int32_t>()[1] = int32_t(p.k / 2);  // short row: slots then -1 padding
}

}  // namespace

TEST(TopkTransform, DecodeUsesTheRowsOwnTable) {
  auto g = rng_for_test();
  TopkProblem p(9, 3000, 256);
  fill_normal(p.row(0), p.rows * p.width, g);
  random_lengths(p, g);
  HostTensor table = random_slot_table(p.rows, 3100, g);
  auto a = p.args();
  a.transform = TopkTransform::decode, a.page_table_1 = table.view;
  p.run(a);
  p.check([&](int64_t row, int64_t j) { return table.ptr<int32_t>()[row * 3100 + j]; });
}

TEST(TopkTransform, PrefillFindsTheRequestFromCuSeqlens) {
  auto g = rng_for_test();
  const std::vector<int> q_lens = {3, 0, 5, 2, 0};  // empty requests included
  const std::vector<int> request_of_row = {0, 0, 0, 2, 2, 2, 2, 2, 3, 3};
  TopkProblem p(10, 2500, 300);
  fill_normal(p.row(0), p.rows * p.width, g);
  random_lengths(p, g);
  HostTensor table = random_slot_table(int64_t(q_lens.size()), 2500, g), cu = cu_seqlens_of(q_lens);
  auto a = p.args();
  a.transform = TopkTransform::prefill, a.page_table_1 = table.view, a.cu_seqlens_q = cu.view;
  p.run(a);
  p.check([&](int64_t row, int64_t j) { return table.ptr<int32_t>()[request_of_row[size_t(row)] * 2500 + j]; });
}

TEST(TopkTransform, RaggedAddsTheRowOffset) {
  auto g = rng_for_test();
  TopkProblem p(8, 4000, 512);
  fill_normal(p.row(0), p.rows * p.width, g);
  random_lengths(p, g);
  p.use_starts = true;
  for (int64_t r = 0; r < p.rows; ++r) {
    p.starts.ptr<int32_t>()[r] = int32_t(r * 7);
    p.lengths.ptr<int32_t>()[r] = std::min(p.lengths.ptr<int32_t>()[r], int32_t(p.width - r * 7));
  }
  HostTensor offsets(DType::i32, {p.rows});
  std::uniform_int_distribution<int32_t> off(0, 1 << 24);
  for (int64_t r = 0; r < p.rows; ++r) offsets.ptr<int32_t>()[r] = off(g);
  auto a = p.args();
  a.transform = TopkTransform::ragged, a.offsets = offsets.view;
  p.run(a);
  p.check([&](int64_t row, int64_t j) { return int32_t(j + offsets.ptr<int32_t>()[row]); });
}

// The sparse planner's shape: request r has q_len new tokens and kv_len keys; its row t sees
// kv_len - q_len + 1 + t keys (seqlens_expanded); scores past that are -inf, as the indexer writes them.
TEST(TopkTransform, SparsePlannerWiringSeqlensExpandedPrefill) {
  auto g = rng_for_test();
  struct Req {
    int q_len, kv_len;
  };
  const std::vector<Req> reqs = {{1, 5000}, {4, 2050}, {7, 2500}, {3, 3}, {2, 2048}, {4, 6000}};
  std::vector<int> q_lens;
  int64_t rows = 0, max_kv = 0;
  for (const Req& q : reqs) q_lens.push_back(q.q_len), rows += q.q_len, max_kv = std::max<int64_t>(max_kv, q.kv_len);
  TopkProblem p(rows, max_kv, 2048);
  std::vector<int64_t> request_of_row;
  for (size_t r = 0; r < reqs.size(); ++r)
    for (int t = 0; t < reqs[r].q_len; ++t) {
      const int64_t row = int64_t(request_of_row.size());
      const int len = reqs[r].kv_len - reqs[r].q_len + 1 + t;
      p.lengths.ptr<int32_t>()[row] = len;
      fill_normal(p.row(row), len, g);
      std::fill(p.row(row) + len, p.row(row) + max_kv, -std::numeric_limits<float>::infinity());
      request_of_row.push_back(int64_t(r));
    }
  HostTensor table = random_slot_table(int64_t(reqs.size()), max_kv, g), cu = cu_seqlens_of(q_lens);
  auto a = p.args();
  a.transform = TopkTransform::prefill, a.page_table_1 = table.view, a.cu_seqlens_q = cu.view;
  p.run(a);
  p.check([&](int64_t row, int64_t j) { return table.ptr<int32_t>()[request_of_row[size_t(row)] * max_kv + j]; });
}

TEST(TopkTransform, BadPrefillCuSeqlens) {
  TopkProblem p(4, 64, 8);
  for (int64_t i = 0; i < p.rows * p.width; ++i) p.row(0)[i] = float(i % 11);
  HostTensor table(DType::i32, {2, 64});
  auto a = p.args();
  a.transform = TopkTransform::prefill, a.page_table_1 = table.view;
  expect_error_naming([&] { topk(a); }, "'cu_seqlens_q'");  // missing
  HostTensor cu = cu_seqlens_of({1, 2});                    // 3 rows, the scores have 4
  a.cu_seqlens_q = cu.view;
  expect_error_naming([&] { topk(a); }, "'cu_seqlens_q'");
  HostTensor cu_long = cu_seqlens_of({1, 2, 1});  // b + 1 = 4 entries for a 2-request table
  a.cu_seqlens_q = cu_long.view;
  expect_error_naming([&] { topk(a); }, "'cu_seqlens_q'");
  HostTensor cu_down(DType::i32, {3});
  cu_down.ptr<int32_t>()[0] = 0, cu_down.ptr<int32_t>()[1] = 5, cu_down.ptr<int32_t>()[2] = 4;
  a.cu_seqlens_q = cu_down.view;
  expect_error_naming([&] { topk(a); }, "'cu_seqlens_q'");
  HostTensor cu_ok = cu_seqlens_of({1, 3}), narrow(DType::i32, {2, 32});
  a.cu_seqlens_q = cu_ok.view;
  EXPECT_NO_THROW(topk(a));
  a.page_table_1 = narrow.view;  // lengths 64 > 32 table columns
  expect_error_naming([&] { topk(a); }, "'page_table_1'");
}
