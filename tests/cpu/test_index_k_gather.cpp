// gather_index_k (paged indexer-key pool -> contiguous keys + scales) against a brute-force read through
// IndexerKeyLayout, plus the end-to-end identity gather + indexer_ragged == indexer_paged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "attnserve/ops/index_k_gather.h"
#include "attnserve/ops/indexer.h"
#include "attnserve/ops/kv_store.h"
#include "test_indexer_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

template <typename Fn>
void expect_error_naming(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error, expected one naming " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

HostTensor make_slots(const std::vector<int64_t>& v, DType t) {
  HostTensor s(t, {int64_t(v.size())});
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::i64) s.ptr<int64_t>()[i] = v[i];
    else s.ptr<int32_t>()[i] = int32_t(v[i]);
  }
  return s;
}

// A pool of num_pages pages whose bytes start random (never read back as keys unless written), with
// random f32 keys quantized into `written` slots by set_index_k.
struct Pool {
  int page_size;
  int64_t num_pages;
  HostTensor cache;
  Pool(int page_size_, int64_t num_pages_, std::mt19937_64& g) : page_size(page_size_), num_pages(num_pages_) {
    cache = HostTensor(DType::u8, {num_pages, int64_t(IndexerKeyLayout::bytes_per_page(page_size))});
    for (auto& b : cache.bytes) b = uint8_t(g());
  }
  int64_t num_slots() const { return num_pages * page_size; }
  void write_random_keys(const std::vector<int64_t>& slots, std::mt19937_64& g) {
    HostTensor k(DType::f32, {int64_t(slots.size()), kIdxDim});
    fill_uniform(k, g, -3.f, 3.f);
    HostTensor loc = make_slots(slots, DType::i64);
    set_index_k({.k = k.view, .index_k_cache = cache.view, .loc = loc.view, .page_size = page_size});
  }
};

// Brute force: the key bytes and scale of `slot`, read through the layout's offsets.
void expect_row_is_slot(const Pool& pool, int64_t slot, const uint8_t* key, float scale, int64_t row) {
  const uint8_t* base = pool.cache.bytes.data();
  ASSERT_EQ(std::memcmp(key, base + IndexerKeyLayout::key_offset(slot, pool.page_size), kIdxDim), 0)
      << "row " << row << " (slot " << slot << ") key bytes differ";
  float ref;
  std::memcpy(&ref, base + IndexerKeyLayout::scale_offset(slot, pool.page_size), 4);
  ASSERT_EQ(std::memcmp(&scale, &ref, 4), 0) << "row " << row << " (slot " << slot << ") scale differs";
}

void run_gather_case(int page_size, DType slot_type, std::mt19937_64& g) {
  SCOPED_TRACE("page_size " + std::to_string(page_size) + " slots " + std::string(dtype_name(slot_type)));
  const int64_t num_pages = (300 + page_size - 1) / page_size + 2;
  Pool pool(page_size, num_pages, g);
  std::vector<int64_t> all(size_t(pool.num_slots()));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), g);
  const std::vector<int64_t> written(all.begin(), all.begin() + std::min<int64_t>(200, pool.num_slots()));
  pool.write_random_keys(written, g);

  // Written slots (some twice), the first and last slot of the pool.
  std::vector<int64_t> slots = written;
  for (int i = 0; i < 20; ++i) slots.push_back(written[size_t(g() % written.size())]);
  slots.push_back(0);
  slots.push_back(pool.num_slots() - 1);
  std::shuffle(slots.begin(), slots.end(), g);
  const int64_t n = int64_t(slots.size());
  HostTensor s = make_slots(slots, slot_type);
  HostTensor out_k(DType::fp8_e4m3, {n, kIdxDim}), out_scale(DType::f32, {n});
  poison(out_k);
  poison(out_scale);
  gather_index_k({.index_k_cache = pool.cache.view,
                  .slots = s.view,
                  .out_k = out_k.view,
                  .out_scale = out_scale.view,
                  .page_size = page_size});
  for (int64_t j = 0; j < n; ++j)
    expect_row_is_slot(pool, slots[size_t(j)], out_k.bytes.data() + j * kIdxDim, out_scale.ptr<float>()[j], j);
  // Rows of slots set_index_k wrote carry its power-of-two scale (not leftover random bytes).
  for (int64_t j = 0; j < n; ++j) {
    if (std::find(written.begin(), written.end(), slots[size_t(j)]) == written.end()) continue;
    int e = 0;
    const float sc = out_scale.ptr<float>()[j];
    ASSERT_TRUE(std::isfinite(sc) && sc > 0.f && std::frexp(sc, &e) == 0.5f) << "row " << j << " scale " << sc;
  }
}

}  // namespace

