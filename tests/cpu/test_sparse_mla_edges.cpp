// Sparse MLA named edge cases (invalid and duplicate indices, top-k lengths, the attention sink,
// empty rows) and argument validation.
#include <gtest/gtest.h>

#include <climits>
#include <functional>
#include <limits>
#include <string>

#include "sparse_mla_problem.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Row r of every head: out all zeros, lse and max_logits -inf.
void expect_empty_row(const SparseMlaProblem& p, int64_t r) {
  const int64_t h_q = p.c.h_q;
  int64_t nonzero = 0;
  for (int64_t i = r * h_q * 512; i < (r + 1) * h_q * 512; ++i) nonzero += p.out.get(i) != 0.f;
  EXPECT_EQ(nonzero, 0) << "row " << r;
  for (int64_t h = 0; h < h_q; ++h) {
    EXPECT_EQ(p.lse.get(r * h_q + h), kNegInf) << "row " << r << " head " << h;
    EXPECT_EQ(p.max_logits.get(r * h_q + h), kNegInf) << "row " << r << " head " << h;
  }
}

// Runs the float32 oracle and checks it against both brute-force references by the rule.
void expect_within_rule(SparseMlaProblem& p) {
  const SparseMlaReference ref64 = reference_sparse_mla<double>(p.args());
  const SparseMlaReference ref32 = reference_sparse_mla<float>(p.args());
  run_sparse_mla(p);
  expect_all_written(p);
  const SparseMlaErrors e = errors_vs(p, ref64), e32 = errors_vs(ref32, ref64);
  EXPECT_LE(e.out, tolerance_by_rule(e32.out, p.c.dtype));
  EXPECT_LE(e.lse, tolerance_by_rule(e32.lse, DType::f32));
  EXPECT_LE(e.max_logits, tolerance_by_rule(e32.max_logits, DType::f32));
}

void expect_same_outputs(const SparseMlaProblem& a, const SparseMlaProblem& b) {
  EXPECT_TRUE(same_bits(a.out, b.out));
  EXPECT_TRUE(same_bits(a.lse, b.lse));
  EXPECT_TRUE(same_bits(a.max_logits, b.max_logits));
}

// A second problem with the same inputs (fresh buffers), for bit comparisons of two runs.
SparseMlaProblem clone_inputs(const SparseMlaProblem& p) {
  auto g = rng_for_test();
  SparseMlaProblem c = make_sparse_mla_problem(p.c, g);
  copy_bytes(c.q, p.q);
  copy_bytes(c.kv, p.kv);
  copy_bytes(c.indices, p.indices);
  copy_bytes(c.topk_length, p.topk_length);
  copy_bytes(c.attn_sink, p.attn_sink);
  return c;
}

}  // namespace

TEST(SparseMlaEdges, AllIndicesInvalid) {
  auto g = rng_for_test();
  const int64_t num_slots = 50;
  const std::vector<std::vector<int32_t>> fills = {
      {-1}, {int32_t(num_slots)}, {int32_t(num_slots + 1)}, {INT32_MAX}, {-1, -5, int32_t(num_slots), INT32_MIN}};
  for (bool sink : {false, true}) {
    for (const auto& fill : fills) {
      SCOPED_TRACE("first value " + std::to_string(fill[0]) + (sink ? " with sink" : ""));
      auto p = make_sparse_mla_problem(
          {.rows = 3, .h_q = 8, .num_slots = num_slots, .topk = 20, .fp8 = sink, .with_sink = sink}, g);
      for (int64_t i = 0; i < p.indices.numel(); ++i) p.index_ptr()[i] = fill[size_t(i) % fill.size()];
      run_sparse_mla(p);
      expect_all_written(p);
      for (int64_t r = 0; r < 3; ++r) expect_empty_row(p, r);
    }
  }
}

