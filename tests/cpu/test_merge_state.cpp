// Merging partial attention states: against a direct formula (with -inf parts), and split-KV:
// attention over disjoint key ranges merged back equals attention over all keys (out and lse).
#include <gtest/gtest.h>

#include "cpu/attention_cases.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

// Partial-state buffers of one split: out [total_q, h_q, d_v], lse [total_q, h_q] in the case's dtypes.
struct Part {
  HostTensor page_table, cache_seqlens;
  PagedAttentionArgs args;
};

// Attention over keys [begin_r, end_r) of each request, as its own paged problem: the page table
// shifted by begin_r / page_size pages, and end_r - begin_r keys. Valid for masks that do not depend
// on positions (non-causal without window, or single-row causal decode, which sees every key).
Part split_of(const PagedCase& c, const std::vector<int>& begin, const std::vector<int>& end, const TensorView& out,
              const TensorView& lse) {
  Part p;
  const TensorView& table = c.args.page_table;
  const int64_t b = table.size(0), cols = table.size(1), ps = c.args.k_cache.size(1);
  p.page_table = HostTensor(DType::i32, {b, cols});
  p.cache_seqlens = HostTensor(DType::i32, {b});
  for (int64_t r = 0; r < b; ++r) {
    const int64_t shift = begin[size_t(r)] / ps;
    for (int64_t i = 0; i < cols; ++i)
      p.page_table.ptr<int32_t>()[r * cols + i] = i + shift < cols ? table.ptr<int32_t>()[r * cols + i + shift] : -1;
    p.cache_seqlens.ptr<int32_t>()[r] = end[size_t(r)] - begin[size_t(r)];
  }
  p.args = c.args;
  p.args.page_table = p.page_table.view;
  p.args.cache_seqlens = p.cache_seqlens.view;
  p.args.out = out;
  p.args.lse = lse;
  return p;
}

void run(const PagedAttentionArgs& a) {
  if (a.q.dtype == DType::f64) {
    cpu::paged_attention(a, /*fp64=*/true);
  } else {
    paged_attention(a);
  }
}

// Key ranges per request for a case: split points are multiples of the page size.
PagedSpec split_spec(DType dtype, bool causal_decode) {
  PagedSpec s;
  s.dtype = dtype;
  s.page_size = 8;
  s.h_q = 4;
  s.h_kv = 2;
  s.rows_after = 0;
  if (causal_decode) {
    s.q_lens = {1, 1, 1, 1};
  } else {
    s.q_lens = {3, 2, 1, 4};
    s.causal = false;
  }
  s.k_lens = {64, 37, 0, 16};
  return s;
}

// Checks a merged (out, lse) against the brute force of the full problem.
void expect_merged_matches(const PagedCase& full, const TensorView& out, const TensorView& lse,
                           const std::string& label) {
  expect_outputs_match(out, lse, reference_paged_attention<double>(full.args),
                       reference_paged_attention<float>(full.args), label);
}

}  // namespace

TEST(MergeState, TwoHalvesOfTheKeysEqualFullAttention) {
  auto g = rng_for_test();
  for (bool decode : {true, false}) {
    for (DType t : {DType::f64, DType::f32}) {
      const std::string label = std::string(decode ? "decode " : "non-causal ") + std::string(dtype_name(t));
      const PagedSpec s = split_spec(t, decode);
      PagedCase c = make_paged_case(s, g);
      const DType lse_t = t == DType::f64 ? DType::f64 : DType::f32;
      const int64_t total_q = c.args.q.size(0), h_q = s.h_q, d = s.d;
      // Split points: the middle page boundary, the end (second half empty), 0 (first half empty).
      const std::vector<int> zero(4, 0), mid = {32, 16, 0, 0}, end(s.k_lens.begin(), s.k_lens.end());
      HostTensor out_a(t, {total_q, h_q, d}), out_b(t, {total_q, h_q, d}), out(t, {total_q, h_q, d});
      HostTensor lse_a(lse_t, {total_q, h_q}), lse_b(lse_t, {total_q, h_q}), lse(lse_t, {total_q, h_q});
      for (HostTensor* h : {&out_a, &out_b, &out, &lse_a, &lse_b, &lse}) poison(*h);
      run(split_of(c, zero, mid, out_a.view, lse_a.view).args);
      run(split_of(c, mid, end, out_b.view, lse_b.view).args);
      MergeStateArgs m{.v_a = out_a.view,
                       .s_a = lse_a.view,
                       .v_b = out_b.view,
                       .s_b = lse_b.view,
                       .v_out = out.view,
                       .s_out = lse.view};
      if (t == DType::f64) {
        cpu::merge_state(m);
      } else {
        merge_state(m);
      }
      expect_merged_matches(c, out.view, lse.view, label);
      // Request 2 has no keys: both parts -inf, merged zeros and -inf.
      for (int64_t h = 0; h < h_q; ++h) EXPECT_EQ(lse.get(c.cu_seqlens_q.ptr<int32_t>()[2] * h_q + h), -INFINITY);
    }
  }
}

