// The small-head FP8-656 sparse MLA kernel (sm90_fp8_small: src/cuda/sparse_mla/sm90/small_heads.cuh)
// forced on, against the CPU oracle and brute force by the tolerance rule (sparse_mla_gpu_check.h: -inf
// positions exact, nothing unwritten, two runs with identical bits): h_q 16 / 32 and odd counts (1, 8, 20,
// 31), decode rows of requests with s_q 1 / 2 / 4 (next_n: each query token is a row, the later ones see
// one more key), index lists of page size 1 and 64, invalid / out-of-range / repeated slots, topk_length
// 0 and partial (64-key tile edges), empty rows, FP8 tokens of zeros, forced split counts and ring
// depths, the portable kernel's outputs on the same problem, and the deterministic mode's batch
// invariance; also the 64-head Hopper kernel on the same edge cases at h_q 32 / 20 (the plan's other
// candidate there). Skipped off sm_90 or without the sm_90a build.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "sparse_mla_forced_cases.h"

using namespace attnserve;
using namespace attnserve::test;
using namespace attnserve::test::dsa_gpu;
using cuda::sparse_mla_op::Kernel;

namespace {

constexpr SparseTuning kSmall{.small = 1};

bool small_runs(const SparseMlaProblem& p) {
  if (p.c.rows == 0) return true;
  const DeviceCaps caps = query_device_caps(Device::cuda());
  return cuda::sparse_mla_op::select(p.args(), caps, kSmall).kernel == Kernel::sm90_fp8_small;
}

#define SMALL_REQUIRE(p)                                                                      \
  do {                                                                                        \
    if (!small_runs(p)) GTEST_SKIP() << "the small-head sparse MLA kernel does not run here"; \
  } while (0)

SparseMlaCase small_case(int64_t h_q) {
  SparseMlaCase c = base_case(h_q, true);
  c.topk = 300;  // 4 full 64-key tiles and a partial one
  return c;
}

}  // namespace

TEST(SparseMlaGpuSmall, PlanChoosesTheSmallKernel) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t h_q : {16, 32, 20}) {
    SparseMlaProblem p = make_sparse_mla_problem(base_case(h_q, true), g);
    SMALL_REQUIRE(p);
    const DeviceCaps caps = query_device_caps(Device::cuda());
    EXPECT_EQ(cuda::sparse_mla_op::select(p.args(), caps).kernel, Kernel::sm90_fp8_small);  // the default
    EXPECT_EQ(cuda::sparse_mla_op::select(p.args(), caps, {.sm90 = 0}).kernel, Kernel::sm80_fp8);
  }
}

TEST(SparseMlaGpuSmall, HeadCounts) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t h_q : {16, 32, 1, 8, 20, 31}) {
    SparseMlaCase c = small_case(h_q);
    c.with_sink = h_q != 16;
    SparseMlaProblem p = make_sparse_mla_problem(c, g);
    SMALL_REQUIRE(p);
    check_forced(p, kSmall, name_of(c), {0, 1, 3});
    if (HasFailure()) return;
  }
}

// Decode with next_n = s_q query tokens per request: rows r * s_q + j, the request's top-k list shared
// by its tokens, token j seeing the list's first L - (s_q - 1 - j) keys; top-k 2048 over a large pool.
TEST(SparseMlaGpuSmall, DecodeRowsNextN) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t h_q : {16, 32})
    for (int s_q : {1, 2, 4}) {
      SparseMlaCase c = base_case(h_q, true);
      c.rows = 3 * s_q;
      c.topk = 2048;
      c.num_slots = 20000;
      c.invalid_fraction = 0.02;
      c.with_topk_length = true;
      c.with_sink = true;
      SparseMlaProblem p = make_sparse_mla_problem(c, g);
      SMALL_REQUIRE(p);
      int32_t* idx = p.index_ptr();
      const int32_t lens[3] = {2048, 1500, 700};
      for (int r = 0; r < 3; ++r)
        for (int j = 0; j < s_q; ++j) {
          const int64_t row = r * s_q + j;
          if (j > 0) std::memcpy(idx + row * 2048, idx + r * s_q * 2048, 2048 * 4);  // the request's list
          p.topk_length.ptr<int32_t>()[row] = lens[r] - (s_q - 1 - j);
        }
      check_forced(p, kSmall, name_of(c) + " s_q " + std::to_string(s_q), {0, 1, 4});
      if (HasFailure()) return;
    }
}

