// Shared by the forced-kernel sparse MLA GPU tests (test_sparse_gpu_sm90.cpp: the 64-head Hopper
// kernels; test_sparse_gpu_small.cpp: the small-head kernel and the 64-head one at small head counts):
// one problem checked with a forced kernel over several split counts, the agreement with the portable
// kernel, and the edge-case problems they all run (index lists and caches edited after
// make_sparse_mla_problem; the plan reads neither, so a skip check may come before or after).
#pragma once
#include <gtest/gtest.h>

#include <climits>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>

#include "sparse_mla_gpu_check.h"

namespace attnserve::test::dsa_gpu {

// `p` against references computed once, with the kernel choice `forced` and each split count of
// `splits` (0: the plan's), ring depth `stages` (0: the plan's); stops at the first failure.
inline void check_forced(SparseMlaProblem& p, const SparseTuning& forced, const std::string& what,
                         std::initializer_list<int> splits, int stages = 0) {
  const SparseRefs refs = compute_refs(p);
  for (int s : splits) {
    SCOPED_TRACE(what + (s ? " forced splits " + std::to_string(s) : std::string(" auto splits")) +
                 (stages ? " stages " + std::to_string(stages) : std::string()));
    SparseTuning t = forced;
    t.num_splits = s;
    t.stages = stages;
    check_gpu(p, refs, t);
    if (::testing::Test::HasFailure()) return;
  }
}

// The kernel `forced` and the portable kernel on one problem: both within the rule of the references,
// and their outputs close to each other.
inline void expect_agrees_with_portable(SparseMlaProblem& p, const SparseTuning& forced) {
  const SparseRefs refs = compute_refs(p);
  const GpuResult f = check_gpu(p, refs, forced);
  const GpuResult portable = check_gpu(p, refs, SparseTuning{.sm90 = 0});
  if (::testing::Test::HasFailure()) return;
  EXPECT_LE(rel_l2(to_doubles(f.out), to_doubles(portable.out)), 1e-2) << name_of(p.c);
}

// 7 rows of top-k 256 with topk_length 0 (an empty row), 1, the 64-key tile edges (63, 64, 65), 200
// and full; a sink, and a large softmax scale that moves the running max by large steps between tiles.
inline SparseMlaProblem topk_length_edges_problem(int64_t h_q, bool fp8, std::mt19937_64& g) {
  SparseMlaCase c = base_case(h_q, fp8);
  c.rows = 7;
  c.topk = 256;
  c.with_topk_length = true;
  c.with_sink = true;
  c.softmax_scale = 1.2f;
  SparseMlaProblem p = make_sparse_mla_problem(c, g);
  const int32_t lens[7] = {0, 1, 63, 64, 65, 200, 256};
  for (int r = 0; r < 7; ++r) p.topk_length.ptr<int32_t>()[r] = lens[r];
  return p;
}

// 5 rows of top-k 200 with a sink: invalid and out-of-range slots, repeated slots, an empty row.
inline SparseMlaProblem invalid_repeated_slots_problem(int64_t h_q, bool fp8, std::mt19937_64& g) {
  SparseMlaCase c = base_case(h_q, fp8);
  c.rows = 5;
  c.topk = 200;
  c.invalid_fraction = 0.0;
  c.with_sink = true;
  SparseMlaProblem p = make_sparse_mla_problem(c, g);
  int32_t* idx = p.index_ptr();
  const int32_t bad[6] = {-1, -5, int32_t(c.num_slots), INT_MAX, INT_MIN, int32_t(c.num_slots) + 7};
  for (int i = 0; i < 6; ++i) idx[i * 13] = bad[i];                         // row 0: scattered invalid slots
  for (int i = 0; i < 200; ++i) idx[200 + i] = 17 + (i % 3);                // row 1: three slots, many times
  for (int i = 0; i < 200; ++i) idx[400 + i] = i % 2 ? -1 : 1999;           // row 2: one slot, 100 times
  for (int i = 0; i < 200; ++i) idx[600 + i] = -1;                          // row 3: no valid slot (empty row)
  for (int i = 0; i < 200; ++i) idx[800 + i] = i < 64 ? -1 : idx[800 + i];  // row 4: first tile all invalid
  return p;
}

// FP8-656 tokens that are all zero bytes (codes, scales and rope 0) in 3 rows of top-k 192: a whole
// tile of them in row 0, every third key of row 1, and (with `zero_row`) row 2 of zero tokens only.
inline SparseMlaProblem fp8_zero_tokens_problem(int64_t h_q, bool zero_row, std::mt19937_64& g) {
  SparseMlaCase c = base_case(h_q, true);
  c.rows = 3;
  c.topk = 192;
  c.invalid_fraction = 0.05;
  SparseMlaProblem p = make_sparse_mla_problem(c, g);
  for (int64_t s = 0; s < 100; ++s) std::memset(p.kv.ptr<uint8_t>() + s * 656, 0, 656);  // slots 0..99: zeros
  int32_t* idx = p.index_ptr();
  for (int i = 64; i < 128; ++i) idx[i] = i - 64;           // row 0, tile 1: zero tokens only
  for (int i = 0; i < 192; i += 3) idx[192 + i] = i % 100;  // row 1: every third key a zero token
  if (zero_row)
    for (int i = 0; i < 192; ++i) idx[384 + i] = i % 100;  // row 2: zero tokens only
  return p;
}

}  // namespace attnserve::test::dsa_gpu