TEST(MergeState, FourSplitsMergeStatesEqualFullAttention) {
  auto g = rng_for_test();
  for (bool decode : {true, false}) {
    for (DType t : {DType::f64, DType::f32}) {
      const std::string label = std::string(decode ? "decode " : "non-causal ") + std::string(dtype_name(t));
      const PagedSpec s = split_spec(t, decode);
      PagedCase c = make_paged_case(s, g);
      const DType lse_t = t == DType::f64 ? DType::f64 : DType::f32;
      const int64_t total_q = c.args.q.size(0), h_q = s.h_q, d = s.d;
      // Boundaries per request (k_lens 64, 37, 0, 16): uneven splits, some empty.
      const std::vector<std::vector<int>> bounds = {{0, 0, 0, 0}, {8, 8, 0, 0}, {40, 16, 0, 8}, {56, 32, 0, 16}};
      const std::vector<int> end(s.k_lens.begin(), s.k_lens.end());
      HostTensor v_parts(t, {4, total_q, h_q, d}), s_parts(lse_t, {4, total_q, h_q});
      HostTensor out(t, {total_q, h_q, d}), lse(lse_t, {total_q, h_q});
      for (HostTensor* h : {&v_parts, &s_parts, &out, &lse}) poison(*h);
      for (int i = 0; i < 4; ++i) {
        const std::vector<int>& hi = i + 1 < 4 ? bounds[size_t(i + 1)] : end;
        run(split_of(c, bounds[size_t(i)], hi, v_parts.view.select(0, i), s_parts.view.select(0, i)).args);
      }
      MergeStatesArgs m{.v_parts = v_parts.view, .s_parts = s_parts.view, .v_out = out.view, .s_out = lse.view};
      if (t == DType::f64) {
        cpu::merge_states(m);
      } else {
        merge_states(m);
      }
      expect_merged_matches(c, out.view, lse.view, label);
    }
  }
}

// An empty part is marked by an infinite LSE of either sign: -inf (FA3, attnserve) or +inf (FlashMLA,
// SEED_NOTES 19). Both contribute nothing; token 6 mixes the two signs.
TEST(MergeState, InfinitePartsOfEitherSignContributeNothing) {
  auto g = rng_for_test();
  const int64_t tokens = 9, heads = 3, d = 40;
  for (float empty : {-INFINITY, INFINITY})
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(empty);
      HostTensor v_a(t, {tokens, heads, d}), v_b(t, {tokens, heads, d}), v_out(t, {tokens, heads, d});
      HostTensor s_a(DType::f32, {tokens, heads}), s_b(DType::f32, {tokens, heads}), s_out(DType::f32, {tokens, heads});
      fill_uniform(v_a, g);
      fill_uniform(v_b, g);
      fill_uniform(s_a, g, -5.f, 5.f);
      fill_uniform(s_b, g, -5.f, 5.f);
      // Tokens 0-2: a is -inf; 3-5: b is -inf; 6: both; 7-8: neither.
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t tok : {0, 1, 2, 6}) s_a.set(tok * heads + h, empty);
        for (int64_t tok : {3, 4, 5}) s_b.set(tok * heads + h, empty);
        s_b.set(6 * heads + h, -empty);
      }
      poison(v_out);
      poison(s_out);
      merge_state({.v_a = v_a.view,
                   .s_a = s_a.view,
                   .v_b = v_b.view,
                   .s_b = s_b.view,
                   .v_out = v_out.view,
                   .s_out = s_out.view});
      std::vector<double> got, want, got_s, want_s;
      for (int64_t tok = 0; tok < tokens; ++tok) {
        for (int64_t h = 0; h < heads; ++h) {
          std::vector<std::vector<double>> parts(2, std::vector<double>(static_cast<size_t>(d)));
          for (int64_t e = 0; e < d; ++e) {
            parts[0][size_t(e)] = v_a.get((tok * heads + h) * d + e);
            parts[1][size_t(e)] = v_b.get((tok * heads + h) * d + e);
          }
          std::vector<double> v;
          double s;
          auto as_empty = [](double x) { return std::isinf(x) ? -INFINITY : x; };  // the reference's convention
          reference_merge(parts, {as_empty(s_a.get(tok * heads + h)), as_empty(s_b.get(tok * heads + h))}, v, s);
          for (int64_t e = 0; e < d; ++e) {
            got.push_back(v_out.get((tok * heads + h) * d + e));
            want.push_back(v[size_t(e)]);
          }
          got_s.push_back(s_out.get(tok * heads + h));
          want_s.push_back(s);
          if (tok < 6) {  // one part only: the other part's values, bit for bit
            const HostTensor& only = tok < 3 ? v_b : v_a;
            const HostTensor& only_s = tok < 3 ? s_b : s_a;
            for (int64_t e = 0; e < d; ++e)
              EXPECT_EQ(v_out.get((tok * heads + h) * d + e), only.get((tok * heads + h) * d + e));
            EXPECT_EQ(s_out.get(tok * heads + h), only_s.get(tok * heads + h));
          }
          if (tok == 6) {
            EXPECT_EQ(s_out.get(tok * heads + h), -INFINITY);
            for (int64_t e = 0; e < d; ++e) EXPECT_EQ(v_out.get((tok * heads + h) * d + e), 0.f);
          }
        }
      }
      EXPECT_LE(rel_l2(got, want), tolerance_by_rule(0, t)) << dtype_name(t);
      EXPECT_LE(rel_l2(got_s, want_s), tolerance_by_rule(0, DType::f32)) << dtype_name(t);
    }
}

