// Exact top-k (no transform) against brute force: random scores, ties, all-equal rows, -inf and NaN,
// len <= topk, row starts, 128K and 256K rows, determinism, bad arguments.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "attnserve/ops/topk.h"
#include "test_topk_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
}  // namespace

TEST(Topk, RandomScoresAnyTopk) {
  auto g = rng_for_test();
  for (int64_t k : {1, 7, 100, 2048}) {
    SCOPED_TRACE("topk " + std::to_string(k));
    TopkProblem p(16, 6000, k);
    fill_normal(p.row(0), p.rows * p.width, g);
    std::uniform_int_distribution<int32_t> len(0, 6000);
    for (int64_t r = 0; r < p.rows; ++r) p.lengths.ptr<int32_t>()[r] = len(g);
    p.lengths.ptr<int32_t>()[0] = 6000;
    p.run();
    p.check();
    p.expect_ascending();
  }
}

TEST(Topk, HeavyTiesLowerPositionWins) {
  auto g = rng_for_test();
  TopkProblem p(6, 20000, 2048);
  std::uniform_int_distribution<int> level(0, 4);
  for (int64_t i = 0; i < p.rows * p.width; ++i) p.row(0)[i] = float(level(g)) - 2.f;
  for (int64_t i = 0; i < p.width; ++i) p.row(1)[i] = (i % 3) ? -1.f : ((i % 2) ? 0.f : -0.f);  // -0 == +0
  p.run();
  p.check();
}

TEST(Topk, AllEqualRowsGiveTheFirstPositions) {
  TopkProblem p(4, 5000, 2048);
  const float values[4] = {0.25f, -kInf, std::nanf(""), 1e30f};
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t j = 0; j < p.width; ++j) p.row(r)[j] = values[r];
  p.run();
  for (int64_t r = 0; r < p.rows; ++r) {
    std::vector<int32_t> got(p.out.ptr<int32_t>() + r * p.k, p.out.ptr<int32_t>() + (r + 1) * p.k);
    std::sort(got.begin(), got.end());
    for (int64_t c = 0; c < p.k; ++c) ASSERT_EQ(got[size_t(c)], c) << "row " << r;
  }
}

TEST(Topk, NegInfScoresAreStillCandidates) {
  auto g = rng_for_test();
  TopkProblem p(3, 5000, 2048);
  for (int64_t i = 0; i < p.rows * p.width; ++i) p.row(0)[i] = -kInf;
  std::uniform_int_distribution<int64_t> pos(0, p.width - 1);
  for (int i = 0; i < 100; ++i) p.row(0)[pos(g)] = float(i);  // 100 finite, the rest -inf
  fill_normal(p.row(1), 3000, g);                             // causal-style: -inf tail
  for (int i = 0; i < 40; ++i) p.row(2)[pos(g)] = kInf;       // +inf ranks first
  fill_normal(p.row(2) + 2000, 1000, g);
  p.run();
  p.check();
}

TEST(Topk, NaNRanksBelowNegInf) {
  auto g = rng_for_test();
  TopkProblem p(4, 4000, 1000);
  fill_normal(p.row(0), p.rows * p.width, g);
  std::uniform_int_distribution<int64_t> pos(0, p.width - 1);
  for (int64_t r = 0; r < p.rows; ++r)
    for (int i = 0; i < 3500; ++i) p.row(r)[pos(g)] = (i % 3) ? std::nanf("") : -kInf;
  p.run();
  p.check();
}

TEST(Topk, LenAtMostTopkIsTheIdentityThenPadding) {
  auto g = rng_for_test();
  TopkProblem p(6, 300, 100);
  fill_normal(p.row(0), p.rows * p.width, g);
  const int32_t lens[6] = {0, 1, 99, 100, 101, 300};  // topk_len_zero, ..., len == topk, len == topk + 1
  for (int r = 0; r < 6; ++r) p.lengths.ptr<int32_t>()[r] = lens[r];
  p.run();
  p.check();
}

TEST(Topk, TopkWiderThanScores) {
  auto g = rng_for_test();
  TopkProblem p(3, 50, 2048);
  fill_normal(p.row(0), p.rows * p.width, g);
  p.lengths.ptr<int32_t>()[1] = 17;
  p.run();
  p.check();
}

