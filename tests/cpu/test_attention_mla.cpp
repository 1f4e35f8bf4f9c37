// CPU oracle of MLA (absorbed) against its own brute force: score = q_nope.c_kv + q_rope.k_rope,
// value = c_kv, one latent KV head; fp64 mode to 1e-12, f32 and bf16 by the tolerance rule.
#include <gtest/gtest.h>

#include "cpu/attention_cases.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {
// DeepSeek shapes: 512 latent + 64 rope, 16 query heads, one latent KV head.
PagedSpec mla_spec(std::vector<int> q_lens, std::vector<int> k_lens, int page_size) {
  PagedSpec s;
  s.q_lens = std::move(q_lens);
  s.k_lens = std::move(k_lens);
  s.page_size = page_size;
  s.h_q = 16;
  s.h_kv = 1;
  s.d = 512 + 64;
  s.d_v = 512;
  s.softmax_scale = 0.1352337f;  // DeepSeek-V3.2's, not 1/sqrt(576)
  return s;
}
}  // namespace

TEST(AttentionMla, Decode512Plus64) {
  auto g = rng_for_test();
  check_mla_all_precisions(mla_spec({1, 1, 1}, {1, 70, 129}, 64), g, "mla_decode");
}

TEST(AttentionMla, PageSize1) {
  auto g = rng_for_test();
  check_mla_all_precisions(mla_spec({1, 3}, {33, 20}, 1), g, "mla_page_size_1");
}

TEST(AttentionMla, PageSize64LastPagePartial) {
  auto g = rng_for_test();
  check_mla_all_precisions(mla_spec({2, 4}, {64 + 5, 127}, 64), g, "mla_page_size_64");
}

TEST(AttentionMla, ZeroLenKvAndExtend) {
  auto g = rng_for_test();
  check_mla_all_precisions(mla_spec({2, 5, 1}, {0, 40, 0}, 16), g, "mla_zero_len_kv");
}

TEST(AttentionMla, OptionsWindowSoftcapNonCausal) {
  auto g = rng_for_test();
  PagedSpec s = mla_spec({4, 1}, {30, 25}, 8);
  s.window_left = 6;
  s.softcap = 2.f;
  check_mla_all_precisions(s, g, "mla_window_softcap");
  s.causal = false;
  s.window_left = 3;
  s.window_right = 2;
  s.softcap = 0.f;
  check_mla_all_precisions(s, g, "mla_non_causal_window");
}

TEST(AttentionMla, StridedViewsSmallHeads) {
  // q_nope / q_rope are slices of one [total_q, h, 576 + pad] buffer; other head dims work too.
  auto g = rng_for_test();
  PagedSpec s = mla_spec({3, 2}, {20, 9}, 4);
  s.strided = true;
  s.rows_before = 1;
  check_mla_all_precisions(s, g, "mla_strided");
  s.d = 64 + 16;
  s.d_v = 64;
  s.h_q = 3;
  check_mla_all_precisions(s, g, "mla_64_16");
}

TEST(AttentionMla, EqualsPagedAttentionOnConcatenatedHeads) {
  // MLA is paged attention with one KV head, key [c_kv | k_rope] and value c_kv.
  auto g = rng_for_test();
  PagedSpec s = mla_spec({2, 1}, {40, 17}, 16);
  PagedCase c = make_paged_case(s, g);
  poison(c.out);
  poison(c.lse);
  mla_attention(mla_args_of(c));
  const std::vector<uint8_t> out = c.out.bytes, lse = c.lse.bytes;
  PagedAttentionArgs p = c.args;
  p.v_cache = p.k_cache.slice(3, 0, 512);
  poison(c.out);
  poison(c.lse);
  paged_attention(p);
  EXPECT_EQ(c.out.bytes, out);
  EXPECT_EQ(c.lse.bytes, lse);
}
