// Context-parallel plan (include/attnserve/context_parallel.h): placement by page, per-rank
// metadata for decode, draft_decode and target_verify, top-k routing, and the errors. Every
// property is checked against a brute-force walk over the global keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "attnserve/context_parallel.h"

namespace attnserve {
namespace {

// Brute force: the keys at positions < n whose page lives on `rank`.
int32_t brute_local_count(int64_t n, int rank, int W, int P) {
  int32_t c = 0;
  for (int64_t j = 0; j < n; ++j) c += (j / P) % W == rank;
  return c;
}

TEST(ContextParallelPlan, LocalKeyCountMatchesBruteForce) {
  for (int W : {1, 2, 3, 4, 8})
    for (int P : {1, 2, 16, 64}) {
      const CpConfig c{.world_size = W, .page_size = P};
      for (int64_t n : {0, 1, 2, 5, 15, 16, 17, 63, 64, 65, 100, 257, 1000}) {
        int32_t total = 0;
        for (int r = 0; r < W; ++r) {
          const int32_t got = cp_local_key_count(n, r, c);
          EXPECT_EQ(got, brute_local_count(n, r, W, P)) << "W=" << W << " P=" << P << " n=" << n << " r=" << r;
          total += got;
        }
        EXPECT_EQ(total, n);
      }
      EXPECT_EQ(cp_owner_rank(0, c), 0);
      EXPECT_EQ(cp_owner_rank(int64_t(P) * W + P, c), 1 % W);
    }
}

struct RandomBatch {
  std::vector<int32_t> seq_lens, page_table;
  int width = 0;
};

// Random seq_lens (some shorter than one page per rank) and page ids: a shuffled id range per rank.
RandomBatch random_batch(std::mt19937_64& g, int bs, int W, int P, int extra_keys) {
  RandomBatch b;
  std::uniform_int_distribution<int> len(1, 5 * P * W + 3);
  for (int r = 0; r < bs; ++r) b.seq_lens.push_back(r == 0 ? 1 : len(g));
  const int max_kv = *std::max_element(b.seq_lens.begin(), b.seq_lens.end()) + extra_keys;
  b.width = (max_kv + P - 1) / P + 1;  // one spare column
  std::uniform_int_distribution<int> id(1, 10000);
  for (int i = 0; i < bs * b.width; ++i) b.page_table.push_back(id(g));
  return b;
}

struct ModeCase {
  ForwardMode mode;
  SpeculativeConfig spec;
  int q_len, extra_keys;
};

TEST(ContextParallelPlan, RankMetadataMatchesBruteForce) {
  std::mt19937_64 g(1901);
  const ModeCase modes[] = {{ForwardMode::decode, {}, 1, 0},
                            {ForwardMode::draft_decode, {.draft_token_num = 0, .num_steps = 4, .step_id = 2}, 1, 3},
                            {ForwardMode::target_verify, {.draft_token_num = 4, .num_steps = 0, .step_id = 0}, 4, 4}};
  for (const ModeCase& m : modes)
    for (int W : {1, 2, 3, 4})
      for (int P : {1, 4, 16}) {
        const int bs = 5;
        RandomBatch rb = random_batch(g, bs, W, P, m.extra_keys);
        const CpConfig c{.world_size = W, .page_size = P, .padding_slot = 7};
        const CpBatch batch{.mode = m.mode,
                            .seq_lens = rb.seq_lens,
                            .page_table = rb.page_table,
                            .page_table_width = rb.width,
                            .spec = m.spec};
        std::vector<int> stores(size_t(bs * m.q_len), 0);
        std::vector<int32_t> local_total(size_t(bs), 0), seen(size_t(bs * m.q_len), 0);
        std::vector<int32_t> min_len(size_t(bs), INT32_MAX), max_len(size_t(bs), 0);
        for (int rank = 0; rank < W; ++rank) {
          const std::string label = std::string(to_string(m.mode)) + " W=" + std::to_string(W) +
                                    " P=" + std::to_string(P) + " rank=" + std::to_string(rank);
          const CpRankPlan p = plan_context_parallel(c, batch, rank);
          ASSERT_EQ(p.num_rows, bs * m.q_len) << label;
          ASSERT_EQ(p.local_width, std::max(1, (rb.width + W - 1) / W)) << label;
          ASSERT_EQ(p.page_table.size(), size_t(p.num_rows * p.local_width)) << label;
          for (int i = 0; i <= p.num_rows; ++i) EXPECT_EQ(p.cu_seqlens_q[size_t(i)], i) << label;
          for (int r = 0; r < bs; ++r) {
            const int64_t kv = rb.seq_lens[size_t(r)] + m.extra_keys;
            EXPECT_EQ(p.request_local_len[size_t(r)], brute_local_count(kv, rank, W, P)) << label;
            local_total[size_t(r)] += p.request_local_len[size_t(r)];
            min_len[size_t(r)] = std::min(min_len[size_t(r)], p.request_local_len[size_t(r)]);
            max_len[size_t(r)] = std::max(max_len[size_t(r)], p.request_local_len[size_t(r)]);
            for (int t = 0; t < m.q_len; ++t) {
              const int row = r * m.q_len + t;
              const int64_t pos = kv - m.q_len + t;
              EXPECT_EQ(p.row_request[size_t(row)], r) << label;
              EXPECT_EQ(p.row_position[size_t(row)], pos) << label;
              // The row's local keys, in order: global keys j <= pos on this rank; local key l maps
              // to slot page_table[row, l / P] * P + l % P, which must be the global key's slot.
              std::vector<int64_t> want;
              for (int64_t j = 0; j <= pos; ++j)
                if ((j / P) % W == rank)
                  want.push_back(int64_t(rb.page_table[size_t(r * rb.width) + size_t(j / P)]) * P + j % P);
              ASSERT_EQ(p.cache_seqlens[size_t(row)], int32_t(want.size())) << label << " row " << row;
              seen[size_t(row)] += p.cache_seqlens[size_t(row)];
              for (size_t l = 0; l < want.size(); ++l) {
                const int64_t slot =
                    int64_t(p.page_table[size_t(row * p.local_width) + l / size_t(P)]) * P + int64_t(l % size_t(P));
                EXPECT_EQ(slot, want[l]) << label << " row " << row << " local key " << l;
              }
              const bool here = (pos / P) % W == rank;
              EXPECT_EQ(p.stores_here[size_t(row)], here ? 1 : 0) << label;
              const int64_t slot = int64_t(rb.page_table[size_t(r * rb.width) + size_t(pos / P)]) * P + pos % P;
              EXPECT_EQ(p.store_loc[size_t(row)], here ? slot : 7) << label;
              stores[size_t(row)] += here;
            }
          }
        }
        for (int r = 0; r < bs; ++r) {
          EXPECT_EQ(local_total[size_t(r)], rb.seq_lens[size_t(r)] + m.extra_keys);
          EXPECT_LE(max_len[size_t(r)] - min_len[size_t(r)], P) << "balanced within one page";
          for (int t = 0; t < m.q_len; ++t)
            EXPECT_EQ(seen[size_t(r * m.q_len + t)], rb.seq_lens[size_t(r)] + m.extra_keys - m.q_len + t + 1);
        }
        for (int s : stores) EXPECT_EQ(s, 1) << "every new token is stored by exactly one rank";
      }
}

TEST(ContextParallelPlan, AppendsRotateOverRanks) {
  // One request growing token by token: the ranks' shares never differ by more than one page.
  const int W = 3, P = 4;
  const CpConfig c{.world_size = W, .page_size = P};
  std::vector<int32_t> table(64);
  std::iota(table.begin(), table.end(), 1);
  for (int32_t len = 1; len <= 60 * P / 4; ++len) {
    std::vector<int32_t> seq{len};
    int32_t lo = INT32_MAX, hi = 0, stores = 0;
    for (int r = 0; r < W; ++r) {
      const CpRankPlan p = plan_context_parallel(
          c, {.mode = ForwardMode::decode, .seq_lens = seq, .page_table = table, .page_table_width = 64}, r);
      lo = std::min(lo, p.request_local_len[0]);
      hi = std::max(hi, p.request_local_len[0]);
      stores += p.stores_here[0];
      if (p.stores_here[0]) EXPECT_EQ(r, cp_owner_rank(len - 1, c));
    }
    EXPECT_LE(hi - lo, P);
    EXPECT_EQ(stores, 1);
  }
}

TEST(ContextParallelPlan, RouteTopkGivesEachValidPositionToItsOwner) {
  std::mt19937_64 g(1902);
  for (int W : {1, 2, 3, 4})
    for (int P : {1, 16, 64}) {
      const int bs = 3, topk = 40;
      RandomBatch rb = random_batch(g, bs, W, P, 0);
      const std::vector<int32_t> row_request{0, 1, 1, 2, 2, 2};
      const int rows = int(row_request.size());
      std::vector<int32_t> pos(size_t(rows * topk));
      for (int i = 0; i < rows; ++i) {
        const int kv = rb.seq_lens[size_t(row_request[size_t(i)])];
        std::uniform_int_distribution<int> u(-2, kv + 2);  // some invalid on both sides
        for (int j = 0; j < topk; ++j) pos[size_t(i * topk + j)] = u(g);
      }
      const CpConfig c{.world_size = W, .page_size = P};
      const CpTopkRouting routing{.topk_positions = pos,
                                  .topk = topk,
                                  .row_request = row_request,
                                  .kv_lens = rb.seq_lens,
                                  .page_table = rb.page_table,
                                  .page_table_width = rb.width};
      std::vector<int> owners(pos.size(), 0);
      for (int rank = 0; rank < W; ++rank) {
        std::vector<int32_t> out(pos.size(), -5);
        cp_route_topk(c, rank, routing, out);
        for (size_t e = 0; e < pos.size(); ++e) {
          const int r = row_request[e / topk], p = pos[e];
          const bool valid = p >= 0 && p < rb.seq_lens[size_t(r)];
          if (valid && (p / P) % W == rank) {
            EXPECT_EQ(out[e], rb.page_table[size_t(r * rb.width + p / P)] * P + p % P);
            ++owners[e];
          } else {
            EXPECT_EQ(out[e], -1);
          }
        }
      }
      for (size_t e = 0; e < pos.size(); ++e) {
        const int r = row_request[e / topk], p = pos[e];
        EXPECT_EQ(owners[e], p >= 0 && p < rb.seq_lens[size_t(r)] ? 1 : 0);
      }
    }
}

// Runs f and returns the error message ("" when nothing was thrown).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ContextParallelPlan, BadInputsAreNamedErrors) {
  std::vector<int32_t> seq{5, 9}, table(2 * 4, 3);
  const CpBatch ok{.mode = ForwardMode::decode, .seq_lens = seq, .page_table = table, .page_table_width = 4};
  const CpConfig c{.world_size = 2, .page_size = 4};
  EXPECT_EQ(error_of([&] { plan_context_parallel(c, ok, 1); }), "");
  auto expect_error = [](const std::string& msg, const char* needle) {
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: '" << msg << "' lacks '" << needle << "'";
  };
  expect_error(error_of([&] { plan_context_parallel({.world_size = 0, .page_size = 4}, ok, 0); }), "world_size");
  expect_error(error_of([&] { plan_context_parallel({.world_size = 2, .page_size = 0}, ok, 0); }), "page_size");
  expect_error(error_of([&] { plan_context_parallel(c, ok, 2); }), "rank 2");
  expect_error(error_of([&] { plan_context_parallel(c, ok, -1); }), "rank -1");
  CpBatch b = ok;
  b.page_table_width = 3;
  expect_error(error_of([&] { plan_context_parallel(c, b, 0); }), "page_table holds");
  b = ok;
  b.mode = ForwardMode::extend;
  expect_error(error_of([&] { plan_context_parallel(c, b, 0); }), "extend");
  b = ok;
  b.mode = ForwardMode::target_verify;
  expect_error(error_of([&] { plan_context_parallel(c, b, 0); }), "draft_token_num");
  b.spec.draft_token_num = 8;  // 9 + 8 keys > 4 pages * 4
  expect_error(error_of([&] { plan_context_parallel(c, b, 0); }), "page_table_width");
  std::vector<int32_t> long_seq{5, 17}, zero_seq{0, 3};
  b = ok;
  b.seq_lens = long_seq;
  expect_error(error_of([&] { plan_context_parallel(c, b, 0); }), "request 1 has 17 keys");
  b.seq_lens = zero_seq;
  expect_error(error_of([&] { plan_context_parallel(c, b, 0); }), "fewer than its 1 query rows");
  // A negative id in a page of rank 1 fails on rank 1 only (rank 0 never reads it).
  std::vector<int32_t> bad = table;
  bad[1] = -4;  // request 0, global page 1
  b = ok;
  b.page_table = bad;
  EXPECT_EQ(error_of([&] { plan_context_parallel(c, b, 0); }), "");
  expect_error(error_of([&] { plan_context_parallel(c, b, 1); }), "page_table[0, 1] = -4");

  std::vector<int32_t> pos(2 * 3, 0), out(6), rows{0, 2};
  CpTopkRouting t{.topk_positions = pos,
                  .topk = 3,
                  .row_request = rows,
                  .kv_lens = seq,
                  .page_table = table,
                  .page_table_width = 4};
  expect_error(error_of([&] { cp_route_topk(c, 0, t, out); }), "row_request[1] = 2");
  rows[1] = 1;
  std::vector<int32_t> short_out(5);
  expect_error(error_of([&] { cp_route_topk(c, 0, t, short_out); }), "out holds 5");
  t.topk = 2;
  expect_error(error_of([&] { cp_route_topk(c, 0, t, out); }), "topk_positions holds");
}

}  // namespace
}  // namespace attnserve
