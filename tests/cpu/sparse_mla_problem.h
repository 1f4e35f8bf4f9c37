// Random sparse MLA problems for the tests: tensors, argument aggregate, oracle runs, comparisons.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "attnserve/cache_formats.h"
#include "attnserve/ops/sparse_mla.h"
#include "attnserve/runtime.h"
#include "common/test_util.h"
#include "cpu/cpu_ops.h"
#include "reference_sparse_mla.h"

namespace attnserve::test {

struct SparseMlaCase {
  int64_t rows = 3;
  int64_t h_q = 16;
  int64_t num_slots = 200;
  int64_t topk = 64;
  bool fp8 = false;               // FP8-656 cache, else bf16
  DType dtype = DType::f32;       // q and out
  bool with_topk_length = false;  // random lengths in [0, topk]
  bool with_sink = false;
  double invalid_fraction = 0.1;     // share of indices that are -1
  float softmax_scale = 0.0721688f;  // 192^-0.5
};

struct SparseMlaProblem {
  SparseMlaCase c;
  HostTensor q, kv, indices, out, topk_length, attn_sink, lse, max_logits;

  // Movable, not copyable: a copied HostTensor's view would still point at the source's bytes.
  SparseMlaProblem() = default;
  SparseMlaProblem(SparseMlaProblem&&) = default;
  SparseMlaProblem& operator=(SparseMlaProblem&&) = default;
  SparseMlaProblem(const SparseMlaProblem&) = delete;
  SparseMlaProblem& operator=(const SparseMlaProblem&) = delete;

  SparseMlaArgs args() const {
    SparseMlaArgs a{.q = q.view, .kv = kv.view, .indices = indices.view, .out = out.view};
    if (c.with_topk_length) a.topk_length = topk_length.view;
    if (c.with_sink) a.attn_sink = attn_sink.view;
    a.lse = lse.view;
    a.max_logits = max_logits.view;
    a.softmax_scale = c.softmax_scale;
    return a;
  }
  int32_t* index_ptr() { return indices.ptr<int32_t>(); }
  void poison_outputs() {
    poison(out);
    poison(lse);
    poison(max_logits);
  }
};

// Fills the cache: bf16 values in [-1, 1), or FP8-656 tokens encoded from normal values.
inline void fill_mla_cache(HostTensor& kv, bool fp8, std::mt19937_64& g) {
  if (!fp8) {
    fill_uniform(kv, g);
    return;
  }
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> nope(512), rope(64);
  for (int64_t s = 0; s < kv.view.size(0); ++s) {
    for (float& x : nope) x = d(g);
    for (float& x : rope) x = d(g);
    encode_fp8_mla_token(nope.data(), rope.data(), kv.ptr<uint8_t>() + s * 656);
  }
}

inline SparseMlaProblem make_sparse_mla_problem(const SparseMlaCase& c, std::mt19937_64& g) {
  SparseMlaProblem p;
  p.c = c;
  p.q = HostTensor(c.dtype, {c.rows, c.h_q, 576});
  fill_uniform(p.q, g);
  p.kv = c.fp8 ? HostTensor(DType::u8, {c.num_slots, 656}) : HostTensor(DType::bf16, {c.num_slots, 576});
  fill_mla_cache(p.kv, c.fp8, g);
  p.indices = HostTensor(DType::i32, {c.rows, c.topk});
  std::uniform_int_distribution<int32_t> slot(0, int32_t(std::max<int64_t>(c.num_slots - 1, 0)));
  std::bernoulli_distribution invalid(c.invalid_fraction);
  for (int64_t i = 0; i < c.rows * c.topk; ++i) p.index_ptr()[i] = (invalid(g) || c.num_slots == 0) ? -1 : slot(g);
  p.topk_length = HostTensor(DType::i32, {c.rows});
  std::uniform_int_distribution<int32_t> len(0, int32_t(c.topk));
  for (int64_t r = 0; r < c.rows; ++r) p.topk_length.ptr<int32_t>()[r] = len(g);
  p.attn_sink = HostTensor(DType::f32, {c.h_q});
  fill_uniform(p.attn_sink, g, -2.f, 4.f);
  p.out = HostTensor(c.dtype, {c.rows, c.h_q, 512});
  p.lse = HostTensor(DType::f32, {c.rows, c.h_q});
  p.max_logits = HostTensor(DType::f32, {c.rows, c.h_q});
  return p;
}

// Runs the oracle through the public dispatcher (float32), or validated then fp64.
inline void run_sparse_mla(SparseMlaProblem& p, bool fp64 = false) {
  p.poison_outputs();
  if (fp64) {
    EXPECT_EQ(sparse_mla_workspace_size(p.args(), DeviceCaps::cpu()), 0u);  // validates
    cpu::sparse_mla(p.args(), true);
  } else {
    sparse_mla(p.args());
  }
}

// Every output element was written: poison is NaN and the inputs are finite.
inline void expect_all_written(const SparseMlaProblem& p) {
  for (const HostTensor* t : {&p.out, &p.lse, &p.max_logits}) {
    int64_t nans = 0;
    for (int64_t i = 0; i < t->numel(); ++i) nans += std::isnan(t->get(i));
    EXPECT_EQ(nans, 0) << "unwritten (poisoned) elements";
  }
}

// Elements as doubles (test_util's to_doubles goes through float, losing f64 outputs' precision).
inline std::vector<double> exact_doubles(const HostTensor& t) {
  if (t.view.dtype != DType::f64) return to_doubles(t);
  const double* v = reinterpret_cast<const double*>(t.bytes.data());
  return std::vector<double>(v, v + t.numel());
}

struct SparseMlaErrors {
  double out, lse, max_logits;
};

inline SparseMlaErrors errors_vs(const SparseMlaProblem& p, const SparseMlaReference& ref) {
  return {rel_l2(exact_doubles(p.out), ref.out), rel_l2(exact_doubles(p.lse), ref.lse),
          rel_l2(exact_doubles(p.max_logits), ref.max_logits)};
}

inline SparseMlaErrors errors_vs(const SparseMlaReference& a, const SparseMlaReference& ref) {
  return {rel_l2(a.out, ref.out), rel_l2(a.lse, ref.lse), rel_l2(a.max_logits, ref.max_logits)};
}

// Copies contents between same-sized host tensors (HostTensor's copy would alias the source's view).
inline void copy_bytes(HostTensor& dst, const HostTensor& src) {
  ASSERT_EQ(dst.bytes.size(), src.bytes.size());
  std::memcpy(dst.bytes.data(), src.bytes.data(), src.bytes.size());
}

inline bool same_bits(const HostTensor& a, const HostTensor& b) {
  return a.bytes.size() == b.bytes.size() && std::equal(a.bytes.begin(), a.bytes.end() - 1, b.bytes.begin());
}

}  // namespace attnserve::test
