// The sparse MLA kernels on the dense MLA decode kernel's schedule (sm90_bf16_dense / sm90_fp8_dense:
// SparseMlaTuning::dense_schedule / dense_schedule_fp8, src/cuda/sparse_mla/sm90/dense_schedule.cuh) forced on, over
// bf16 and FP8-656 caches, against the CPU oracle and brute force by the tolerance
// rule (sparse_mla_gpu_check.h: -inf positions exact, nothing unwritten, two runs with identical bits): h_q 64 / 128,
// decode rows (s_q 1 and 2) at top-k 2048, a prefill-like row count, small and odd top-k (one partial tile),
// topk_length 0 / partial / at the 64-key tile edges, invalid / out-of-range / repeated indices, rows without a
// valid index, FP8 tokens of zeros, sink, splits 1 / forced / auto, and agreement with the portable kernel. Skipped off
// sm_90 or without the sm_90a build.
#include <gtest/gtest.h>

#include <string>

#include "sparse_mla_forced_cases.h"

using namespace attnserve;
using namespace attnserve::test;
using namespace attnserve::test::dsa_gpu;
using cuda::sparse_mla_op::Kernel;

namespace {

constexpr SparseTuning kDense{.sm90 = 1, .dense_schedule = 1};
constexpr SparseTuning kDenseFp8{.sm90 = 1, .dense_schedule_fp8 = 1};

// Skips unless the forced plan of `p` really is the dense-schedule kernel of its cache (sm_90 device, sm_90a build).
bool dense_runs(const SparseMlaProblem& p) {
  const DeviceCaps caps = query_device_caps(Device::cuda());
  const Kernel k = cuda::sparse_mla_op::select(p.args(), caps, p.c.fp8 ? kDenseFp8 : kDense).kernel;
  return k == (p.c.fp8 ? Kernel::sm90_fp8_dense : Kernel::sm90_bf16_dense);
}
const SparseTuning& dense_for(const SparseMlaProblem& p) { return p.c.fp8 ? kDenseFp8 : kDense; }

#define DENSE_REQUIRE(p)                                                                          \
  do {                                                                                            \
    if (!dense_runs(p)) GTEST_SKIP() << "the dense-schedule sparse MLA kernel does not run here"; \
  } while (0)

}  // namespace

TEST(SparseMlaGpuSm90Dense, PlanTakesItByDefault) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  SparseMlaProblem p = make_sparse_mla_problem(base_case(128, false), g);
  DENSE_REQUIRE(p);
  const DeviceCaps caps = query_device_caps(Device::cuda());
  EXPECT_EQ(cuda::sparse_mla_op::select(p.args(), caps, {.sm90 = 1}).kernel, Kernel::sm90_bf16_dense);
  EXPECT_EQ(cuda::sparse_mla_op::select(p.args(), caps).kernel, Kernel::sm90_bf16_dense);
  EXPECT_EQ(cuda::sparse_mla_op::select(p.args(), caps, {.dense_schedule = 0}).kernel, Kernel::sm90_bf16);
  SparseMlaProblem f = make_sparse_mla_problem(base_case(128, true), g);
  EXPECT_EQ(cuda::sparse_mla_op::select(f.args(), caps).kernel, Kernel::sm90_fp8_dense);
  EXPECT_EQ(cuda::sparse_mla_op::select(f.args(), caps, {.dense_schedule_fp8 = 0}).kernel, Kernel::sm90_fp8);
}

TEST(SparseMlaGpuSm90Dense, HeadCounts) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true})
    for (int64_t h_q : {64, 128}) {
      SparseMlaCase c = base_case(h_q, fp8);
      c.topk = 300;  // 4 full 64-key tiles and a partial one
      c.with_sink = h_q == 128;
      SparseMlaProblem p = make_sparse_mla_problem(c, g);
      DENSE_REQUIRE(p);
      check_forced(p, dense_for(p), name_of(c), {0, 1, 3});
      if (HasFailure()) return;
    }
}

