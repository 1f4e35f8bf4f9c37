// Lightning-indexer scores (ragged and paged) against brute force.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "attnserve/ops/indexer.h"
#include "test_indexer_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

template <typename Fn>
void expect_error_naming(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error, expected one naming " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// A contiguous key buffer for the ragged form.
struct KeyBuffer {
  HostTensor k, k_scale;
  KeyBuffer(int64_t num_keys, std::mt19937_64& g)
      : k(DType::fp8_e4m3, {num_keys, kIdxDim}), k_scale(DType::f32, {num_keys}) {
    for (int64_t j = 0; j < num_keys; ++j) {
      QuantizedKey q = random_key(g);
      std::memcpy(k.bytes.data() + j * kIdxDim, q.bytes, kIdxDim);
      k_scale.ptr<float>()[j] = q.scale;
    }
  }
};

void run_ragged_case(int64_t rows, int64_t n_heads, int64_t num_keys, std::mt19937_64& g) {
  SCOPED_TRACE("rows " + std::to_string(rows) + " heads " + std::to_string(n_heads) + " keys " +
               std::to_string(num_keys));
  HostTensor q = random_fp8_q(rows, n_heads, g), w = random_weights(rows, n_heads, g);
  KeyBuffer kb(num_keys, g);
  HostTensor ks(DType::i32, {rows}), ke(DType::i32, {rows}), logits(DType::f32, {rows, num_keys});
  std::uniform_int_distribution<int32_t> pos(0, int32_t(num_keys));
  for (int64_t i = 0; i < rows; ++i) {
    int32_t a = pos(g), b = pos(g);
    ks.ptr<int32_t>()[i] = std::min(a, b);
    ke.ptr<int32_t>()[i] = std::max(a, b);
  }
  ks.ptr<int32_t>()[0] = 0, ke.ptr<int32_t>()[0] = int32_t(num_keys);  // the whole buffer
  if (rows > 1) ks.ptr<int32_t>()[1] = ke.ptr<int32_t>()[1] = 5;       // empty window: all -inf
  poison(logits);
  indexer_ragged({.q = q.view,
                  .weights = w.view,
                  .k = kb.k.view,
                  .k_scale = kb.k_scale.view,
                  .ks = ks.view,
                  .ke = ke.view,
                  .logits = logits.view});

  const std::vector<float> qf = to_floats(q), wf = to_floats(w);
  std::vector<double> ref64(size_t(rows * num_keys)), ref32(ref64.size());
  for (int64_t j = 0; j < num_keys; ++j) {
    const std::vector<float> k = decode_key(kb.k.bytes.data() + j * kIdxDim);
    const float scale = kb.k_scale.ptr<float>()[j];
    for (int64_t i = 0; i < rows; ++i) {
      const size_t o = size_t(i * num_keys + j);
      if (j < ks.ptr<int32_t>()[i] || j >= ke.ptr<int32_t>()[i]) {
        ref64[o] = ref32[o] = kNegInf;
        continue;
      }
      const float* qr = qf.data() + i * n_heads * kIdxDim;
      const float* wr = wf.data() + i * n_heads;
      ref64[o] = reference_score<double>(qr, wr, n_heads, k.data(), scale);
      ref32[o] = reference_score<float>(qr, wr, n_heads, k.data(), scale);
    }
  }
  expect_logits_match(logits, ref64, ref32);
}

}  // namespace

TEST(IndexerRagged, RandomWindowsMatchBruteForce) {
  auto g = rng_for_test();
  run_ragged_case(12, 64, 700, g);  // default 64 index heads; two column blocks
}

TEST(IndexerRagged, AnyNumberOfHeads) {
  auto g = rng_for_test();
  run_ragged_case(9, 1, 130, g);
  run_ragged_case(7, 7, 90, g);
  run_ragged_case(1, 32, 40, g);
}

TEST(IndexerRagged, BadArgumentsNameTheArgument) {
  auto g = rng_for_test();
  const int64_t rows = 3, heads = 4, keys = 10;
  HostTensor q = random_fp8_q(rows, heads, g), w = random_weights(rows, heads, g);
  KeyBuffer kb(keys, g);
  HostTensor ks(DType::i32, {rows}), ke(DType::i32, {rows}), logits(DType::f32, {rows, keys});
  for (int i = 0; i < rows; ++i) ks.ptr<int32_t>()[i] = 0, ke.ptr<int32_t>()[i] = int32_t(keys);
  IndexerRaggedArgs ok{.q = q.view,
                       .weights = w.view,
                       .k = kb.k.view,
                       .k_scale = kb.k_scale.view,
                       .ks = ks.view,
                       .ke = ke.view,
                       .logits = logits.view};
  EXPECT_NO_THROW(indexer_ragged(ok));
  HostTensor bad_logits(DType::f32, {rows, keys + 1}), bad_w(DType::f32, {rows, heads + 1});
  HostTensor bad_q(DType::fp8_e4m3, {rows, heads, 64});
  auto a = ok;
  a.logits = bad_logits.view;
  expect_error_naming([&] { indexer_ragged(a); }, "'logits'");
  a = ok, a.weights = bad_w.view;
  expect_error_naming([&] { indexer_ragged(a); }, "'weights'");
  a = ok, a.q = bad_q.view;
  expect_error_naming([&] { indexer_ragged(a); }, "'q'");
  ke.ptr<int32_t>()[1] = int32_t(keys + 1);
  expect_error_naming([&] { indexer_ragged(ok); }, "'ke'");
  ke.ptr<int32_t>()[1] = 2, ks.ptr<int32_t>()[1] = 3;
  expect_error_naming([&] { indexer_ragged(ok); }, "'ks'");
}

