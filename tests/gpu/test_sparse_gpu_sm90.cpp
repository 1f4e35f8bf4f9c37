// The Hopper sparse MLA kernels (sm90_bf16, sm90_fp8: src/cuda/sparse_mla/sm90) forced on, against the
// CPU oracle and brute force by the tolerance rule (sparse_mla_gpu_check.h: -inf positions exact,
// nothing unwritten, two runs with identical bits): h_q 64 / 128 and padded head blocks (20, 96),
// decode rows (s_q 1 and 2), a prefill-like row count, invalid / out-of-range / repeated slots,
// topk_length 0 and partial (64-key tile edges), empty rows, FP8 tokens of zeros, split and unsplit,
// and the portable kernel's bits within the rule of the same problem. Skipped off sm_90 or without
// the sm_90a build.
#include <gtest/gtest.h>

#include <string>

#include "sparse_mla_forced_cases.h"

using namespace attnserve;
using namespace attnserve::test;
using namespace attnserve::test::dsa_gpu;
using cuda::sparse_mla_op::Kernel;

namespace {

// The session-4 Hopper kernels (since session 9 the default for h_q % 64 == 0 is the dense schedule, tested in
// test_sparse_gpu_sm90_dense.cpp; these stay for padded head blocks and on request).
constexpr SparseTuning kSm90{.sm90 = 1, .dense_schedule = 0, .dense_schedule_fp8 = 0};

// Skips unless the forced plan of `p` really is a Hopper kernel (sm_90 device, sm_90a build).
bool sm90_runs(const SparseMlaProblem& p) {
  const DeviceCaps caps = query_device_caps(Device::cuda());
  if (p.c.rows == 0) return true;
  const auto plan = cuda::sparse_mla_op::select(p.args(), caps, kSm90);
  return cuda::sparse_mla_op::is_sm90(plan.kernel);
}

#define SM90_REQUIRE(p)                                                                  \
  do {                                                                                   \
    if (!sm90_runs(p)) GTEST_SKIP() << "the Hopper sparse MLA kernel does not run here"; \
  } while (0)

}  // namespace

TEST(SparseMlaGpuSm90, PlanChoosesTheHopperKernel) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  SparseMlaProblem p = make_sparse_mla_problem(base_case(128, true), g);
  SM90_REQUIRE(p);
  const DeviceCaps caps = query_device_caps(Device::cuda());
  EXPECT_EQ(cuda::sparse_mla_op::select(p.args(), caps, kSm90).kernel, Kernel::sm90_fp8);
  EXPECT_EQ(cuda::sparse_mla_op::select(p.args(), caps, {.sm90 = 0}).kernel, Kernel::sm80_fp8);
}

TEST(SparseMlaGpuSm90, HeadCounts) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true})
    for (int64_t h_q : {64, 128, 20, 96}) {
      SparseMlaCase c = base_case(h_q, fp8);
      c.topk = 300;  // 4 full 64-key tiles and a partial one
      c.with_sink = h_q != 64;
      SparseMlaProblem p = make_sparse_mla_problem(c, g);
      SM90_REQUIRE(p);
      check_forced(p, kSm90, name_of(c), {0, 1, 3});
      if (HasFailure()) return;
    }
}

// Decode rows: one request with s_q 1 and one with s_q 2 (rows are query tokens), top-k 2048 over a
// large pool.
TEST(SparseMlaGpuSm90, DecodeRowsTopk2048) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {true, false})
    for (int64_t rows : {1, 2}) {
      SparseMlaCase c = base_case(128, fp8);
      c.rows = rows;
      c.topk = 2048;
      c.num_slots = 20000;
      c.invalid_fraction = 0.02;
      c.with_sink = true;
      SparseMlaProblem p = make_sparse_mla_problem(c, g);
      SM90_REQUIRE(p);
      check_forced(p, kSm90, name_of(c), {0, 1, 4});
      if (HasFailure()) return;
    }
}

TEST(SparseMlaGpuSm90, PrefillLikeRows) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true}) {
    SparseMlaCase c = base_case(64, fp8);
    c.rows = 40;
    c.topk = 192;
    c.num_slots = 600;
    c.with_topk_length = true;
    SparseMlaProblem p = make_sparse_mla_problem(c, g);
    SM90_REQUIRE(p);
    check_forced(p, kSm90, name_of(c), {0, 2});
    if (HasFailure()) return;
  }
}

// topk_length 0 (an empty row), 1, the 64-key tile edges, full; a large softmax scale moves the
// running max by large steps between tiles.
TEST(SparseMlaGpuSm90, TopkLengthEdgesAndSharpSoftmax) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true}) {
    SparseMlaProblem p = topk_length_edges_problem(64, fp8, g);
    SM90_REQUIRE(p);
    check_forced(p, kSm90, name_of(p.c), {0, 1, 2, 4});
    if (HasFailure()) return;
  }
}

TEST(SparseMlaGpuSm90, InvalidRepeatedSlotsAndEmptyRows) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true}) {
    SparseMlaProblem p = invalid_repeated_slots_problem(128, fp8, g);
    SM90_REQUIRE(p);
    check_forced(p, kSm90, name_of(p.c), {0, 1, 2, 4});
    if (HasFailure()) return;
  }
}

// FP8-656 tokens that are all zero bytes (codes, scales and rope 0): a whole tile of them in one row,
// some of them mixed into another.
TEST(SparseMlaGpuSm90, Fp8ZeroTiles) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  SparseMlaProblem p = fp8_zero_tokens_problem(64, false, g);
  SM90_REQUIRE(p);
  check_forced(p, kSm90, name_of(p.c), {0, 1, 3});
}

// The Hopper and the portable kernel on one problem: both within the rule of the references
// (checked above); here their outputs are also close to each other.
TEST(SparseMlaGpuSm90, AgreesWithThePortableKernel) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true}) {
    SparseMlaCase c = base_case(128, fp8);
    c.topk = 512;
    c.with_sink = true;
    SparseMlaProblem p = make_sparse_mla_problem(c, g);
    SM90_REQUIRE(p);
    expect_agrees_with_portable(p, kSm90);
    if (HasFailure()) return;
  }
}
