// The Hopper sparse MLA kernels (sm90_bf16, sm90_fp8: src/cuda/sparse_mla/sm90) forced on, against the
// CPU oracle and brute force by the tolerance rule (sparse_mla_gpu_check.h: -inf positions exact,
// nothing unwritten, two runs with identical bits): h_q 64 / 128 and padded head blocks (20, 96),
// decode rows (s_q 1 and 2), a prefill-like row count, invalid / out-of-range / repeated slots,
// topk_length 0 and partial (64-key tile edges), empty rows, FP8 tokens of zeros, split and unsplit,
// and the portable kernel's bits within the rule of the same problem. Skipped off sm_90 or without
// the sm_90a build.
#include <gtest/gtest.h>

#include <climits>
#include <cstring>
#include <string>

#include "sparse_mla_gpu_check.h"

using namespace attnserve;
using namespace attnserve::test;
using namespace attnserve::test::dsa_gpu;
using cuda::sparse_mla_op::Kernel;

namespace {

constexpr SparseTuning kSm90{.sm90 = 1};

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

// The forced Hopper kernel, unsplit and with forced split counts.
void check_sm90(SparseMlaProblem& p, const std::string& what, std::initializer_list<int> splits = {0, 1, 3}) {
  const SparseRefs refs = compute_refs(p);
  for (int s : splits) {
    SCOPED_TRACE(what + (s ? " forced splits " + std::to_string(s) : std::string(" auto splits")));
    SparseTuning t = kSm90;
    t.num_splits = s;
    check_gpu(p, refs, t);
    if (::testing::Test::HasFailure()) return;
  }
}

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
      check_sm90(p, name_of(c));
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
      check_sm90(p, name_of(c), {0, 1, 4});
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
    check_sm90(p, name_of(c), {0, 2});
    if (HasFailure()) return;
  }
}

// topk_length 0 (an empty row), 1, the 64-key tile edges, full; a large softmax scale moves the
// running max by large steps between tiles.
TEST(SparseMlaGpuSm90, TopkLengthEdgesAndSharpSoftmax) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true}) {
    SparseMlaCase c = base_case(64, fp8);
    c.rows = 7;
    c.topk = 256;
    c.with_topk_length = true;
    c.with_sink = true;
    c.softmax_scale = 1.2f;
    SparseMlaProblem p = make_sparse_mla_problem(c, g);
    SM90_REQUIRE(p);
    const int32_t lens[7] = {0, 1, 63, 64, 65, 200, 256};
    for (int r = 0; r < 7; ++r) p.topk_length.ptr<int32_t>()[r] = lens[r];
    check_sm90(p, name_of(c), {0, 1, 2, 4});
    if (HasFailure()) return;
  }
}

TEST(SparseMlaGpuSm90, InvalidRepeatedSlotsAndEmptyRows) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool fp8 : {false, true}) {
    SparseMlaCase c = base_case(128, fp8);
    c.rows = 5;
    c.topk = 200;
    c.invalid_fraction = 0.0;
    c.with_sink = true;
    SparseMlaProblem p = make_sparse_mla_problem(c, g);
    SM90_REQUIRE(p);
    int32_t* idx = p.index_ptr();
    const int32_t bad[6] = {-1, -5, int32_t(c.num_slots), INT_MAX, INT_MIN, int32_t(c.num_slots) + 7};
    for (int i = 0; i < 6; ++i) idx[i * 13] = bad[i];                         // row 0: scattered invalid slots
    for (int i = 0; i < 200; ++i) idx[200 + i] = 17 + (i % 3);                // row 1: three slots, many times
    for (int i = 0; i < 200; ++i) idx[400 + i] = i % 2 ? -1 : 1999;           // row 2: one slot, 100 times
    for (int i = 0; i < 200; ++i) idx[600 + i] = -1;                          // row 3: no valid slot (empty row)
    for (int i = 0; i < 200; ++i) idx[800 + i] = i < 64 ? -1 : idx[800 + i];  // row 4: first tile all invalid
    check_sm90(p, name_of(c), {0, 1, 2, 4});
    if (HasFailure()) return;
  }
}

// FP8-656 tokens that are all zero bytes (codes, scales and rope 0): a whole tile of them in one row,
// some of them mixed into another.
TEST(SparseMlaGpuSm90, Fp8ZeroTiles) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  SparseMlaCase c = base_case(64, true);
  c.rows = 3;
  c.topk = 192;
  c.invalid_fraction = 0.05;
  SparseMlaProblem p = make_sparse_mla_problem(c, g);
  SM90_REQUIRE(p);
  for (int64_t s = 0; s < 100; ++s) std::memset(p.kv.ptr<uint8_t>() + s * 656, 0, 656);  // slots 0..99: zeros
  int32_t* idx = p.index_ptr();
  for (int i = 64; i < 128; ++i) idx[i] = i - 64;           // row 0, tile 1: zero tokens only
  for (int i = 0; i < 192; i += 3) idx[192 + i] = i % 100;  // row 1: every third key a zero token
  check_sm90(p, name_of(c), {0, 1, 3});
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
    const SparseRefs refs = compute_refs(p);
    const GpuResult h = check_gpu(p, refs, kSm90);
    const GpuResult s = check_gpu(p, refs, SparseTuning{.sm90 = 0});
    if (HasFailure()) return;
    const auto a = to_doubles(h.out), b = to_doubles(s.out);
    EXPECT_LE(rel_l2(a, b), 1e-2) << name_of(c);
  }
}
