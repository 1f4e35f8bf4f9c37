// Sparse MLA CPU oracle against the brute-force references: fp64 mode ~1e-12, float32 mode by the
// tolerance rule, both cache formats, head counts, odd top-k, strided views, threading invariance.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>

#include "cpu/sparse_key_gather.h"
#include "sparse_mla_problem.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

// fp64 oracle (f64 q and out) against the fp64 brute force.
void expect_fp64_matches(SparseMlaProblem& p) {
  ASSERT_EQ(p.c.dtype, DType::f64);
  const SparseMlaReference ref = reference_sparse_mla<double>(p.args());
  run_sparse_mla(p, /*fp64=*/true);
  expect_all_written(p);
  const SparseMlaErrors e = errors_vs(p, ref);
  EXPECT_LE(e.out, 1e-12);
  EXPECT_LE(e.lse, 1.2e-7);  // stored as f32
  EXPECT_LE(e.max_logits, 1.2e-7);
}

// float32 oracle: error vs fp64 at most twice the float32 brute force's, plus output rounding.
void expect_within_rule(SparseMlaProblem& p) {
  const SparseMlaReference ref64 = reference_sparse_mla<double>(p.args());
  const SparseMlaReference ref32 = reference_sparse_mla<float>(p.args());
  run_sparse_mla(p);
  expect_all_written(p);
  const SparseMlaErrors e = errors_vs(p, ref64), e32 = errors_vs(ref32, ref64);
  EXPECT_LE(e.out, tolerance_by_rule(e32.out, p.c.dtype)) << "float32 reference error " << e32.out;
  EXPECT_LE(e.lse, tolerance_by_rule(e32.lse, DType::f32)) << "float32 reference error " << e32.lse;
  EXPECT_LE(e.max_logits, tolerance_by_rule(e32.max_logits, DType::f32)) << "float32 reference " << e32.max_logits;
}

}  // namespace

TEST(SparseMla, Fp64MatchesBruteForceBf16Cache) {
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem({.rows = 5,
                                    .h_q = 16,
                                    .num_slots = 300,
                                    .topk = 96,
                                    .dtype = DType::f64,
                                    .with_topk_length = true,
                                    .with_sink = true},
                                   g);
  expect_fp64_matches(p);
}

TEST(SparseMla, Fp64MatchesBruteForceFp8Cache) {
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem(
      {.rows = 4, .h_q = 24, .num_slots = 257, .topk = 128, .fp8 = true, .dtype = DType::f64, .with_topk_length = true},
      g);
  expect_fp64_matches(p);
}

TEST(SparseMla, F32WithinToleranceRuleBf16Cache) {
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem({.rows = 6, .h_q = 16, .num_slots = 500, .topk = 128}, g);
  expect_within_rule(p);
}

TEST(SparseMla, F32WithinToleranceRuleFp8Cache) {
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem(
      {.rows = 6, .h_q = 16, .num_slots = 400, .topk = 128, .fp8 = true, .with_topk_length = true, .with_sink = true},
      g);
  expect_within_rule(p);
}

TEST(SparseMla, F32SharpSoftmax) {
  // A large scale makes a few keys dominate: exercises the max subtraction.
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem(
      {.rows = 4, .h_q = 8, .num_slots = 300, .topk = 100, .fp8 = true, .softmax_scale = 2.f}, g);
  expect_within_rule(p);
}

TEST(SparseMla, Bf16OutputRounding) {
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem({.rows = 4,
                                    .h_q = 16,
                                    .num_slots = 300,
                                    .topk = 80,
                                    .fp8 = true,
                                    .dtype = DType::bf16,
                                    .with_topk_length = true,
                                    .with_sink = true},
                                   g);
  expect_within_rule(p);
  // Same values held in f32: the bf16 output is exactly the float32 result rounded to bf16.
  SparseMlaCase c32 = p.c;
  c32.dtype = DType::f32;
  auto g2 = rng_for_test();
  auto p32 = make_sparse_mla_problem(c32, g2);
  copy_bytes(p32.kv, p.kv);
  copy_bytes(p32.indices, p.indices);
  copy_bytes(p32.topk_length, p.topk_length);
  copy_bytes(p32.attn_sink, p.attn_sink);
  for (int64_t i = 0; i < p.q.numel(); ++i) p32.q.set(i, p.q.get(i));
  run_sparse_mla(p32);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < p.out.numel(); ++i)
    mismatches += p.out.ptr<bf16_t>()[i].bits != to_bf16(p32.out.ptr<float>()[i]).bits;
  EXPECT_EQ(mismatches, 0);
  EXPECT_TRUE(same_bits(p.lse, p32.lse));
}

