// CPU oracle of paged attention against the brute force: fp64 mode to 1e-12, f32 and bf16 by the
// tolerance rule, on random problems and the named edge cases.
#include <gtest/gtest.h>

#include "cpu/attention_cases.h"

using namespace attnserve;
using namespace attnserve::test;

TEST(AttentionPaged, DecodeMixedBatch) {
  auto g = rng_for_test();
  PagedSpec s;
  s.q_lens = {1, 1, 1, 1};
  s.k_lens = {1, 37, 64, 130};
  s.h_q = 8;
  s.h_kv = 2;
  check_paged_all_precisions(s, g, "decode");
}

TEST(AttentionPaged, ZeroLenKv) {
  auto g = rng_for_test();
  PagedSpec s;
  s.q_lens = {1, 3, 2};
  s.k_lens = {0, 20, 0};
  check_paged_all_precisions(s, g, "zero_len_kv");
  // Empty rows: exactly zeros and -inf.
  s.dtype = DType::f32;
  PagedCase c = make_paged_case(s, g);
  poison(c.out);
  poison(c.lse);
  paged_attention(c.args);
  for (int64_t row : {0, 4, 5}) {
    for (int64_t h = 0; h < s.h_q; ++h) {
      EXPECT_EQ(c.lse.get(row * s.h_q + h), -INFINITY) << row;
      for (int64_t e = 0; e < s.d; ++e) EXPECT_EQ(c.out.get((row * s.h_q + h) * s.d + e), 0.f) << row;
    }
  }
}

TEST(AttentionPaged, PageSize1) {
  auto g = rng_for_test();
  PagedSpec s;
  s.q_lens = {1, 4};
  s.k_lens = {23, 9};
  s.page_size = 1;
  check_paged_all_precisions(s, g, "page_size_1");
}

TEST(AttentionPaged, PageSize64LastPagePartial) {
  auto g = rng_for_test();
  PagedSpec s;
  s.q_lens = {2, 1, 5};
  s.k_lens = {64 + 17, 128, 63};
  s.page_size = 64;
  s.h_q = 4;
  s.h_kv = 4;
  check_paged_all_precisions(s, g, "page_size_64_last_page_partial");
}

TEST(AttentionPaged, Gqa_1_4_8_16) {
  auto g = rng_for_test();
  for (int ratio : {1, 4, 8, 16}) {
    PagedSpec s;
    s.q_lens = {1, 3};
    s.k_lens = {45, 30};
    s.h_kv = 2;
    s.h_q = 2 * ratio;
    check_paged_all_precisions(s, g, "gqa_" + std::to_string(ratio));
  }
  PagedSpec mqa;  // one KV head for all query heads
  mqa.q_lens = {2};
  mqa.k_lens = {40};
  mqa.h_q = 16;
  mqa.h_kv = 1;
  check_paged_all_precisions(mqa, g, "mqa");
}

TEST(AttentionPaged, HeadDims64_128_256) {
  auto g = rng_for_test();
  for (int d : {64, 96, 128, 192, 256}) {
    PagedSpec s;
    s.q_lens = {1, 2};
    s.k_lens = {50, 33};
    s.d = d;
    s.h_q = 4;
    s.h_kv = 2;
    check_paged_all_precisions(s, g, "d" + std::to_string(d));
  }
  PagedSpec dv;  // value head dim differs from the key's
  dv.d = 128;
  dv.d_v = 64;
  dv.q_lens = {3};
  dv.k_lens = {41};
  check_paged_all_precisions(dv, g, "d128_dv64");
  dv.d = 192;  // DeepSeek's non-absorbed MLA prefill
  dv.d_v = 128;
  check_paged_all_precisions(dv, g, "d192_dv128");
}

TEST(AttentionPaged, CausalExtendWithPrefix) {
  auto g = rng_for_test();
  PagedSpec s;
  s.q_lens = {7, 1, 16};
  s.k_lens = {40, 12, 16 + 70};
  s.h_q = 4;
  s.h_kv = 2;
  check_paged_all_precisions(s, g, "extend");
}

