// Lightning indexer (paged and ragged) on the portable CUDA kernel, and FP8 activation quantization,
// against the CPU oracle and brute force: next_n 1..4, page sizes 1 / 5 / 64, any head count, zero-length
// and short requests, long contexts, windows of every kind, page ids outside the pool (device memory:
// skipped as -inf). Cases and checks: indexer_gpu_cases.h (the Hopper kernel: test_indexer_gpu_sm90.cpp).
// Quantization must equal the CPU oracle bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "attnserve/ops/indexer.h"
#include "cpu/test_indexer_util.h"
#include "indexer_gpu_cases.h"
#include "test_sparse_gpu_util.h"

using namespace attnserve;
using namespace attnserve::test;
using namespace attnserve::test::dsa_gpu;
using namespace attnserve::test::indexer_gpu;

// ---- paged ------------------------------------------------------------------------------------

class IndexerPagedGpu : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(IndexerPagedGpu, CausalRowsMatchCpu) {
  DSA_REQUIRE_GPU();
  const auto [next_n, page_size] = GetParam();
  auto g = rng_for_test();
  std::uniform_int_distribution<int> len(next_n, 700);
  // last_page_partial (random lengths), a request ending on a page boundary, one spanning many warps.
  run_paged_case({.seqlens = {len(g), 128, len(g), 1000}, .next_n = next_n, .page_size = page_size}, g);
}

INSTANTIATE_TEST_SUITE_P(Indexer, IndexerPagedGpu,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values(1, 5, 64)),
                         [](const auto& info) {
                           return "next_n_" + std::to_string(std::get<0>(info.param)) + "_page_size_" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(IndexerPagedGpuEdge, AnyNumberOfHeads) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t heads : {1, 3, 8, 17, 32, 128}) {
    run_paged_case({.seqlens = {300, 77}, .next_n = 2, .page_size = 64, .heads = heads}, g);
    if (HasFailure()) return;
  }
}

TEST(IndexerPagedGpuEdge, ZeroLenKvAndShortRequests) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  run_paged_case({.seqlens = {0, 1, 3}, .next_n = 1, .page_size = 4, .heads = 5}, g);  // zero_len_kv
  run_paged_case({.seqlens = {0, 3, 6}, .next_n = 3, .page_size = 2, .heads = 3}, g);  // padding + exactly next_n keys
  run_paged_case({.seqlens = {0, 0}, .next_n = 2, .page_size = 64, .heads = 64}, g);   // nothing visible at all
}

TEST(IndexerPagedGpuEdge, WideLogitsTrailingColumnsAreNegInf) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  run_paged_case({.seqlens = {100, 33}, .next_n = 1, .page_size = 16, .heads = 64, .extra_cols = 1000}, g);
}

TEST(IndexerPagedGpuEdge, LongContext) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  run_paged_case({.seqlens = {20000}, .next_n = 2, .page_size = 64, .heads = 64}, g);
}

// Page ids in device memory cannot be validated by the dispatcher: a page outside the pool is skipped
// (its columns are -inf), never read.
TEST(IndexerPagedGpuEdge, PageIdsOutsideThePoolAreSkipped) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  run_paged_case({.seqlens = {500, 300}, .next_n = 1, .page_size = 64, .heads = 16}, g, 2);  // page 2: 1 << 30
  run_paged_case({.seqlens = {500, 300}, .next_n = 2, .page_size = 64, .heads = 16}, g, 3);  // page 3: -1
}

// ---- ragged -----------------------------------------------------------------------------------

TEST(IndexerRaggedGpu, RandomWindowsMatchCpu) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  run_ragged_case(37, 64, 700, g);
}

TEST(IndexerRaggedGpu, AnyNumberOfHeads) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t heads : {1, 5, 8, 33, 128}) {
    run_ragged_case(9, heads, 300, g);
    if (HasFailure()) return;
  }
}