// Index lists as the page-table transform makes them: page size 64 (runs of consecutive slots of a
// page, pages in random order) and page size 1 (any slots), top-k 512.
TEST(SparseMlaGpuSmall, PageSizes1And64) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int page : {1, 64}) {
    SparseMlaCase c = base_case(16, true);
    c.rows = 4;
    c.topk = 512;
    c.num_slots = 64 * 100;
    c.invalid_fraction = 0.0;
    c.with_topk_length = true;
    SparseMlaProblem p = make_sparse_mla_problem(c, g);
    SMALL_REQUIRE(p);
    std::uniform_int_distribution<int32_t> pick_page(0, int32_t(c.num_slots / page) - 1);
    int32_t* idx = p.index_ptr();
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t i = 0; i < c.topk; i += page) {
        const int32_t base = pick_page(g) * page;
        for (int k = 0; k < page && i + k < c.topk; ++k) idx[r * c.topk + i + k] = base + k;
      }
    check_forced(p, kSmall, name_of(c) + " page " + std::to_string(page), {0, 2});
    if (HasFailure()) return;
  }
}

// topk_length 0 (an empty row), 1, the 64-key tile edges, full; a large softmax scale moves the
// running max by large steps between tiles.
TEST(SparseMlaGpuSmall, TopkLengthEdgesAndSharpSoftmax) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t h_q : {16, 32}) {
    SparseMlaProblem p = topk_length_edges_problem(h_q, true, g);
    SMALL_REQUIRE(p);
    check_forced(p, kSmall, name_of(p.c), {0, 1, 2, 4});
    if (HasFailure()) return;
  }
}

TEST(SparseMlaGpuSmall, InvalidRepeatedSlotsAndEmptyRows) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t h_q : {16, 32}) {
    SparseMlaProblem p = invalid_repeated_slots_problem(h_q, true, g);
    SMALL_REQUIRE(p);
    check_forced(p, kSmall, name_of(p.c), {0, 1, 2, 4});
    if (HasFailure()) return;
  }
}

// All indices invalid (every row empty: out 0, lse = max_logits = -inf) and an empty pool.
TEST(SparseMlaGpuSmall, AllIndicesInvalidAndEmptyPool) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  SparseMlaCase c = base_case(16, true);
  c.invalid_fraction = 1.0;
  c.with_sink = true;
  SparseMlaProblem p = make_sparse_mla_problem(c, g);
  SMALL_REQUIRE(p);
  check_forced(p, kSmall, name_of(c) + " all invalid", {0, 2});
  c.num_slots = 0;
  c.invalid_fraction = 0.0;
  SparseMlaProblem e = make_sparse_mla_problem(c, g);
  check_forced(e, kSmall, name_of(c) + " empty pool", {0, 2});
}

// FP8-656 tokens that are all zero bytes (codes, scales and rope 0): a whole tile of them in one row,
// some of them mixed into another, and one row of zero tokens only.
TEST(SparseMlaGpuSmall, Fp8ZeroTiles) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  SparseMlaProblem p = fp8_zero_tokens_problem(32, true, g);
  SMALL_REQUIRE(p);
  check_forced(p, kSmall, name_of(p.c), {0, 1, 3});
}

// Token scales that differ by large powers of two between keys of one row (the running reference
// scale R_b moves up several times), with a sharp softmax.
TEST(SparseMlaGpuSmall, ScalesSpreadAcrossKeys) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  SparseMlaCase c = base_case(16, true);
  c.rows = 3;
  c.topk = 384;
  c.num_slots = 600;
  c.softmax_scale = 0.3f;
  SparseMlaProblem p = make_sparse_mla_problem(c, g);
  SMALL_REQUIRE(p);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> nope(512), rope(64);
  for (int64_t s = 0; s < c.num_slots; ++s) {
    const float mag = std::ldexp(1.f, int(s % 13) - 6);  // 2^-6 .. 2^6 per token
    for (float& x : nope) x = d(g) * mag;
    for (float& x : rope) x = d(g);
    encode_fp8_mla_token(nope.data(), rope.data(), p.kv.ptr<uint8_t>() + s * 656);
  }
  check_forced(p, kSmall, name_of(c), {0, 1, 3});
}

// Ring depths 2, 3 and 4 at both head blocks (on an H200 the plan takes 2 at HB 16, two CTAs per SM, and 4 at
// HB 32; 3 and 4 at HB 16 run one CTA per SM under the same 128-register cap).
TEST(SparseMlaGpuSmall, RingDepths) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t h_q : {16, 32})
    for (int stages : {2, 3, 4}) {
      SparseMlaCase c = small_case(h_q);
      c.rows = 3;
      c.topk = 700;
      c.with_topk_length = true;
      SparseMlaProblem p = make_sparse_mla_problem(c, g);
      SMALL_REQUIRE(p);
      check_forced(p, kSmall, name_of(c), {0, 1, 2}, stages);
      if (HasFailure()) return;
    }
}

