// The Hopper lightning-indexer kernel (src/cuda/indexer/sm90, FP8 wgmma), forced, against the CPU oracle
// and brute force (indexer_gpu_cases.h: tolerance rule with the FP8-MMA accumulation model as the
// same-precision reference, exact -inf positions, nothing unwritten, two runs bit-identical): paged
// next_n 1..4 x page sizes 1 / 5 / 64 (16- and 4-byte key copies), short and zero-length requests, long
// contexts (many CTAs and ring wrap-arounds), page ids outside the pool, ragged random and causal windows
// with a partial last row group, and q_scale equal to the weights with the scale folded in. Paged calls run the
// warp-specialized kernel; the ragged cases run both the session-4 kernel (the ragged default) and the ws one.
// Long forced column spans wrap the ws kernel's ring of stages many times on small problems. The ws kernel runs
// in every mode (overlap bits and the batched epilogue, against one oracle run a case; the batched epilogue
// must give its per-row twin's bits), and the four-math-warpgroup kernel (kWsQuadMode, the paged default) where it
// exists, against the oracle and bitwise against its two-warpgroup twin.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "attnserve/ops/indexer.h"
#include "cpu/test_indexer_util.h"
#include "indexer_gpu_cases.h"
#include "test_sparse_gpu_util.h"

using namespace attnserve;
using namespace attnserve::test;
using namespace attnserve::test::dsa_gpu;
using namespace attnserve::test::indexer_gpu;