TEST(GatherIndexK, MatchesLayoutForPageSizesAndSlotTypes) {
  auto g = rng_for_test();
  for (int page_size : {1, 5, 64})
    for (DType t : {DType::i32, DType::i64}) run_gather_case(page_size, t, g);
}

TEST(GatherIndexK, U8OutputAndStridedViews) {
  auto g = rng_for_test();
  const int page_size = 5;
  const int64_t num_pages = 12, page_bytes = int64_t(IndexerKeyLayout::bytes_per_page(page_size));
  // The pool as the first page_bytes columns of a wider array: strided pages.
  HostTensor wide(DType::u8, {num_pages, page_bytes + 20});
  for (auto& b : wide.bytes) b = uint8_t(g());
  const TensorView strided_pool = wide.view.slice(1, 0, page_bytes);
  Pool ref(page_size, num_pages, g);  // the same bytes, contiguous, for the brute force
  for (int64_t p = 0; p < num_pages; ++p)
    std::memcpy(ref.cache.bytes.data() + p * page_bytes, wide.bytes.data() + p * (page_bytes + 20), size_t(page_bytes));

  const int64_t n = 17;
  std::vector<int64_t> slots(static_cast<size_t>(n));
  for (auto& v : slots) v = int64_t(g() % uint64_t(ref.num_slots()));
  HostTensor s2 = make_slots(std::vector<int64_t>(size_t(2 * n), 0), DType::i32);  // every other element
  for (int64_t j = 0; j < n; ++j) s2.ptr<int32_t>()[2 * j] = int32_t(slots[size_t(j)]);
  HostTensor k_wide(DType::u8, {n, 2 * kIdxDim}), sc_wide(DType::f32, {n, 3});
  poison(k_wide);
  poison(sc_wide);
  gather_index_k({.index_k_cache = strided_pool,
                  .slots = s2.view.slice(0, 0, 2 * n).reshape({n, 2}).select(1, 0),
                  .out_k = k_wide.view.slice(1, 0, kIdxDim),
                  .out_scale = sc_wide.view.select(1, 1),
                  .page_size = page_size});
  for (int64_t j = 0; j < n; ++j) {
    expect_row_is_slot(ref, slots[size_t(j)], k_wide.bytes.data() + j * 2 * kIdxDim, sc_wide.ptr<float>()[j * 3 + 1],
                       j);
    // Bytes outside the views are untouched.
    EXPECT_EQ(k_wide.bytes[size_t(j * 2 * kIdxDim + kIdxDim)], 0x7f);  // u8 poison
    EXPECT_TRUE(std::isnan(sc_wide.ptr<float>()[j * 3]));
  }
}

TEST(GatherIndexK, EmptySlotsIsANoOp) {
  auto g = rng_for_test();
  Pool pool(64, 2, g);
  HostTensor s(DType::i32, {0}), out_k(DType::fp8_e4m3, {0, kIdxDim}), out_scale(DType::f32, {0});
  gather_index_k({.index_k_cache = pool.cache.view,
                  .slots = s.view,
                  .out_k = out_k.view,
                  .out_scale = out_scale.view,
                  .page_size = 64});
}