// The 64-head Hopper kernel (sm90_fp8, 64-head blocks: h_q 32 and 20 are padded with zero rows of Q) on the small
// kernel's edge cases, so that the plan may pick it for h_q 17..32 where it is faster: topk_length 0 / 1 / tile
// edges with a sink and a sharp softmax, invalid / repeated slots and empty rows, FP8 tokens of zeros; auto and
// forced split counts.
TEST(SparseMlaGpuSmall, HopperKernelAtSmallHeadCounts) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  constexpr SparseTuning kHopper{.sm90 = 1, .small = 0};
  const DeviceCaps caps = query_device_caps(Device::cuda());
  auto check_hopper = [&](SparseMlaProblem& p, const std::string& what) {
    if (cuda::sparse_mla_op::select(p.args(), caps, kHopper).kernel != Kernel::sm90_fp8) {
      GTEST_SKIP() << "the 64-head Hopper kernel does not run here";
    }
    check_forced(p, kHopper, what + " hopper", {0, 1, 2, 4});
  };
  for (int64_t h_q : {32, 20}) {
    SparseMlaProblem edges = topk_length_edges_problem(h_q, true, g);
    check_hopper(edges, name_of(edges.c) + " topk_length edges");
    if (HasFailure() || IsSkipped()) return;
    SparseMlaProblem slots = invalid_repeated_slots_problem(h_q, true, g);
    check_hopper(slots, name_of(slots.c) + " invalid, repeated, empty rows");
    if (HasFailure()) return;
    SparseMlaProblem zeros = fp8_zero_tokens_problem(h_q, true, g);
    check_hopper(zeros, name_of(zeros.c) + " FP8 zero tokens");
    if (HasFailure()) return;
  }
}

// The small-head and the portable kernel on one problem: both within the rule of the references, and
// close to each other.
TEST(SparseMlaGpuSmall, AgreesWithThePortableKernel) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t h_q : {16, 32}) {
    SparseMlaCase c = base_case(h_q, true);
    c.topk = 512;
    c.with_sink = true;
    SparseMlaProblem p = make_sparse_mla_problem(c, g);
    SMALL_REQUIRE(p);
    expect_agrees_with_portable(p, kSmall);
    if (HasFailure()) return;
  }
}

// Deterministic mode: a split count of top-k alone, so a row's bits do not depend on how many rows run
// with it (the first 3 rows alone = the same rows inside a batch of 40); the default mode splits the
// 3-row batch further. Both against the oracle.
TEST(SparseMlaGpuSmall, DeterministicIsBatchInvariant) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  SparseMlaCase c = base_case(16, true);
  c.rows = 40;
  c.topk = 1024;
  c.num_slots = 5000;
  c.with_sink = true;
  SparseMlaProblem p = make_sparse_mla_problem(c, g);
  SMALL_REQUIRE(p);
  const SparseRefs refs = compute_refs(p);
  SparseMlaArgs full = p.args();
  full.deterministic = true;
  const DeviceCaps caps = query_device_caps(Device::cuda());
  const int det_splits = cuda::sparse_mla_op::select(full, caps).num_splits;
  const GpuResult big = run_gpu(full, p.out, p.lse, p.max_logits);
  SparseMlaArgs few = full;
  few.q = full.q.slice(0, 0, 3);
  few.indices = full.indices.slice(0, 0, 3);
  few.out = full.out.slice(0, 0, 3);
  few.lse = full.lse.slice(0, 0, 3);
  few.max_logits = full.max_logits.slice(0, 0, 3);
  EXPECT_EQ(cuda::sparse_mla_op::select(few, caps).num_splits, det_splits);
  SparseMlaArgs few_default = few;
  few_default.deterministic = false;
  EXPECT_GT(cuda::sparse_mla_op::select(few_default, caps).num_splits, det_splits);
  const GpuResult small = run_gpu(few, p.out, p.lse, p.max_logits);
  const std::size_t out_bytes = 3 * 16 * 512 * 2, stat_bytes = 3 * 16 * 4;
  EXPECT_EQ(0, std::memcmp(big.out.bytes.data(), small.out.bytes.data(), out_bytes));
  EXPECT_EQ(0, std::memcmp(big.lse.bytes.data(), small.lse.bytes.data(), stat_bytes));
  EXPECT_EQ(0, std::memcmp(big.max_logits.bytes.data(), small.max_logits.bytes.data(), stat_bytes));
  // the deterministic batch against the references
  expect_close("out", to_doubles(big.out), to_doubles(p.out), refs.ref32.out, refs.ref64.out, 0.0, DType::bf16);
  expect_close("lse", to_doubles(big.lse), to_doubles(p.lse), refs.ref32.lse, refs.ref64.lse, kTensorCoreStatAllowance,
               DType::f32);
}