// ---- Paged: (next_n, page_size).
class IndexerPaged : public ::testing::TestWithParam<std::tuple<int, int>> {};

namespace {

void run_paged_case(const std::vector<int>& seqlens, int next_n, int page_size, int64_t n_heads, std::mt19937_64& g) {
  SCOPED_TRACE("next_n " + std::to_string(next_n) + " page_size " + std::to_string(page_size));
  const int64_t b = int64_t(seqlens.size()), rows = b * next_n;
  const int max_context = *std::max_element(seqlens.begin(), seqlens.end()) + 9;  // trailing -inf columns
  const int max_pages = (max_context + page_size - 1) / page_size + 1;
  IndexKeyPool kp(seqlens, page_size, max_pages, g);
  HostTensor q = random_fp8_q(rows, n_heads, g), w = random_weights(rows, n_heads, g);
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

  const std::vector<float> qf = to_floats(q), wf = to_floats(w);
  std::vector<double> ref64(size_t(rows * max_context), kNegInf), ref32(ref64.size(), kNegInf);
  for (int64_t r = 0; r < b; ++r)
    for (int t = 0; t < next_n; ++t) {
      const int64_t row = r * next_n + t;
      const int64_t visible = std::max<int64_t>(0, seqlens[size_t(r)] - next_n + t + 1);
      for (int64_t j = 0; j < visible; ++j) {
        const QuantizedKey& key = kp.keys[size_t(r)][size_t(j)];
        const std::vector<float> k = decode_key(key.bytes);
        const float* qr = qf.data() + row * n_heads * kIdxDim;
        const float* wr = wf.data() + row * n_heads;
        ref64[size_t(row * max_context + j)] = reference_score<double>(qr, wr, n_heads, k.data(), key.scale);
        ref32[size_t(row * max_context + j)] = reference_score<float>(qr, wr, n_heads, k.data(), key.scale);
      }
    }
  expect_logits_match(logits, ref64, ref32);
}

}  // namespace

TEST_P(IndexerPaged, CausalRowsMatchBruteForce) {
  const auto [next_n, page_size] = GetParam();
  auto g = rng_for_test();
  std::uniform_int_distribution<int> len(next_n, 150);
  // last_page_partial (random lengths) and a request whose keys end exactly on a page boundary.
  std::vector<int> seqlens = {len(g), 128, len(g)};
  run_paged_case(seqlens, next_n, page_size, 64, g);
}