TEST(GatherIndexK, OutOfRangeSlotIsAnErrorAndWritesNothing) {
  auto g = rng_for_test();
  Pool pool(5, 4, g);  // 20 slots
  for (int64_t bad : {int64_t(-1), int64_t(20), int64_t(1) << 40}) {
    for (DType t : {DType::i32, DType::i64}) {
      if (t == DType::i32 && bad > INT32_MAX) continue;
      SCOPED_TRACE("slot " + std::to_string(bad) + " " + std::string(dtype_name(t)));
      HostTensor s = make_slots({3, 19, bad, 0}, t);
      HostTensor out_k(DType::fp8_e4m3, {4, kIdxDim}), out_scale(DType::f32, {4});
      poison(out_k);
      poison(out_scale);
      HostTensor k0 = out_k, s0 = out_scale;
      expect_error_naming(
          [&] {
            gather_index_k({.index_k_cache = pool.cache.view,
                            .slots = s.view,
                            .out_k = out_k.view,
                            .out_scale = out_scale.view,
                            .page_size = 5});
          },
          "'slots'");
      EXPECT_EQ(out_k.bytes, k0.bytes);
      EXPECT_EQ(out_scale.bytes, s0.bytes);
    }
  }
}

TEST(GatherIndexK, BadArgumentsNameTheArgument) {
  auto g = rng_for_test();
  const int ps = 4;
  Pool pool(ps, 3, g);
  HostTensor s = make_slots({0, 1, 2}, DType::i32);
  HostTensor out_k(DType::fp8_e4m3, {3, kIdxDim}), out_scale(DType::f32, {3});
  const GatherIndexKArgs good{.index_k_cache = pool.cache.view,
                              .slots = s.view,
                              .out_k = out_k.view,
                              .out_scale = out_scale.view,
                              .page_size = ps};
  gather_index_k(good);
  auto with = [&](auto change) {
    GatherIndexKArgs a = good;
    change(a);
    return a;
  };
  HostTensor f32_k(DType::f32, {3, kIdxDim}), short_k(DType::fp8_e4m3, {2, kIdxDim}),
      narrow_k(DType::fp8_e4m3, {3, 64});
  HostTensor f32_slots(DType::f32, {3}), slots_2d(DType::i32, {3, 1}), bf16_scale(DType::bf16, {3}),
      long_scale(DType::f32, {4});
  HostTensor wrong_pool(DType::u8, {3, 4 * 132 + 1}), i32_pool(DType::i32, {3, 4 * 132});
  HostTensor k_wide(DType::fp8_e4m3, {3, 2 * kIdxDim});
  struct Case {
    GatherIndexKArgs a;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {with([](auto& a) { a.page_size = 0; }), "'page_size'"},
      {with([](auto& a) { a.page_size = 5; }), "index_k_cache"},  // pool width no longer page_size * 132
      {with([&](auto& a) { a.index_k_cache = wrong_pool.view; }), "index_k_cache"},
      {with([&](auto& a) { a.index_k_cache = i32_pool.view; }), "index_k_cache"},
      {with([&](auto& a) { a.index_k_cache = TensorView{}; }), "index_k_cache"},
      {with([&](auto& a) { a.slots = f32_slots.view; }), "slots"},
      {with([&](auto& a) { a.slots = slots_2d.view; }), "slots"},
      {with([&](auto& a) { a.out_k = f32_k.view; }), "out_k"},
      {with([&](auto& a) { a.out_k = short_k.view; }), "out_k"},
      {with([&](auto& a) { a.out_k = narrow_k.view; }), "out_k"},
      {with([&](auto& a) {
         a.out_k = k_wide.view.slice(1, 0, 2 * kIdxDim).reshape({3, kIdxDim, 2}).select(2, 0);
       }),
       "out_k"},  // a strided last dim
      {with([&](auto& a) { a.out_scale = bf16_scale.view; }), "out_scale"},
      {with([&](auto& a) { a.out_scale = long_scale.view; }), "out_scale"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.needle);
    expect_error_naming([&] { gather_index_k(c.a); }, c.needle);
  }
}