TEST(SparseMlaEdges, EmptyPool) {
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem({.rows = 2, .h_q = 8, .num_slots = 0, .topk = 16, .with_sink = true}, g);
  for (int64_t i = 0; i < p.indices.numel(); ++i) p.index_ptr()[i] = int32_t(i % 3);  // all >= 0 = num_slots
  run_sparse_mla(p);
  expect_all_written(p);
  expect_empty_row(p, 0);
  expect_empty_row(p, 1);
}

TEST(SparseMlaEdges, TopkLenZero) {
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem({.rows = 4,
                                    .h_q = 8,
                                    .num_slots = 60,
                                    .topk = 24,
                                    .fp8 = true,
                                    .with_topk_length = true,
                                    .with_sink = true,
                                    .invalid_fraction = 0.0},
                                   g);
  const int32_t lengths[4] = {0, 24, 0, 3};
  std::memcpy(p.topk_length.ptr<int32_t>(), lengths, sizeof lengths);
  expect_within_rule(p);
  expect_empty_row(p, 0);
  expect_empty_row(p, 2);
  EXPECT_TRUE(std::isfinite(p.lse.get(1 * 8)));
  EXPECT_TRUE(std::isfinite(p.lse.get(3 * 8)));

  for (int64_t r = 0; r < 4; ++r) p.topk_length.ptr<int32_t>()[r] = 0;
  run_sparse_mla(p);
  expect_all_written(p);
  for (int64_t r = 0; r < 4; ++r) expect_empty_row(p, r);
}

TEST(SparseMlaEdges, TopkZero) {
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem({.rows = 3, .h_q = 8, .num_slots = 60, .topk = 0, .with_topk_length = true}, g);
  run_sparse_mla(p);
  expect_all_written(p);
  for (int64_t r = 0; r < 3; ++r) expect_empty_row(p, r);
}

TEST(SparseMlaEdges, PartialTopkLength) {
  // Entries past topk_length[r] are ignored even when they are valid slots.
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem({.rows = 6,
                                    .h_q = 16,
                                    .num_slots = 100,
                                    .topk = 48,
                                    .fp8 = true,
                                    .with_topk_length = true,
                                    .invalid_fraction = 0.05},
                                   g);
  const int32_t lengths[6] = {1, 47, 20, 48, 33, 2};
  std::memcpy(p.topk_length.ptr<int32_t>(), lengths, sizeof lengths);
  expect_within_rule(p);

  SparseMlaProblem cut = clone_inputs(p);
  cut.c.with_topk_length = false;
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t i = lengths[r]; i < 48; ++i) cut.index_ptr()[r * 48 + i] = -1;
  run_sparse_mla(cut);
  expect_same_outputs(p, cut);
}

TEST(SparseMlaEdges, DuplicateIndices) {
  auto g = rng_for_test();
  // Slots drawn from only 5 values: duplicates count as many times as they appear.
  auto p =
      make_sparse_mla_problem({.rows = 4, .h_q = 8, .num_slots = 5, .topk = 40, .fp8 = true, .with_sink = true}, g);
  expect_within_rule(p);

  auto p64 = make_sparse_mla_problem({.rows = 4, .h_q = 8, .num_slots = 5, .topk = 40, .dtype = DType::f64}, g);
  const SparseMlaReference ref = reference_sparse_mla<double>(p64.args());
  run_sparse_mla(p64, true);
  EXPECT_LE(errors_vs(p64, ref).out, 1e-12);

  // One slot repeated n times: out = its value, lse = max_logits + log(n).
  for (int64_t i = 0; i < 40; ++i) p64.index_ptr()[i] = 3;
  run_sparse_mla(p64, true);
  const std::vector<float> pool = decode_mla_pool(p64.kv.view);
  const double* out = reinterpret_cast<const double*>(p64.out.bytes.data());
  for (int64_t h = 0; h < 8; ++h) {
    for (int64_t d = 0; d < 512; ++d) ASSERT_NEAR(out[h * 512 + d], pool[3 * 576 + d], 1e-13);
    EXPECT_NEAR(p64.lse.get(h), p64.max_logits.get(h) + std::log(40.0), 1e-5);
  }
}