// Prefill of two requests packed in one key buffer: row t of request r sees its request's keys up to
// its own position; plus an empty window, the whole buffer, and a window ending at the buffer's end.
TEST(IndexerRaggedGpu, CausalPrefillWindows) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  std::vector<std::pair<int, int>> w;
  for (int t = 0; t < 40; ++t) w.push_back({0, 200 + t + 1});    // request 0: keys [0, 240), last 40 rows
  for (int t = 0; t < 23; ++t) w.push_back({240, 240 + 7 + t});  // request 1: keys [240, 270)
  w.push_back({5, 5});                                           // empty window
  w.push_back({0, 270});                                         // the whole buffer
  w.push_back({269, 270});                                       // the last key only
  run_ragged_case(int64_t(w.size()), 64, 270, g, w);
}

// ---- quantize_fp8_groups ----------------------------------------------------------------------

namespace {

HostTensor random_activations(DType dtype, int64_t rows, int64_t dim, int group, std::mt19937_64& g) {
  HostTensor x(dtype, {rows, dim});
  std::uniform_real_distribution<float> u(-1.f, 1.f), mag(-3.f, 3.f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t gi = 0; gi < dim / group; ++gi) {
      const float m = std::pow(10.f, mag(g));
      for (int64_t c = gi * group; c < (gi + 1) * group; ++c) {
        float v = u(g) * m;
        if (v == 0.f) v = m;
        x.set(r * dim + c, v);
      }
    }
  return x;
}

// CPU oracle and GPU (twice) on the same views; outputs must be bit-identical.
void expect_quantize_matches(const QuantizeFp8Args& h, HostTensor& out, HostTensor& scales) {
  poison(out);
  poison(scales);
  quantize_fp8_groups(h);
  const HostTensor cpu_out = out, cpu_scales = scales;
  DeviceMirror dx(h.x), dout(h.out), dsc(h.scales);
  QuantizeFp8Args d{.x = dx.view, .out = dout.view, .scales = dsc.view, .group = h.group};
  std::vector<uint8_t> first_out, first_sc;
  for (int run = 0; run < 2; ++run) {
    dout.poison();
    dsc.poison();
    quantize_fp8_groups(d);
    stream_synchronize({});
    if (run == 0) first_out = dout.bytes(), first_sc = dsc.bytes();
    else ASSERT_TRUE(first_out == dout.bytes() && first_sc == dsc.bytes()) << "two GPU runs differ";
  }
  dout.download(h.out);
  dsc.download(h.scales);
  ASSERT_EQ(std::memcmp(out.bytes.data(), cpu_out.bytes.data(), out.bytes.size()), 0)
      << "fp8 codes differ from the CPU";
  ASSERT_EQ(std::memcmp(scales.bytes.data(), cpu_scales.bytes.data(), scales.bytes.size()), 0) << "scales differ";
}

}  // namespace

TEST(QuantizeFp8Gpu, BitIdenticalToCpuAllDtypesAndGroups) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (int group : {128, 64, 1, 7}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " group " + std::to_string(group));
      const int64_t rows = 37, dim = group == 7 ? 21 * 7 : 512;
      HostTensor x = random_activations(dt, rows, dim, group, g);
      for (int64_t c = 0; c < group; ++c) x.set(3 * dim + c, 0.f);  // an all-zero group: finite scale
      x.set(5 * dim + 2, std::nanf(""));                            // NaN stays NaN, the scale stays finite
      HostTensor out(DType::fp8_e4m3, {rows, dim}), scales(DType::f32, {rows, dim / group});
      expect_quantize_matches({.x = x.view, .out = out.view, .scales = scales.view, .group = group}, out, scales);
      if (HasFatalFailure()) return;
    }
}

TEST(QuantizeFp8Gpu, StridedRowsAndExactPowersOfTwo) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  HostTensor wide = random_activations(DType::bf16, 20, 640, 128, g);
  for (int r = 0; r < 20; ++r) wide.set(r * 640 + 5, 448.f * float(1 << (r % 5)));  // amax exactly 448 * 2^e
  HostTensor out(DType::fp8_e4m3, {20, 512}), scales(DType::f32, {20, 4});
  const TensorView x = wide.view.slice(1, 0, 512);  // row stride 640
  expect_quantize_matches({.x = x, .out = out.view, .scales = scales.view, .group = 128}, out, scales);
}