// gather + indexer_ragged over the gathered keys equals indexer_paged over the pool, bit for bit (both CPU
// kernels score a (row, key) pair the same way), for a batch of requests with next_n rows each.
TEST(GatherIndexK, GatherThenRaggedEqualsPaged) {
  auto g = rng_for_test();
  for (int page_size : {1, 5, 64}) {
    SCOPED_TRACE("page_size " + std::to_string(page_size));
    const std::vector<int> seqlens = {70, 9, 130};
    const int next_n = 3, n_heads = 4, b = int(seqlens.size());
    int max_pages = 0, max_len = 0;
    for (int len : seqlens) {
      max_pages = std::max(max_pages, (len + page_size - 1) / page_size);
      max_len = std::max(max_len, len);
    }
    // Pages in a shuffled order; keys written by set_index_k at each request's slots.
    int64_t pages_used = 0;
    for (int len : seqlens) pages_used += (len + page_size - 1) / page_size;
    Pool pool(page_size, pages_used + 2, g);
    std::vector<int32_t> order(size_t(pool.num_pages));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), g);
    HostTensor page_table(DType::i32, {b, max_pages}), seq(DType::i32, {b});
    std::fill_n(page_table.ptr<int32_t>(), b * max_pages, 0);
    std::vector<int64_t> all_slots;  // the concatenated page_table_1 rows
    std::vector<int64_t> base(size_t(b) + 1, 0);
    size_t next_page = 0;
    for (int r = 0; r < b; ++r) {
      const int len = seqlens[size_t(r)];
      seq.ptr<int32_t>()[r] = len;
      for (int p = 0; p < (len + page_size - 1) / page_size; ++p)
        page_table.ptr<int32_t>()[r * max_pages + p] = order[next_page++];
      for (int j = 0; j < len; ++j)
        all_slots.push_back(int64_t(page_table.ptr<int32_t>()[r * max_pages + j / page_size]) * page_size +
                            j % page_size);
      base[size_t(r) + 1] = base[size_t(r)] + len;
    }
    pool.write_random_keys(all_slots, g);

    const int64_t rows = int64_t(b) * next_n, K = base.back();
    HostTensor q = random_fp8_q(rows, n_heads, g), w = random_weights(rows, n_heads, g);
    HostTensor paged(DType::f32, {rows, max_len});
    poison(paged);
    indexer_paged({.q = q.view,
                   .weights = w.view,
                   .index_k_cache = pool.cache.view,
                   .page_table = page_table.view,
                   .seqlens = seq.view,
                   .logits = paged.view,
                   .page_size = page_size,
                   .next_n = next_n});

    HostTensor slots = make_slots(all_slots, DType::i32);
    HostTensor k(DType::fp8_e4m3, {K, kIdxDim}), k_scale(DType::f32, {K});
    poison(k);
    poison(k_scale);
    gather_index_k({.index_k_cache = pool.cache.view,
                    .slots = slots.view,
                    .out_k = k.view,
                    .out_scale = k_scale.view,
                    .page_size = page_size});
    HostTensor ks(DType::i32, {rows}), ke(DType::i32, {rows}), ragged(DType::f32, {rows, K});
    for (int r = 0; r < b; ++r)
      for (int t = 0; t < next_n; ++t) {
        ks.ptr<int32_t>()[r * next_n + t] = int32_t(base[size_t(r)]);
        ke.ptr<int32_t>()[r * next_n + t] = int32_t(base[size_t(r)] + seqlens[size_t(r)] - next_n + t + 1);
      }
    poison(ragged);
    indexer_ragged({.q = q.view,
                    .weights = w.view,
                    .k = k.view,
                    .k_scale = k_scale.view,
                    .ks = ks.view,
                    .ke = ke.view,
                    .logits = ragged.view});

    for (int r = 0; r < b; ++r)
      for (int t = 0; t < next_n; ++t) {
        const int64_t i = int64_t(r) * next_n + t;
        for (int64_t j = 0; j < K; ++j) {
          const float got = ragged.ptr<float>()[i * K + j];
          const int64_t own = j - base[size_t(r)];  // key index within request r
          if (own < 0 || own >= seqlens[size_t(r)]) {
            ASSERT_TRUE(std::isinf(got) && got < 0) << "row " << i << " key " << j << " outside its request";
            continue;
          }
          const float want = paged.ptr<float>()[i * max_len + own];
          ASSERT_FALSE(std::isnan(want)) << "paged row " << i << " col " << own << " not written";
          ASSERT_EQ(std::memcmp(&got, &want, 4), 0)
              << "row " << i << " key " << own << ": ragged " << got << " vs paged " << want;
        }
      }
  }
}