TEST(SparseMla, HeadCounts) {
  for (int64_t h_q : {16, 32, 64, 128}) {
    SCOPED_TRACE("h_q " + std::to_string(h_q));
    auto g = rng_for_test();
    auto p = make_sparse_mla_problem({.rows = h_q == 128 ? 1 : 2,
                                      .h_q = h_q,
                                      .num_slots = 150,
                                      .topk = 64,
                                      .fp8 = h_q % 32 == 0,
                                      .with_sink = h_q == 64},
                                     g);
    expect_within_rule(p);
  }
}

TEST(SparseMla, OddHeadCount) {
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem({.rows = 3, .h_q = 5, .num_slots = 100, .topk = 40, .with_sink = true}, g);
  expect_within_rule(p);
}

TEST(SparseMla, TopkNotMultipleOf64) {
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem(
      {.rows = 7, .h_q = 16, .num_slots = 90, .topk = 37, .fp8 = true, .with_topk_length = true}, g);
  expect_within_rule(p);
  auto p64 = make_sparse_mla_problem({.rows = 3, .h_q = 8, .num_slots = 90, .topk = 37, .dtype = DType::f64}, g);
  expect_fp64_matches(p64);
}

TEST(SparseMla, StridedViews) {
  // q and out padded per head and per row, kv rows wider than a slot, indices rows wider than topk.
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem(
      {.rows = 3, .h_q = 8, .num_slots = 120, .topk = 50, .fp8 = true, .with_topk_length = true, .with_sink = true}, g);
  HostTensor q_big(DType::f32, {3, 10, 600}), out_big(DType::f32, {3, 9, 520}), kv_big(DType::u8, {120, 700});
  HostTensor idx_big(DType::i32, {3, 64}), lse_big(DType::f32, {3, 12});
  fill_uniform(q_big, g);
  for (auto& b : kv_big.bytes) b = uint8_t(g());  // noise around the slot rows
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t h = 0; h < 8; ++h)
      for (int64_t d = 0; d < 576; ++d) q_big.set((r * 10 + h) * 600 + d, p.q.get((r * 8 + h) * 576 + d));
  for (int64_t s = 0; s < 120; ++s) std::memcpy(kv_big.ptr<uint8_t>() + s * 700, p.kv.ptr<uint8_t>() + s * 656, 656);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t i = 0; i < 50; ++i) idx_big.ptr<int32_t>()[r * 64 + i] = p.index_ptr()[r * 50 + i];
  poison(out_big);
  poison(lse_big);

  SparseMlaArgs a = p.args();
  a.q = q_big.view.slice(1, 0, 8).slice(2, 0, 576);
  a.kv = kv_big.view.slice(1, 0, 656);
  a.indices = idx_big.view.slice(1, 0, 50);
  a.out = out_big.view.slice(1, 1, 9).slice(2, 0, 512);
  a.lse = lse_big.view.slice(1, 2, 10);
  a.max_logits = TensorView{};
  sparse_mla(a);

  run_sparse_mla(p);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t h = 0; h < 8; ++h) {
      for (int64_t d = 0; d < 512; ++d)
        ASSERT_EQ(out_big.ptr<float>()[(r * 9 + h + 1) * 520 + d], p.out.ptr<float>()[(r * 8 + h) * 512 + d]);
      EXPECT_EQ(lse_big.ptr<float>()[r * 12 + h + 2], p.lse.ptr<float>()[r * 8 + h]);
    }
  // Padding left alone.
  EXPECT_TRUE(std::isnan(out_big.ptr<float>()[0]));
  EXPECT_TRUE(std::isnan(out_big.ptr<float>()[512]));
  EXPECT_TRUE(std::isnan(lse_big.ptr<float>()[0]));
}