namespace {

// Every mode of the ws kernel (config.h: bits ping-pong, split commit groups, batched epilogue) at the span
// `span` (0: the plan's).
std::vector<WsForm> every_ws_mode(int64_t span, int modes = cuda::indexer90::kWsModes) {
  std::vector<WsForm> f;
  for (int mode = 0; mode < modes; ++mode) f.push_back({.sm90_ws = 1, .span = span, .mode = mode});
  return f;
}
std::vector<WsForm> operator+(std::vector<WsForm> a, const std::vector<WsForm>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
// The quad kernel at `span` (ragged, paged next_n 2 and 4 with 16-byte keys).
WsForm quad(int64_t span) { return {.sm90_ws = 1, .span = span, .mode = cuda::indexer90::kWsQuadMode}; }

class IndexerSm90Paged : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(IndexerSm90Paged, CausalRowsMatchCpu) {
  INDEXER_REQUIRE_SM90();
  const auto [next_n, page_size] = GetParam();
  auto g = rng_for_test();
  std::uniform_int_distribution<int> len(next_n, 1500);
  // last_page_partial (random lengths), a request ending on a stage boundary, one spanning two CTAs.
  run_paged_case({.seqlens = {len(g), 128, len(g), 2100}, .next_n = next_n, .page_size = page_size}, g, -1,
                 Math::fp8_mma);
}

// Every mode of the ws kernel where it has them (modes 0..7: next_n 2 and 4 with 16-byte keys; the batched
// epilogue, mode 4, everywhere else), short spans (several CTAs a request) and one long span (the ring wraps),
// each against the oracle, and the batched epilogue's bits equal to its per-row twin's.
TEST(IndexerSm90PagedEdge, EveryOverlapMode) {
  INDEXER_REQUIRE_SM90();
  auto g = rng_for_test();
  const std::vector<WsForm> all = every_ws_mode(0) + every_ws_mode(8192) + std::vector{quad(0), quad(8192)};
  const std::vector<WsForm> epilogues = {{1, 0, 0}, {1, 0, 4}, {1, 8192, 0}, {1, 8192, 4}};
  run_paged_case({.seqlens = {5000, 129, 2}, .next_n = 2, .page_size = 64}, g, -1, Math::fp8_mma, all);
  run_paged_case({.seqlens = {4100, 65, 4}, .next_n = 4, .page_size = 64}, g, 3, Math::fp8_mma, all);  // page 3 bad
  run_paged_case({.seqlens = {3000, 100}, .next_n = 1, .page_size = 64}, g, -1, Math::fp8_mma, epilogues);
  run_paged_case({.seqlens = {2500, 70}, .next_n = 3, .page_size = 64}, g, -1, Math::fp8_mma, epilogues);
  run_paged_case({.seqlens = {2000, 90}, .next_n = 4, .page_size = 5}, g, 7, Math::fp8_mma, epilogues);  // 4-byte keys
  run_paged_case({.seqlens = {1500, 40}, .next_n = 1, .page_size = 1}, g, -1, Math::fp8_mma, epilogues);
}

INSTANTIATE_TEST_SUITE_P(Indexer, IndexerSm90Paged,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Values(1, 5, 64)),
                         [](const auto& info) {
                           return "next_n_" + std::to_string(std::get<0>(info.param)) + "_page_size_" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(IndexerSm90PagedEdge, ZeroLenKvShortRequestsAndNothingVisible) {
  INDEXER_REQUIRE_SM90();
  auto g = rng_for_test();
  // Each pattern repeated so the relative L2 error is taken over >= 64 logits: over the 4 of {0, 1, 3} alone it is
  // one draw of the FP8 adder's rounding (measured: 4x the accumulation model's draw, a spurious failure).
  auto repeat = [](std::vector<int> pattern, int times) {
    std::vector<int> out;
    for (int i = 0; i < times; ++i) out.insert(out.end(), pattern.begin(), pattern.end());
    return out;
  };
  run_paged_case({.seqlens = repeat({0, 1, 3}, 16), .next_n = 1, .page_size = 4}, g, -1, Math::fp8_mma);  // zero_len_kv
  run_paged_case({.seqlens = repeat({0, 3, 6}, 4), .next_n = 3, .page_size = 2}, g, -1,
                 Math::fp8_mma);                                                            // exactly next_n
  run_paged_case({.seqlens = {0, 0}, .next_n = 2, .page_size = 64}, g, -1, Math::fp8_mma);  // nothing visible
}

TEST(IndexerSm90PagedEdge, WideLogitsTrailingColumnsAreNegInf) {
  INDEXER_REQUIRE_SM90();
  auto g = rng_for_test();
  run_paged_case({.seqlens = {100, 33}, .next_n = 1, .page_size = 16, .extra_cols = 3000}, g, -1, Math::fp8_mma);
}

TEST(IndexerSm90PagedEdge, LongContext) {
  INDEXER_REQUIRE_SM90();
  auto g = rng_for_test();
  run_paged_case({.seqlens = {20000}, .next_n = 2, .page_size = 64}, g, -1, Math::fp8_mma);
}

TEST(IndexerSm90PagedEdge, PageIdsOutsideThePoolAreSkipped) {
  INDEXER_REQUIRE_SM90();
  auto g = rng_for_test();
  run_paged_case({.seqlens = {500, 300}, .next_n = 1, .page_size = 64}, g, 2, Math::fp8_mma);  // page 2: 1 << 30
  run_paged_case({.seqlens = {500, 300}, .next_n = 2, .page_size = 5}, g, 3, Math::fp8_mma);   // page 3: -1
}

// One CTA over 8192 columns (128 blocks of 64 keys: the 16-stage ring wraps 8 times), both math warpgroups
// alternating; next_n 1..4, 16- and 4-byte key copies.
TEST(IndexerSm90PagedEdge, LongSpansWrapTheRing) {
  INDEXER_REQUIRE_SM90();
  auto g = rng_for_test();
  const ForceForm form(1, 8192);
  run_paged_case({.seqlens = {5000, 2100, 300}, .next_n = 2, .page_size = 64}, g, -1, Math::fp8_mma);
  run_paged_case({.seqlens = {4000, 77}, .next_n = 4, .page_size = 16}, g, -1, Math::fp8_mma);
  run_paged_case({.seqlens = {3000, 1}, .next_n = 1, .page_size = 1}, g, -1, Math::fp8_mma);
  run_paged_case({.seqlens = {2500, 1200}, .next_n = 3, .page_size = 5}, g, 7, Math::fp8_mma);  // page 7 invalid
}

// The quad kernel (four math warpgroups; groups of 4 rows split over warpgroup pairs, of 2 one block a warpgroup)
// where a block spans several pages (16-byte keys, pages of 16 and 8), the ring wraps (span 8192), spans cut a
// request into several CTAs (1024), a page id is bad; against the oracle and bitwise against its twin.
TEST(IndexerSm90PagedEdge, QuadWarpgroupsSmallPagesAndSpans) {
  INDEXER_REQUIRE_SM90();
  auto g = rng_for_test();
  using cuda::indexer90::ws_quad_twin;
  const std::vector<WsForm> n4 = {{1, 8192, ws_quad_twin(4)}, quad(8192), {1, 1024, ws_quad_twin(4)}, quad(1024)};
  const std::vector<WsForm> n2 = {{1, 8192, ws_quad_twin(2)}, quad(8192), {1, 1024, ws_quad_twin(2)}, quad(1024)};
  run_paged_case({.seqlens = {4000, 77, 4}, .next_n = 4, .page_size = 16}, g, -1, Math::fp8_mma, n4);
  run_paged_case({.seqlens = {3000, 5, 2}, .next_n = 2, .page_size = 8}, g, 9, Math::fp8_mma, n2);  // page 9 bad
}

// Spans that end inside a 64-key block and several column blocks per group (a forced 1000 -> 1024 columns).
TEST(IndexerSm90PagedEdge, ShortForcedSpans) {
  INDEXER_REQUIRE_SM90();
  auto g = rng_for_test();
  const ForceForm form(1, 1000);
  run_paged_case({.seqlens = {3100, 1025, 1024, 1023}, .next_n = 1, .page_size = 64, .extra_cols = 40}, g, -1,
                 Math::fp8_mma);
  run_paged_case({.seqlens = {2049, 700}, .next_n = 4, .page_size = 64}, g, -1, Math::fp8_mma);
}

// The Hopper ragged kernels: the session-4 one, the warp-specialized one in each mode (bits: 1 ping-pong,
// 2 split commit groups, 4 batched epilogue; 0 lockstep).
const std::vector<WsForm> kRaggedForms = std::vector<WsForm>{{.sm90_ws = 0}} + every_ws_mode(0) + std::vector{quad(0)};

TEST(IndexerSm90Ragged, RandomWindowsMatchCpu) {
  INDEXER_REQUIRE_SM90();
  auto g = rng_for_test();
  run_ragged_case(37, 64, 1500, g, {}, Math::fp8_mma, kRaggedForms);  // 37 rows: a last group of 1 row
}

// Prefill of two requests packed in one key buffer (causal), an empty window, the whole buffer, the last key.
TEST(IndexerSm90Ragged, CausalPrefillWindows) {
  INDEXER_REQUIRE_SM90();
  auto g = rng_for_test();
  std::vector<std::pair<int, int>> w;
  for (int t = 0; t < 40; ++t) w.push_back({0, 1100 + t + 1});     // request 0: keys [0, 1140), last 40 rows
  for (int t = 0; t < 23; ++t) w.push_back({1140, 1140 + 7 + t});  // request 1: keys [1140, 1170)
  w.push_back({5, 5});
  w.push_back({0, 1170});
  w.push_back({1169, 1170});
  run_ragged_case(int64_t(w.size()), 64, 1170, g, w, Math::fp8_mma, kRaggedForms);
}

// Causal prefill where a CTA takes a group's whole window (a forced 8192-column span: up to 47 blocks, the
// ring wraps) and where the windows cross several column blocks (a forced 1024-column span), every mode.
TEST(IndexerSm90Ragged, CausalPrefillLongAndShortSpans) {
  INDEXER_REQUIRE_SM90();
  auto g = rng_for_test();
  std::vector<std::pair<int, int>> w;
  for (int t = 0; t < 45; ++t) w.push_back({0, 2950 + t + 1});  // the last 45 rows of a 2995-token prompt
  w.push_back({2990, 2995});                                    // a sliding window's tail
  w.push_back({7, 7});                                          // empty
  run_ragged_case(int64_t(w.size()), 64, 2995, g, w, Math::fp8_mma,
                  every_ws_mode(8192) + every_ws_mode(1024) + std::vector{quad(8192), quad(1024)});
}

// q_scale multiplies the weights on the device: the same bits as folding it in by hand (one float multiply), in
// every mode of the ws kernel.
TEST(IndexerSm90QScale, EqualsWeightsWithTheScaleFoldedIn) {
  INDEXER_REQUIRE_SM90();
  auto g = rng_for_test();
  const int64_t heads = 64;
  const std::vector<int> seqlens = {1700, 65, 1};
  const int page_size = 64, next_n = 2, max_context = 1712;
  IndexKeyPool kp(seqlens, page_size, 28, g);
  const int64_t rows = 6;
  HostTensor q = random_fp8_q(rows, heads, g), w = random_weights(rows, heads, g), qs = random_q_scale(rows, heads, g);
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
  // Every mode of next_n 2 (the q_scale instantiations of each) and the quad kernel; the batched epilogue gives its
  // per-row twin's bits, the quad kernel its two-warpgroup twin's.
  std::vector<std::vector<uint8_t>> bits;
  for (int mode = 0; mode <= cuda::indexer90::kWsQuadMode; ++mode) {
    if (mode >= cuda::indexer90::kWsModes && mode != cuda::indexer90::kWsQuadMode) continue;
    SCOPED_TRACE("ws_mode " + std::to_string(mode));
    const ForceForm form(-1, 0, mode);
    const HostTensor a = run_paged_gpu(with, logits, nullptr, Math::fp8_mma),
                     b = run_paged_gpu(folded, logits, nullptr, Math::fp8_mma);
    EXPECT_EQ(a.bytes, b.bytes);
    EXPECT_EQ(count_nan(to_doubles(a)), 0);
    if (mode == cuda::indexer90::kWsQuadMode) {
      EXPECT_TRUE(a.bytes == bits[size_t(cuda::indexer90::ws_quad_twin(next_n))]) << "quad bits differ";
    } else if (mode & cuda::indexer90::kWsBatched) {
      EXPECT_TRUE(a.bytes == bits[size_t(mode & ~cuda::indexer90::kWsBatched)]) << "batched bits differ";
    }
    bits.push_back(a.bytes);
  }
}

// The model of the FP8 accumulation is a real bound, not a blank cheque: the Hopper kernel's error is far
// below what a wrong head, key or scale would give (every error above ~1e-3 would be a bug), and the model's
// own error is far above fp32's (so the base is the FP8 accumulation, as documented).
TEST(IndexerSm90Model, AccumulationModelErrorIsSmallButAboveFp32) {
  auto g = rng_for_test();
  HostTensor q = random_fp8_q(4, 64, g), w = random_weights(4, 64, g);
  const std::vector<float> qf = to_floats(q), wf = to_floats(w);
  double num = 0, den = 0, num32 = 0;
  for (int j = 0; j < 200; ++j) {
    const QuantizedKey key = random_key(g);
    const std::vector<float> k = decode_key(key.bytes);
    for (int r = 0; r < 4; ++r) {
      const double ref =
          reference_score<double>(qf.data() + r * 64 * kIdxDim, wf.data() + r * 64, 64, k.data(), key.scale);
      const double m = fp8_mma_score(qf.data() + r * 64 * kIdxDim, wf.data() + r * 64, 64, k.data(), key.scale);
      const double f =
          reference_score<float>(qf.data() + r * 64 * kIdxDim, wf.data() + r * 64, 64, k.data(), key.scale);
      num += (m - ref) * (m - ref), num32 += (f - ref) * (f - ref), den += ref * ref;
    }
  }
  const double model = std::sqrt(num / den), fp32 = std::sqrt(num32 / den);
  std::printf("[indexer fp8 mma] model rel_l2 %.3g, float32 loop %.3g\n", model, fp32);
  EXPECT_LT(model, 1e-3);
  EXPECT_GT(model, 4 * fp32);
}

}  // namespace