TEST(SparseMlaEdges, MixedInvalidIndices) {
  // Invalid entries of every kind interleaved with valid ones give the bits of the valid ones alone.
  auto g = rng_for_test();
  const int64_t num_slots = 70, topk = 30;
  auto p = make_sparse_mla_problem({.rows = 3,
                                    .h_q = 16,
                                    .num_slots = num_slots,
                                    .topk = topk,
                                    .fp8 = true,
                                    .with_sink = true,
                                    .invalid_fraction = 0.0},
                                   g);
  SparseMlaProblem packed = clone_inputs(p);
  const int32_t invalid[] = {-1, -5, int32_t(num_slots), INT32_MAX, INT32_MIN, int32_t(num_slots + 3)};
  std::bernoulli_distribution coin(0.4);
  for (int64_t r = 0; r < 3; ++r) {
    int64_t next_valid = 0;
    for (int64_t i = 0; i < topk; ++i) {
      int32_t& v = p.index_ptr()[r * topk + i];
      if (coin(g)) v = invalid[(r + i) % 6];
      else packed.index_ptr()[r * topk + next_valid++] = v;
    }
    for (int64_t i = next_valid; i < topk; ++i) packed.index_ptr()[r * topk + i] = -1;
  }
  expect_within_rule(p);
  run_sparse_mla(packed);
  expect_same_outputs(p, packed);
}

TEST(SparseMlaEdges, AttentionSink) {
  auto g = rng_for_test();
  auto p =
      make_sparse_mla_problem({.rows = 4, .h_q = 16, .num_slots = 80, .topk = 32, .fp8 = true, .with_sink = true}, g);
  expect_within_rule(p);
  auto p64 = make_sparse_mla_problem(
      {.rows = 3, .h_q = 8, .num_slots = 80, .topk = 32, .dtype = DType::f64, .with_sink = true}, g);
  const SparseMlaReference ref = reference_sparse_mla<double>(p64.args());
  run_sparse_mla(p64, true);
  EXPECT_LE(errors_vs(p64, ref).out, 1e-12);

  // lse and max_logits exclude the sink; a -inf sink changes nothing.
  SparseMlaProblem none = clone_inputs(p);
  none.c.with_sink = false;
  run_sparse_mla(none);
  EXPECT_TRUE(same_bits(p.lse, none.lse));
  EXPECT_TRUE(same_bits(p.max_logits, none.max_logits));
  SparseMlaProblem minus_inf = clone_inputs(p);
  for (int64_t h = 0; h < 16; ++h) minus_inf.attn_sink.ptr<float>()[h] = -INFINITY;
  run_sparse_mla(minus_inf);
  expect_same_outputs(minus_inf, none);

  // A sink far above every score takes all the mass: out -> 0 (exp overflows to inf), no NaN.
  SparseMlaProblem huge = clone_inputs(p);
  for (int64_t h = 0; h < 16; ++h) huge.attn_sink.ptr<float>()[h] = 1e4f;
  run_sparse_mla(huge);
  expect_all_written(huge);
  for (int64_t i = 0; i < huge.out.numel(); ++i) ASSERT_EQ(huge.out.get(i), 0.f);
  EXPECT_TRUE(same_bits(huge.lse, none.lse));
}

TEST(SparseMlaEdges, AttentionSinkWithEmptyRow) {
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem({.rows = 3, .h_q = 8, .num_slots = 40, .topk = 16, .with_sink = true}, g);
  for (int64_t i = 16; i < 32; ++i) p.index_ptr()[i] = (i % 2) ? -1 : 40;  // row 1 empty
  expect_within_rule(p);
  expect_empty_row(p, 1);
}

TEST(SparseMlaEdges, PoisonedOutputsAllWritten) {
  // Mixed empty and non-empty rows, bf16 output, every element written.
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem({.rows = 9,
                                    .h_q = 12,
                                    .num_slots = 64,
                                    .topk = 20,
                                    .fp8 = true,
                                    .dtype = DType::bf16,
                                    .with_topk_length = true,
                                    .with_sink = true},
                                   g);
  p.topk_length.ptr<int32_t>()[2] = 0;
  for (int64_t i = 0; i < 20; ++i) p.index_ptr()[5 * 20 + i] = -1;
  expect_within_rule(p);
  expect_empty_row(p, 2);
  expect_empty_row(p, 5);
}

