// The DeepSeek sparse-attention selection chain on the CPU: indexer_paged scores -> topk with the
// seqlens_expanded lengths -> KV token slots through page_table_1 (decode and prefill transforms).
#include <gtest/gtest.h>

#include <string>

#include "attnserve/ops/indexer.h"
#include "attnserve/ops/topk.h"
#include "test_indexer_util.h"
#include "test_topk_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

void run_chain(int next_n, int page_size, int topk_k, std::mt19937_64& g) {
  SCOPED_TRACE("next_n " + std::to_string(next_n) + " page_size " + std::to_string(page_size));
  const std::vector<int> seqlens = {300, next_n, 97, 1 + topk_k};
  const int64_t b = int64_t(seqlens.size()), rows = b * next_n, heads = 8, max_context = 320;
  const int max_pages = int(max_context / page_size) + 1;
  IndexKeyPool kp(seqlens, page_size, max_pages, g);
  HostTensor q = random_fp8_q(rows, heads, g), w = random_weights(rows, heads, g);
  HostTensor sl(DType::i32, {b}), logits(DType::f32, {rows, max_context});
  for (int64_t r = 0; r < b; ++r) sl.ptr<int32_t>()[r] = seqlens[size_t(r)];
  poison(logits);
  indexer_paged({.q = q.view,
                 .weights = w.view,
                 .index_k_cache = kp.pool.view,
                 .page_table = kp.page_table.view,
                 .seqlens = sl.view,
                 .logits = logits.view,
                 .page_size = page_size,
                 .next_n = next_n});

  // The planner's metadata: seqlens_expanded, cu_seqlens_q, page_table_1 (token slots).
  HostTensor lengths(DType::i32, {rows}), cu(DType::i32, {b + 1}), table1(DType::i32, {b, max_context});
  std::fill(table1.ptr<int32_t>(), table1.ptr<int32_t>() + b * max_context, -7);
  for (int64_t r = 0; r <= b; ++r) cu.ptr<int32_t>()[r] = int32_t(r * next_n);
  for (int64_t r = 0; r < b; ++r) {
    for (int t = 0; t < next_n; ++t) lengths.ptr<int32_t>()[r * next_n + t] = seqlens[size_t(r)] - next_n + 1 + t;
    for (int j = 0; j < seqlens[size_t(r)]; ++j) table1.ptr<int32_t>()[r * max_context + j] = kp.slot(r, j);
  }
  HostTensor out(DType::i32, {rows, topk_k});
  poison_i32(out);
  TopkArgs a{.scores = logits.view, .lengths = lengths.view, .out = out.view, .topk = topk_k};
  if (next_n == 1) {
    a.transform = TopkTransform::decode, a.page_table_1 = table1.view;  // one row per request
  } else {
    a.transform = TopkTransform::prefill, a.page_table_1 = table1.view, a.cu_seqlens_q = cu.view;
  }
  topk(a);
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t r = row / next_n, len = lengths.ptr<int32_t>()[row];
    const float* s = logits.ptr<float>() + row * max_context;
    for (int64_t j = len; j < max_context; ++j) ASSERT_EQ(s[j], -INFINITY) << "row " << row << " column " << j;
    std::vector<int32_t> expected;
    for (int64_t j : reference_topk(s, len, topk_k)) expected.push_back(kp.slot(r, j));
    expect_topk_row(out.ptr<int32_t>() + row * topk_k, topk_k, len, expected, row);
  }
}

}  // namespace

TEST(IndexerPipeline, DecodeScoresToSlots) {
  auto g = rng_for_test();
  run_chain(1, 64, 32, g);
  run_chain(1, 1, 64, g);
}

TEST(IndexerPipeline, SpecVerifyScoresToSlots) {
  auto g = rng_for_test();
  for (int next_n : {2, 3, 4}) run_chain(next_n, next_n == 3 ? 1 : 64, 48, g);
}