TEST(Topk, RowStarts) {
  auto g = rng_for_test();
  TopkProblem p(12, 3000, 256);
  fill_normal(p.row(0), p.rows * p.width, g);
  p.use_starts = true;
  std::uniform_int_distribution<int32_t> pos(0, 3000);
  for (int64_t r = 0; r < p.rows; ++r) {
    const int32_t a = pos(g), b = pos(g);
    p.starts.ptr<int32_t>()[r] = std::min(a, b);
    p.lengths.ptr<int32_t>()[r] = std::max(a, b) - std::min(a, b);
  }
  p.run();
  p.check();
}

// The long rows: nothing is dropped however many candidates share the threshold's bin.
TEST(Topk, LongRows128KAnd256K) {
  auto g = rng_for_test();
  for (int64_t width : {int64_t(128) << 10, int64_t(256) << 10}) {
    SCOPED_TRACE("width " + std::to_string(width));
    TopkProblem p(4, width, 2048);
    fill_normal(p.row(0), width, g);  // random
    std::uniform_int_distribution<int> level(0, 255);
    for (int64_t j = 0; j < width; ++j) p.row(1)[j] = float(level(g));                     // ~1000 equals per value
    for (int64_t j = 0; j < width; ++j) p.row(2)[j] = (j % 5 == 2) ? 3.f : -float(j % 7);  // >16K equal maxima
    std::uniform_int_distribution<uint32_t> ulps(0, 65535);  // one top-11-bit bin, all levels used
    for (int64_t j = 0; j < width; ++j) p.row(3)[j] = bits_f32(0x3f800000u + ulps(g));
    p.lengths.ptr<int32_t>()[3] = int32_t(width - 12345);
    p.run();
    p.check();
    p.expect_ascending();
  }
}

TEST(Topk, DeterministicAcrossRuns) {
  auto g = rng_for_test();
  TopkProblem p(32, 4096, 512);
  std::uniform_int_distribution<int> level(0, 9);
  for (int64_t i = 0; i < p.rows * p.width; ++i) p.row(0)[i] = float(level(g));
  p.run();
  std::vector<uint8_t> first = p.out.bytes;
  for (int rep = 0; rep < 3; ++rep) {
    p.run();
    ASSERT_EQ(p.out.bytes, first) << "run " << rep;
  }
}

TEST(Topk, BadArgumentsNameTheArgument) {
  TopkProblem p(3, 100, 16);
  for (int64_t i = 0; i < p.rows * p.width; ++i) p.row(0)[i] = float(i % 13);
  EXPECT_NO_THROW(p.run());
  HostTensor wrong_out(DType::i32, {3, 15}), starts(DType::i32, {3}), f_lengths(DType::f32, {3});
  HostTensor table(DType::i32, {3, 100}), offsets(DType::i32, {3});
  auto a = p.args();
  a.out = wrong_out.view;
  expect_error_naming([&] { topk(a); }, "'out'");
  a = p.args(), a.lengths = f_lengths.view;
  expect_error_naming([&] { topk(a); }, "'lengths'");
  a = p.args(), a.topk = 0;
  expect_error_naming([&] { topk(a); }, "'topk'");
  p.lengths.ptr<int32_t>()[1] = 101;
  expect_error_naming([&] { topk(p.args()); }, "'lengths'");
  p.lengths.ptr<int32_t>()[1] = -1;
  expect_error_naming([&] { topk(p.args()); }, "'lengths'");
  p.lengths.ptr<int32_t>()[1] = 60;
  starts.ptr<int32_t>()[1] = 41;  // 41 + 60 > 100
  a = p.args(), a.row_starts = starts.view;
  expect_error_naming([&] { topk(a); }, "'row_starts'");
  a = p.args(), a.page_table_1 = table.view;  // transform none uses no table
  expect_error_naming([&] { topk(a); }, "'page_table_1'");
  a = p.args(), a.transform = TopkTransform::ragged;  // offsets missing
  expect_error_naming([&] { topk(a); }, "'offsets'");
  a = p.args(), a.transform = TopkTransform::decode;
  expect_error_naming([&] { topk(a); }, "'page_table_1'");
  HostTensor narrow_table(DType::i32, {3, 50});
  a = p.args(), a.transform = TopkTransform::decode, a.page_table_1 = narrow_table.view;  // len 100 > 50 columns
  expect_error_naming([&] { topk(a); }, "'page_table_1'");
  EXPECT_EQ(topk_workspace_size(p.args(), DeviceCaps::cpu()), 0u);
}