// Decode rows: s_q 1 and s_q 2 (rows are query tokens), top-k 2048 over a large pool; the auto split count cuts
// each list across many CTAs here.
TEST(SparseMlaGpuSm90Dense, DecodeRowsTopk2048) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true})
    for (int64_t h_q : {128, 64})
      for (int64_t rows : {1, 2}) {
        SparseMlaCase c = base_case(h_q, fp8);
        c.rows = rows;
        c.topk = 2048;
        c.num_slots = 20000;
        c.invalid_fraction = 0.02;
        c.with_sink = true;
        SparseMlaProblem p = make_sparse_mla_problem(c, g);
        DENSE_REQUIRE(p);
        check_forced(p, dense_for(p), name_of(c), {0, 1, 4});
        if (HasFailure()) return;
      }
}

TEST(SparseMlaGpuSm90Dense, PrefillLikeRows) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true})
    for (int64_t h_q : {64, 128}) {
      SparseMlaCase c = base_case(h_q, fp8);
      c.rows = 40;
      c.topk = 192;
      c.num_slots = 600;
      c.with_topk_length = true;
      c.with_sink = h_q == 64;
      SparseMlaProblem p = make_sparse_mla_problem(c, g);
      DENSE_REQUIRE(p);
      check_forced(p, dense_for(p), name_of(c), {0, 2});
      if (HasFailure()) return;
    }
}

// Top-k below one tile and odd: 1 and 37 keys (one partial tile, most of the key mask clear), and 97 (a full tile and
// a partial one) with a third of the indices invalid.
TEST(SparseMlaGpuSm90Dense, SmallOddTopk) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true})
    for (int64_t topk : {1, 37, 97}) {
      SparseMlaCase c = base_case(128, fp8);
      c.rows = 3;
      c.topk = topk;
      c.invalid_fraction = topk == 97 ? 0.33 : 0.1;
      c.with_sink = topk != 37;
      SparseMlaProblem p = make_sparse_mla_problem(c, g);
      DENSE_REQUIRE(p);
      check_forced(p, dense_for(p), name_of(c), {0, 1});
      if (HasFailure()) return;
    }
}

// topk_length 0 (an empty row), 1, the 64-key tile edges, full; a large softmax scale moves the running max by
// large steps between tiles.
TEST(SparseMlaGpuSm90Dense, TopkLengthEdgesAndSharpSoftmax) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true})
    for (int64_t h_q : {64, 128}) {
      SparseMlaProblem p = topk_length_edges_problem(h_q, fp8, g);
      DENSE_REQUIRE(p);
      check_forced(p, dense_for(p), name_of(p.c), {0, 1, 2, 4});
      if (HasFailure()) return;
    }
}

TEST(SparseMlaGpuSm90Dense, InvalidRepeatedSlotsAndEmptyRows) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true})
    for (int64_t h_q : {128, 64}) {
      SparseMlaProblem p = invalid_repeated_slots_problem(h_q, fp8, g);
      DENSE_REQUIRE(p);
      check_forced(p, dense_for(p), name_of(p.c), {0, 1, 2, 4});
      if (HasFailure()) return;
    }
}

// Both within the rule of the references (checked above); here also close to the portable kernel's outputs.
TEST(SparseMlaGpuSm90Dense, AgreesWithThePortableKernel) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true}) {
    SparseMlaCase c = base_case(128, fp8);
    c.topk = 512;
    c.with_sink = true;
    SparseMlaProblem p = make_sparse_mla_problem(c, g);
    DENSE_REQUIRE(p);
    expect_agrees_with_portable(p, dense_for(p));
    if (HasFailure()) return;
  }
}

// FP8-656 tokens that are all zero bytes (codes, scales and rope 0): a whole tile of them in one row, every third key
// of another, a row of them only.
TEST(SparseMlaGpuSm90Dense, Fp8ZeroTiles) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t h_q : {64, 128}) {
    SparseMlaProblem p = fp8_zero_tokens_problem(h_q, true, g);
    DENSE_REQUIRE(p);
    check_forced(p, kDenseFp8, name_of(p.c), {0, 1, 3});
    if (HasFailure()) return;
  }
}