TEST(AttentionPaged, PrefillQLenEqualsKLen) {
  auto g = rng_for_test();
  PagedSpec s;
  s.q_lens = {24, 9};
  s.k_lens = {24, 9};
  s.page_size = 8;
  check_paged_all_precisions(s, g, "prefill");
}

TEST(AttentionPaged, CausalMoreQueriesThanKeys) {
  // Rows at negative positions see no key: zeros and -inf.
  auto g = rng_for_test();
  PagedSpec s;
  s.q_lens = {6};
  s.k_lens = {3};
  check_paged_all_precisions(s, g, "q_len_gt_k_len");
}

TEST(AttentionPaged, NonCausal) {
  auto g = rng_for_test();
  PagedSpec s;
  s.q_lens = {5, 1};
  s.k_lens = {30, 0};
  s.causal = false;
  check_paged_all_precisions(s, g, "non_causal");
}

TEST(AttentionPaged, Softcap) {
  auto g = rng_for_test();
  PagedSpec s;
  s.q_lens = {4, 1};
  s.k_lens = {33, 50};
  s.softcap = 1.5f;  // below the score spread, so the cap bites
  check_paged_all_precisions(s, g, "softcap");
  s.causal = false;
  s.softcap = 30.f;
  check_paged_all_precisions(s, g, "softcap_30");
}

TEST(AttentionPaged, SlidingWindowLeftRight) {
  auto g = rng_for_test();
  struct W {
    bool causal;
    int left, right;
  };
  for (W w : {W{true, 0, -1}, W{true, 7, -1}, W{true, 7, 0}, W{false, 5, 3}, W{false, -1, 2}, W{false, 0, 0},
              W{false, 4, -1}}) {
    PagedSpec s;
    s.q_lens = {6, 1, 12};
    s.k_lens = {30, 19, 12};
    s.page_size = 4;
    s.causal = w.causal;
    s.window_left = w.left;
    s.window_right = w.right;
    check_paged_all_precisions(
        s, g,
        "window(" + std::to_string(w.left) + "," + std::to_string(w.right) + ") causal=" + std::to_string(w.causal));
  }
}

TEST(AttentionPaged, WindowGtSeq) {
  // A window wider than the sequence changes nothing: equal to the unwindowed result.
  auto g = rng_for_test();
  PagedSpec s;
  s.q_lens = {3, 1};
  s.k_lens = {20, 9};
  s.window_left = 1000;
  s.window_right = 1000;
  check_paged_all_precisions(s, g, "window_gt_seq");
  s.dtype = DType::f32;
  std::mt19937_64 g1(7), g2(7);
  PagedCase a = make_paged_case(s, g1);
  s.window_left = s.window_right = -1;
  PagedCase b = make_paged_case(s, g2);
  paged_attention(a.args);
  paged_attention(b.args);
  EXPECT_EQ(a.out.bytes, b.out.bytes);
  EXPECT_EQ(a.lse.bytes, b.lse.bytes);
}

TEST(AttentionPaged, Fp8KvWithDescale) {
  auto g = rng_for_test();
  PagedSpec s;
  s.q_lens = {1, 5};
  s.k_lens = {70, 21};
  s.h_q = 8;
  s.h_kv = 2;
  s.kv_fp8 = true;
  s.descale = true;
  check_paged_all_precisions(s, g, "fp8_descale");
  s.descale = false;  // fp8 without descale: factor 1
  check_paged_all_precisions(s, g, "fp8_no_descale");
}

TEST(AttentionPaged, StridedViewsAndRowsOutsideBatch) {
  auto g = rng_for_test();
  PagedSpec s;
  s.q_lens = {3, 0, 2};
  s.k_lens = {25, 10, 40};
  s.h_q = 4;
  s.h_kv = 2;
  s.strided = true;
  s.rows_before = 2;
  s.rows_after = 3;
  check_paged_all_precisions(s, g, "strided");
}

TEST(AttentionPaged, WithoutLse) {
  auto g = rng_for_test();
  PagedSpec s;
  s.q_lens = {2, 1};
  s.k_lens = {17, 5};
  s.with_lse = false;
  check_paged_all_precisions(s, g, "no_lse");
}

TEST(AttentionPaged, F16) {
  auto g = rng_for_test();
  PagedSpec s;
  s.q_lens = {2, 1};
  s.k_lens = {30, 12};
  s.dtype = DType::f16;
  check_paged(s, g, "f16");
}