TEST(MergeState, MergeStatesRandomWithNegInfAndNarrowOutput) {
  // f32 partials merged into a bf16 output (strided), some parts -inf, one token all -inf.
  auto g = rng_for_test();
  const int64_t n = 5, tokens = 7, heads = 4, d = 24;
  HostTensor v_parts(DType::f32, {n, tokens, heads, d}), s_parts(DType::f32, {n, tokens, heads});
  HostTensor out_buf(DType::bf16, {tokens, heads, d + 8});
  fill_uniform(v_parts, g);
  fill_uniform(s_parts, g, -8.f, 8.f);
  std::bernoulli_distribution drop(0.3);
  for (int64_t i = 0; i < s_parts.numel(); ++i)
    if (drop(g) || (i / heads) % tokens == 3) s_parts.set(i, -INFINITY);
  poison(out_buf);
  const TensorView v_out = out_buf.view.slice(2, 0, d);
  merge_states({.v_parts = v_parts.view, .s_parts = s_parts.view, .v_out = v_out});  // no s_out
  std::vector<double> got, want;
  for (int64_t tok = 0; tok < tokens; ++tok) {
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<std::vector<double>> parts(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(d)));
      std::vector<double> ss(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        ss[size_t(i)] = s_parts.get((i * tokens + tok) * heads + h);
        for (int64_t e = 0; e < d; ++e)
          parts[size_t(i)][size_t(e)] = v_parts.get(((i * tokens + tok) * heads + h) * d + e);
      }
      std::vector<double> v;
      double s;
      reference_merge(parts, ss, v, s);
      for (int64_t e = 0; e < d; ++e) {
        got.push_back(out_buf.get((tok * heads + h) * (d + 8) + e));
        want.push_back(v[size_t(e)]);
      }
      for (int64_t e = d; e < d + 8; ++e) EXPECT_TRUE(std::isnan(out_buf.get((tok * heads + h) * (d + 8) + e)));
    }
  }
  EXPECT_LE(rel_l2(got, want), tolerance_by_rule(0, DType::bf16));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t e = 0; e < d; ++e) EXPECT_EQ(out_buf.get((3 * heads + h) * (d + 8) + e), 0.f);
}

TEST(MergeState, MergeStatesZeroParts) {
  const int64_t tokens = 2, heads = 2, d = 8;
  HostTensor v_parts(DType::f32, {0, tokens, heads, d}), s_parts(DType::f32, {0, tokens, heads});
  HostTensor v_out(DType::f32, {tokens, heads, d}), s_out(DType::f32, {tokens, heads});
  poison(v_out);
  poison(s_out);
  merge_states({.v_parts = v_parts.view, .s_parts = s_parts.view, .v_out = v_out.view, .s_out = s_out.view});
  for (int64_t i = 0; i < v_out.numel(); ++i) EXPECT_EQ(v_out.get(i), 0.f);
  for (int64_t i = 0; i < s_out.numel(); ++i) EXPECT_EQ(s_out.get(i), -INFINITY);
}