TEST(SparseMlaEdges, OptionalOutputsAbsent) {
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem({.rows = 3, .h_q = 8, .num_slots = 64, .topk = 20}, g);
  run_sparse_mla(p);
  SparseMlaProblem bare = clone_inputs(p);
  SparseMlaArgs a = bare.args();
  a.lse = TensorView{};
  a.max_logits = TensorView{};
  poison(bare.out);
  sparse_mla(a);
  EXPECT_TRUE(same_bits(p.out, bare.out));
}

TEST(SparseMlaEdges, ZeroRows) {
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem({.rows = 0, .h_q = 8, .num_slots = 10, .topk = 4, .with_topk_length = true}, g);
  EXPECT_NO_THROW(sparse_mla(p.args()));
}

TEST(SparseMlaEdges, WorkspaceSizeIsZeroOnCpu) {
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem({.rows = 2, .h_q = 8, .num_slots = 10, .topk = 4, .fp8 = true}, g);
  EXPECT_EQ(sparse_mla_workspace_size(p.args(), DeviceCaps::cpu()), 0u);
}

TEST(SparseMlaEdges, BadArguments) {
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem(
      {.rows = 2, .h_q = 4, .num_slots = 10, .topk = 8, .with_topk_length = true, .with_sink = true}, g);
  HostTensor q512(DType::f32, {2, 4, 512}), q_i32(DType::i32, {2, 4, 576}), q_wide(DType::f32, {2, 4, 1152});
  HostTensor kv_bf16_656(DType::bf16, {10, 656}), kv_u8_576(DType::u8, {10, 576}), kv_f32(DType::f32, {10, 576});
  HostTensor kv_3d(DType::bf16, {10, 1, 576}), idx_i64(DType::i64, {2, 8}), idx_rows(DType::i32, {3, 8});
  HostTensor out_bf16(DType::bf16, {2, 4, 512}), out_576(DType::f32, {2, 4, 576}), len3(DType::i32, {3});
  HostTensor len_i64(DType::i64, {2}), sink5(DType::f32, {5}), sink_bf16(DType::bf16, {4});
  HostTensor lse25(DType::f32, {2, 5}), lse_f64(DType::f64, {2, 4}), max42(DType::f32, {4, 2});
  TensorView q_strided = q_wide.view;  // [2, 4, 576] with last-dim stride 2
  q_strided.shape = {2, 4, 576};
  q_strided.strides = {4 * 1152, 1152, 2};
  TensorView kv_on_cuda = p.kv.view;
  kv_on_cuda.device = Device::cuda(0);

  struct Case {
    const char* arg;
    std::function<void(SparseMlaArgs&)> mutate;
  };
  const std::vector<Case> cases = {
      {"q", [&](SparseMlaArgs& a) { a.q = q512.view; }},
      {"q", [&](SparseMlaArgs& a) { a.q = q_i32.view; }},
      {"q", [&](SparseMlaArgs& a) { a.q = TensorView{}; }},
      {"q", [&](SparseMlaArgs& a) { a.q = q_strided; }},
      {"kv", [&](SparseMlaArgs& a) { a.kv = kv_bf16_656.view; }},
      {"kv", [&](SparseMlaArgs& a) { a.kv = kv_u8_576.view; }},
      {"kv", [&](SparseMlaArgs& a) { a.kv = kv_f32.view; }},
      {"kv", [&](SparseMlaArgs& a) { a.kv = kv_3d.view; }},
      {"kv", [&](SparseMlaArgs& a) { a.kv = kv_on_cuda; }},
      {"indices", [&](SparseMlaArgs& a) { a.indices = idx_i64.view; }},
      {"indices", [&](SparseMlaArgs& a) { a.indices = idx_rows.view; }},
      {"out", [&](SparseMlaArgs& a) { a.out = out_bf16.view; }},
      {"out", [&](SparseMlaArgs& a) { a.out = out_576.view; }},
      {"out", [&](SparseMlaArgs& a) { a.out = TensorView{}; }},
      {"topk_length", [&](SparseMlaArgs& a) { a.topk_length = len3.view; }},
      {"topk_length", [&](SparseMlaArgs& a) { a.topk_length = len_i64.view; }},
      {"topk_length", [&](SparseMlaArgs& a) { a.topk_length.ptr<int32_t>()[1] = 9; }},
      {"topk_length", [&](SparseMlaArgs& a) { a.topk_length.ptr<int32_t>()[0] = -1; }},
      {"attn_sink", [&](SparseMlaArgs& a) { a.attn_sink = sink5.view; }},
      {"attn_sink", [&](SparseMlaArgs& a) { a.attn_sink = sink_bf16.view; }},
      {"lse", [&](SparseMlaArgs& a) { a.lse = lse25.view; }},
      {"lse", [&](SparseMlaArgs& a) { a.lse = lse_f64.view; }},
      {"max_logits", [&](SparseMlaArgs& a) { a.max_logits = max42.view; }},
      {"softmax_scale", [&](SparseMlaArgs& a) { a.softmax_scale = 0.f; }},
      {"softmax_scale", [&](SparseMlaArgs& a) { a.softmax_scale = -0.1f; }},
      {"softmax_scale", [&](SparseMlaArgs& a) { a.softmax_scale = NAN; }},
      {"softmax_scale", [&](SparseMlaArgs& a) { a.softmax_scale = INFINITY; }},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + " (" + cases[i].arg + ")");
    const int32_t saved[2] = {p.topk_length.ptr<int32_t>()[0], p.topk_length.ptr<int32_t>()[1]};
    SparseMlaArgs a = p.args();
    cases[i].mutate(a);
    try {
      sparse_mla(a);
      ADD_FAILURE() << "expected an attnserve::Error";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string("'") + cases[i].arg + "'"), std::string::npos) << m;
      EXPECT_NE(m.find("sparse_mla"), std::string::npos) << m;
    }
    p.topk_length.ptr<int32_t>()[0] = saved[0];
    p.topk_length.ptr<int32_t>()[1] = saved[1];
  }
  // The workspace query validates the same way.
  SparseMlaArgs a = p.args();
  a.kv = kv_u8_576.view;
  EXPECT_THROW(sparse_mla_workspace_size(a, DeviceCaps::cpu()), Error);
  EXPECT_NO_THROW(sparse_mla(p.args()));
}