TEST(AttentionPaged, RandomMixedConfigs) {
  auto g = rng_for_test();
  std::uniform_int_distribution<int> len(0, 40), qn(0, 5), pick(0, 3);
  for (int trial = 0; trial < 6; ++trial) {
    PagedSpec s;
    const int b = 1 + pick(g);
    s.q_lens.clear();
    s.k_lens.clear();
    for (int r = 0; r < b; ++r) {
      s.q_lens.push_back(qn(g));
      s.k_lens.push_back(len(g));
    }
    s.page_size = std::vector<int>{1, 3, 16, 64}[size_t(pick(g))];
    s.h_kv = 1 + pick(g) % 2;
    s.h_q = s.h_kv * (1 + pick(g));
    s.d = std::vector<int>{16, 64, 128, 32}[size_t(pick(g))];
    s.causal = pick(g) != 0;
    s.window_left = pick(g) == 0 ? -1 : len(g) / 4;
    s.window_right = pick(g) == 0 ? len(g) / 4 : -1;
    s.softcap = pick(g) == 0 ? 2.f : 0.f;
    s.kv_fp8 = pick(g) == 0;
    s.descale = s.kv_fp8 && pick(g) != 0;
    s.strided = pick(g) == 0;
    check_paged_all_precisions(s, g, "trial " + std::to_string(trial));
  }
}

TEST(AttentionPaged, RepeatableBits) {
  auto g = rng_for_test();
  PagedSpec s;
  s.q_lens = {5, 1, 9};
  s.k_lens = {60, 33, 9};
  s.h_q = 8;
  s.h_kv = 2;
  PagedCase c = make_paged_case(s, g);
  poison(c.out);
  poison(c.lse);
  paged_attention(c.args);
  const std::vector<uint8_t> out = c.out.bytes, lse = c.lse.bytes;
  poison(c.out);
  poison(c.lse);
  paged_attention(c.args);
  EXPECT_EQ(c.out.bytes, out);
  EXPECT_EQ(c.lse.bytes, lse);
}

TEST(AttentionPaged, WorkspaceIsZeroOnCpu) {
  auto g = rng_for_test();
  PagedCase c = make_paged_case(PagedSpec{}, g);
  EXPECT_EQ(paged_attention_workspace_size(c.args, DeviceCaps::cpu()), 0u);
  EXPECT_EQ(mla_attention_workspace_size(mla_args_of(c), DeviceCaps::cpu()), 0u);
}

TEST(AttentionPaged, LongKvManyOnlineSoftmaxSteps) {
  auto g = rng_for_test();
  PagedSpec s;
  s.q_lens = {1, 3};
  s.k_lens = {1000, 517};
  s.h_q = 8;
  s.h_kv = 2;
  s.window_left = 700;
  check_paged_all_precisions(s, g, "long_kv");
}

TEST(AttentionPaged, EmptyBatches) {
  auto g = rng_for_test();
  // Requests with no query rows: nothing is written.
  PagedSpec s;
  s.q_lens = {0, 0};
  s.k_lens = {5, 0};
  PagedCase c = make_paged_case(s, g);
  poison(c.out);
  poison(c.lse);
  paged_attention(c.args);
  const std::vector<bool> none(size_t(c.args.q.size(0)), false);
  EXPECT_TRUE(only_batch_rows_written(c.out, c.args.out, none));
  EXPECT_TRUE(only_batch_rows_written(c.lse, c.args.lse, none));
  // b = 0 and total_q = 0.
  HostTensor q(DType::f32, {0, 4, 64}), out(DType::f32, {0, 4, 64}), k(DType::f32, {1, 16, 1, 64});
  HostTensor table(DType::i32, {0, 1}), lens(DType::i32, {0}), cu(DType::i32, {1});
  EXPECT_NO_THROW(paged_attention({.q = q.view,
                                   .k_cache = k.view,
                                   .v_cache = k.view,
                                   .page_table = table.view,
                                   .cache_seqlens = lens.view,
                                   .cu_seqlens_q = cu.view,
                                   .out = out.view,
                                   .softmax_scale = 0.125f}));
}