TEST(SparseMla, HeadBlockSplitMatchesWholeRows) {
  // One row is split across head blocks (to use every core); the bits match the many-row run.
  auto g = rng_for_test();
  auto many =
      make_sparse_mla_problem({.rows = 16, .h_q = 64, .num_slots = 100, .topk = 40, .fp8 = true, .with_sink = true}, g);
  run_sparse_mla(many);
  SparseMlaArgs one = many.args();
  HostTensor out(DType::f32, {1, 64, 512}), lse(DType::f32, {1, 64}), mx(DType::f32, {1, 64});
  poison(out);
  one.q = many.q.view.slice(0, 5, 6);
  one.indices = many.indices.view.slice(0, 5, 6);
  one.out = out.view;
  one.lse = lse.view;
  one.max_logits = mx.view;
  sparse_mla(one);
  EXPECT_EQ(0, std::memcmp(out.bytes.data(), many.out.ptr<float>() + 5 * 64 * 512, 64 * 512 * 4));
  EXPECT_EQ(0, std::memcmp(lse.bytes.data(), many.lse.ptr<float>() + 5 * 64, 64 * 4));
  EXPECT_EQ(0, std::memcmp(mx.bytes.data(), many.max_logits.ptr<float>() + 5 * 64, 64 * 4));
}

TEST(SparseMla, RepeatRunsIdenticalBits) {
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem(
      {.rows = 5, .h_q = 16, .num_slots = 200, .topk = 64, .fp8 = true, .with_topk_length = true, .with_sink = true},
      g);
  run_sparse_mla(p);
  HostTensor out = p.out, lse = p.lse, mx = p.max_logits;
  run_sparse_mla(p);
  EXPECT_TRUE(same_bits(out, p.out));
  EXPECT_TRUE(same_bits(lse, p.lse));
  EXPECT_TRUE(same_bits(mx, p.max_logits));
}

TEST(SparseMla, Fp8GatherMatchesDecodeFp8MlaToken) {
  auto g = rng_for_test();
  HostTensor kv(DType::u8, {8, 656});
  fill_mla_cache(kv, true, g);
  // Token 7: every non-NaN e4m3 code in the latent, odd scales.
  uint8_t* t7 = kv.ptr<uint8_t>() + 7 * 656;
  for (int i = 0; i < 512; ++i) t7[i] = uint8_t(i % 256 == 0x7f || i % 256 == 0xff ? 0x3c : i % 256);
  const float scales[4] = {1.f / 64, 3.f, 0.125f, 1e-3f};
  std::memcpy(t7 + 512, scales, 16);
  const int32_t slots[10] = {7, -1, 0, 3, 8, 3, 7, 100, 1, -9};
  std::vector<float> got(10 * 576), want(576);
  const int64_t count = cpu::sparse::gather_row_keys(kv.view, slots, 1, 10, got.data());
  ASSERT_EQ(count, 6);
  const int32_t valid[6] = {7, 0, 3, 3, 7, 1};
  for (int j = 0; j < 6; ++j) {
    decode_fp8_mla_token(kv.ptr<uint8_t>() + valid[j] * 656, want.data());
    EXPECT_EQ(0, std::memcmp(got.data() + j * 576, want.data(), 576 * 4)) << "key " << j;
  }
}

// Manual timing at DeepSeek-V3.2 decode shapes: --gtest_also_run_disabled_tests.
TEST(SparseMla, DISABLED_DeepSeekShapeTiming) {
  auto g = rng_for_test();
  for (bool fp8 : {true, false}) {
    auto p = make_sparse_mla_problem({.rows = 4,
                                      .h_q = 128,
                                      .num_slots = 8192,
                                      .topk = 2048,
                                      .fp8 = fp8,
                                      .dtype = DType::bf16,
                                      .invalid_fraction = 0.0,
                                      .softmax_scale = 0.135234f},
                                     g);
    run_sparse_mla(p);
    const auto t0 = std::chrono::steady_clock::now();
    run_sparse_mla(p);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double flop = 4.0 * 128 * 2048 * 2 * (576 + 512);
    std::cout << (fp8 ? "fp8" : "bf16") << " cache: " << s / 4 * 1e3 << " ms/row, " << flop / s * 1e-9 << " GFLOP/s\n";
    expect_all_written(p);
  }
}