TEST(QuantizeFp8Gpu, ZeroRows) {
  DSA_REQUIRE_GPU();
  HostTensor x(DType::bf16, {0, 128}), out(DType::fp8_e4m3, {0, 128}), scales(DType::f32, {0, 1});
  DeviceMirror dx(x.view), dout(out.view), dsc(scales.view);
  EXPECT_NO_THROW(quantize_fp8_groups({.x = dx.view, .out = dout.view, .scales = dsc.view}));
}

// ---- q_scale: the q quantization scales multiply the weights on the device -------------------------

// Same bits as folding the scales into the weights by hand (the product is one float multiply in both),
// for the paged and the ragged form; the folded-in form is checked against the CPU oracle above.
TEST(IndexerQScaleGpu, EqualsWeightsWithTheScaleFoldedIn) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  const int64_t heads = 64;
  {  // paged, next_n 2, page 64
    const std::vector<int> seqlens = {700, 65, 1};
    const int page_size = 64, next_n = 2, max_context = 712;
    IndexKeyPool kp(seqlens, page_size, 13, g);
    const int64_t rows = 6;
    HostTensor q = random_fp8_q(rows, heads, g), w = random_weights(rows, heads, g),
               qs = random_q_scale(rows, heads, g);
    HostTensor sl(DType::i32, {3}), logits(DType::f32, {rows, max_context});
    for (int r = 0; r < 3; ++r) sl.ptr<int32_t>()[r] = seqlens[size_t(r)];
    const HostTensor wq = times(w, qs);
    const IndexerPagedArgs with{.q = q.view,
                                .weights = w.view,
                                .index_k_cache = kp.pool.view,
                                .page_table = kp.page_table.view,
                                .seqlens = sl.view,
                                .logits = logits.view,
                                .page_size = page_size,
                                .next_n = next_n,
                                .q_scale = qs.view};
    IndexerPagedArgs folded = with;
    folded.weights = wq.view, folded.q_scale = {};
    const HostTensor a = run_paged_gpu(with, logits), b = run_paged_gpu(folded, logits);
    EXPECT_EQ(a.bytes, b.bytes);
    EXPECT_EQ(count_nan(to_doubles(a)), 0);
  }
  {  // ragged
    const int64_t rows = 9, keys = 300;
    HostTensor q = random_fp8_q(rows, heads, g), w = random_weights(rows, heads, g),
               qs = random_q_scale(rows, heads, g);
    KeyBuffer kb(keys, g);
    HostTensor ks(DType::i32, {rows}), ke(DType::i32, {rows}), logits(DType::f32, {rows, keys});
    for (int i = 0; i < rows; ++i) ks.ptr<int32_t>()[i] = 3 * i, ke.ptr<int32_t>()[i] = int32_t(keys - 5 * i);
    const HostTensor wq = times(w, qs);
    DeviceMirror dq(q.view), dw(w.view), dwq(wq.view), dqs(qs.view), dk(kb.k.view), dks(kb.k_scale.view), dlo(ks.view),
        dhi(ke.view), d1(logits.view), d2(logits.view);
    d1.poison(), d2.poison();
    indexer_ragged({.q = dq.view,
                    .weights = dw.view,
                    .k = dk.view,
                    .k_scale = dks.view,
                    .ks = dlo.view,
                    .ke = dhi.view,
                    .logits = d1.view,
                    .q_scale = dqs.view});
    indexer_ragged({.q = dq.view,
                    .weights = dwq.view,
                    .k = dk.view,
                    .k_scale = dks.view,
                    .ks = dlo.view,
                    .ke = dhi.view,
                    .logits = d2.view});
    stream_synchronize({});
    EXPECT_TRUE(d1.bytes() == d2.bytes());
    HostTensor got = logits;
    d1.download(got.view);
    EXPECT_EQ(count_nan(to_doubles(got)), 0);
  }
}