TEST(SparseMlaEdges, CudaTensorsNeedBf16) {
  // On CUDA, q and out must be bf16 (the contract); checked before anything runs.
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem({.rows = 2, .h_q = 4, .num_slots = 10, .topk = 8}, g);
  SparseMlaArgs a = p.args();
  for (TensorView* t : {&a.q, &a.kv, &a.indices, &a.out, &a.lse, &a.max_logits}) t->device = Device::cuda(0);
  try {
    sparse_mla(a);
    ADD_FAILURE() << "expected an attnserve::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'q'"), std::string::npos) << e.what();
  }
}

#ifndef ATTNSERVE_WITH_CUDA
TEST(SparseMlaEdges, CudaTensorsWithoutCudaBuild) {
  auto g = rng_for_test();
  auto p = make_sparse_mla_problem({.rows = 2, .h_q = 4, .num_slots = 10, .topk = 8, .dtype = DType::bf16}, g);
  SparseMlaArgs a = p.args();
  for (TensorView* t : {&a.q, &a.kv, &a.indices, &a.out, &a.lse, &a.max_logits}) t->device = Device::cuda(0);
  try {
    sparse_mla(a);
    ADD_FAILURE() << "expected an attnserve::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA implementation"), std::string::npos) << e.what();
  }
}
#endif