INSTANTIATE_TEST_SUITE_P(Indexer, IndexerPaged,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values(1, 64, 5)),
                         [](const auto& info) {
                           return "next_n_" + std::to_string(std::get<0>(info.param)) + "_page_size_" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(IndexerPagedEdge, ZeroLenKvAndShortRequests) {
  auto g = rng_for_test();
  run_paged_case({0, 1, 3}, 1, 4, 5, g);  // zero_len_kv: the first row is all -inf
  run_paged_case({0, 3, 6}, 3, 2, 3, g);  // a padding request (0) and one of exactly next_n tokens
}

TEST(IndexerPagedEdge, LongContextSpansColumnBlocks) {
  auto g = rng_for_test();
  run_paged_case({1500}, 2, 64, 4, g);
}

TEST(IndexerPagedEdge, BadArgumentsNameTheArgument) {
  auto g = rng_for_test();
  const int page_size = 4, next_n = 2, heads = 3;
  std::vector<int> seqlens = {5, 7};
  IndexKeyPool kp(seqlens, page_size, 3, g);
  HostTensor q = random_fp8_q(4, heads, g), w = random_weights(4, heads, g);
  HostTensor sl(DType::i32, {2}), logits(DType::f32, {4, 8});
  sl.ptr<int32_t>()[0] = 5, sl.ptr<int32_t>()[1] = 7;
  IndexerPagedArgs ok{.q = q.view,
                      .weights = w.view,
                      .index_k_cache = kp.pool.view,
                      .page_table = kp.page_table.view,
                      .seqlens = sl.view,
                      .logits = logits.view,
                      .page_size = page_size,
                      .next_n = next_n};
  EXPECT_NO_THROW(indexer_paged(ok));
  auto a = ok;
  a.next_n = 3;  // 4 rows is not a multiple of 3
  expect_error_naming([&] { indexer_paged(a); }, "'next_n'");
  a = ok, a.page_size = 0;
  expect_error_naming([&] { indexer_paged(a); }, "'page_size'");
  a = ok, a.page_size = 8;  // the pool rows are 4 * 132 bytes wide
  expect_error_naming([&] { indexer_paged(a); }, "'index_k_cache'");
  HostTensor narrow(DType::f32, {4, 6});
  a = ok, a.logits = narrow.view;  // seqlens 7 > max_context 6
  expect_error_naming([&] { indexer_paged(a); }, "'seqlens'");
  const int32_t saved = kp.page_table.ptr<int32_t>()[3 + 1];
  kp.page_table.ptr<int32_t>()[3 + 1] = 1000;  // request 1, page 1: outside the pool
  expect_error_naming([&] { indexer_paged(ok); }, "'page_table'");
  kp.page_table.ptr<int32_t>()[3 + 1] = saved;
  sl.ptr<int32_t>()[0] = 1;  // shorter than next_n = 2: its first query row would see no key
  expect_error_naming([&] { indexer_paged(ok); }, "'seqlens'");
  sl.ptr<int32_t>()[0] = 5;
  HostTensor short_table(DType::i32, {2, 1});
  a = ok, a.page_table = short_table.view;
  expect_error_naming([&] { indexer_paged(a); }, "'page_table'");
}

// q_scale multiplies the weights: the same bits as folding it in by hand, in both forms.
TEST(IndexerQScale, EqualsWeightsWithTheScaleFoldedIn) {
  auto g = rng_for_test();
  const int64_t heads = 6;
  {  // ragged
    const int64_t rows = 5, keys = 77;
    HostTensor q = random_fp8_q(rows, heads, g), w = random_weights(rows, heads, g),
               qs = random_q_scale(rows, heads, g);
    KeyBuffer kb(keys, g);
    HostTensor ks(DType::i32, {rows}), ke(DType::i32, {rows}), with(DType::f32, {rows, keys}), folded = with;
    for (int i = 0; i < rows; ++i) ks.ptr<int32_t>()[i] = i, ke.ptr<int32_t>()[i] = int32_t(keys - i);
    const HostTensor wq = times(w, qs);
    poison(with), poison(folded);
    indexer_ragged({.q = q.view,
                    .weights = w.view,
                    .k = kb.k.view,
                    .k_scale = kb.k_scale.view,
                    .ks = ks.view,
                    .ke = ke.view,
                    .logits = with.view,
                    .q_scale = qs.view});
    indexer_ragged({.q = q.view,
                    .weights = wq.view,
                    .k = kb.k.view,
                    .k_scale = kb.k_scale.view,
                    .ks = ks.view,
                    .ke = ke.view,
                    .logits = folded.view});
    EXPECT_EQ(with.bytes, folded.bytes);
    HostTensor bad(DType::f32, {rows, heads + 1});
    expect_error_naming(
        [&] {
          indexer_ragged({.q = q.view,
                          .weights = w.view,
                          .k = kb.k.view,
                          .k_scale = kb.k_scale.view,
                          .ks = ks.view,
                          .ke = ke.view,
                          .logits = with.view,
                          .q_scale = bad.view});
        },
        "'q_scale'");
  }
  {  // paged, next_n 2
    const std::vector<int> seqlens = {40, 9};
    const int page_size = 16, next_n = 2, max_context = 48;
    IndexKeyPool kp(seqlens, page_size, 4, g);
    const int64_t rows = 4;
    HostTensor q = random_fp8_q(rows, heads, g), w = random_weights(rows, heads, g),
               qs = random_q_scale(rows, heads, g);
    HostTensor sl(DType::i32, {2}), with(DType::f32, {rows, max_context}), folded = with;
    sl.ptr<int32_t>()[0] = seqlens[0], sl.ptr<int32_t>()[1] = seqlens[1];
    const HostTensor wq = times(w, qs);
    poison(with), poison(folded);
    IndexerPagedArgs a{.q = q.view,
                       .weights = w.view,
                       .index_k_cache = kp.pool.view,
                       .page_table = kp.page_table.view,
                       .seqlens = sl.view,
                       .logits = with.view,
                       .page_size = page_size,
                       .next_n = next_n,
                       .q_scale = qs.view};
    indexer_paged(a);
    IndexerPagedArgs b = a;
    b.weights = wq.view, b.logits = folded.view, b.q_scale = {};
    indexer_paged(b);
    EXPECT_EQ(with.bytes, folded.bytes);
    HostTensor bad(DType::i32, {rows, heads});
    a.q_scale = bad.view;
    expect_error_naming([&] { indexer_paged(a); }, "'q_scale'");
  }
}
