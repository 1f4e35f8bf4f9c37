// The Hopper ping-pong's split K/V loaders (Tuning::sm90_tma 2: K by TMA boxes and V by the lean cp.async
// gather, 3: the reverse, 4: both by the lean gather; sm90/tile_load_split.cuh) on the random cases of
// gpu_attention_case.h (shuffled pages, garbage past the used table columns, NaN in unowned slots), each
// against the CPU oracle and bit for bit against the cp.async gather (sm90_tma 0) on the same case: every
// loader puts the same bytes in the same shared-memory layout, so the consumers' arithmetic is the same.
// Covers pages 16/32/48/64/128 (box runs of 16, 32, 16 with divisions, 64, 128 slots), GQA groups 1/4/8,
// causal and not, extend with prefixes, windows, softcap, partial last tiles (lengths off the tile), empty
// and one-token requests, invalid page ids inside the keys (read as zeros: the gather takes such a tile),
// and the other head dims with split kernels (192/128, 256), f16.
// Quick gate (new barrier arithmetic: a wrong count hangs): GpuAttentionSm90Split.Gate.
#include "cuda/attention/sm90/config.h"
#include "gpu_attention_case.h"
#include "gpu_sm90_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

namespace a90 = cuda::attn90;

const char* kv_name(int kv) {
  return kv == a90::kKvKTma   ? "K by TMA, V by the lean gather (sm90_tma 2)"
         : kv == a90::kKvVTma ? "V by TMA, K by the lean gather (sm90_tma 3)"
         : kv == a90::kKvLean ? "K and V by the lean gather (sm90_tma 4)"
         : kv == a90::kKvTma  ? "whole tiles by TMA (sm90_tma 1)"
                              : "the cp.async gather (sm90_tma 0)";
}

// The ping-pong with the gather, then each split loader (and whole-tile TMA if asked) as twins. Checks
// first that the plan takes each loader where it applies (split_built head dims, pages of a multiple of 16).
void check_split(AttnSpec s, std::mt19937_64& g, bool whole_tma_too = false) {
  s.tuning.sm90 = a90::kPingPong;
  s.tuning.sm90_tma = a90::kKvGather;
  std::vector<TuningTwin> twins;
  std::vector<int> loads = {a90::kKvKTma, a90::kKvVTma, a90::kKvLean};
  if (whole_tma_too) loads.push_back(a90::kKvTma);
  {
    std::mt19937_64 g_shape(1);
    AttnCase c(s, g_shape);  // host views: the selector reads shapes and dtypes only
    for (int kv : loads) {
      cuda::attn::Tuning t = s.tuning;
      t.sm90_tma = kv;
      const PagedAttentionArgs a = c.args(c.q_view, c.kc.view, c.vc.view, c.pt.view, c.seqlens.view, c.cu.view,
                                          c.q_view, TensorView{}, TensorView{}, TensorView{});
      const cuda::attn::Config cfg = cuda::attn::select(a, cuda::attn::current_device_caps(), t);
      ASSERT_EQ(cfg.sm90(), a90::kPingPong) << "the selector did not pick the ping-pong";
      const bool applies = a90::tma_applies(s.page_size) && (kv == a90::kKvTma || a90::split_built(s.d, s.dv()));
      ASSERT_EQ(cfg.sm90_kv_load, applies ? kv : a90::kKvGather) << kv_name(kv) << ", page " << s.page_size;
      if (applies) twins.push_back({t, kv_name(kv)});
    }
  }
  ASSERT_FALSE(twins.empty()) << "no split loader applies to this case";
  SCOPED_TRACE("kernel kPingPong; first run: " + std::string(kv_name(a90::kKvGather)));
  check_case(s, g, twins);
}

}  // namespace

// One small case through the three split loaders (seconds): the gate for the new barrier arithmetic.
TEST(GpuAttentionSm90Split, Gate) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  AttnSpec s;
  s.q_lens = {300};
  s.k_lens = {300};
  s.h_q = 8;
  s.h_kv = 2;
  s.page_size = 16;
  check_split(s, g);
}

// Pages 16 / 32 / 48 / 64 / 128 x GQA groups 1 / 4 / 8, extend with prefixes (one-token and empty requests,
// lengths off the tile: every request ends in a partial tile that the gather takes), causal; non-causal on
// group 4.
TEST(GpuAttentionSm90Split, PagesAndGqaGroups) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  for (int ps : {16, 32, 48, 64, 128})
    for (auto [hq, hkv] : {std::pair{8, 8}, {16, 4}, {32, 4}})
      for (bool causal : {true, false}) {
        if (!causal && hq != 16) continue;
        SCOPED_TRACE("page " + std::to_string(ps) + " h_q " + std::to_string(hq) + " h_kv " + std::to_string(hkv) +
                     (causal ? " causal" : " non-causal"));
        AttnSpec s;
        s.q_lens = {200, 1, 0, 77};
        s.k_lens = with_prefix(g, s.q_lens, 500);
        s.h_q = hq;
        s.h_kv = hkv;
        s.page_size = ps;
        s.causal = causal;
        check_split(s, g);
      }
}

// Windows (left, and left + right non-causal), softcap, LSE off, strided q / out, q_len > k_len.
TEST(GpuAttentionSm90Split, WindowsSoftcapAndEdges) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  {
    SCOPED_TRACE("window_left 70, causal extend, page 16");
    AttnSpec s;
    s.q_lens = {150, 1, 17};
    s.k_lens = with_prefix(g, s.q_lens, 400);
    s.window_left = 70;
    check_split(s, g);
  }
  {
    SCOPED_TRACE("window 100 left, 20 right, non-causal, page 32, GQA 16/2");
    AttnSpec s;
    s.q_lens = {260, 33};
    s.k_lens = with_prefix(g, s.q_lens, 300);
    s.causal = false;
    s.window_left = 100;
    s.window_right = 20;
    s.h_q = 16;
    s.h_kv = 2;
    s.page_size = 32;
    check_split(s, g);
  }
  {
    SCOPED_TRACE("softcap 30, no lse, strided q / out, page 64");
    AttnSpec s;
    s.q_lens = {200, 77};
    s.k_lens = with_prefix(g, s.q_lens, 300);
    s.softcap = 30.f;
    s.q_range = 8.f;
    s.with_lse = false;
    s.strided = true;
    s.page_size = 64;
    check_split(s, g);
  }
  {
    SCOPED_TRACE("q_len > k_len, page 48");
    AttnSpec s;
    s.q_lens = {150, 3};
    s.k_lens = {20, 300};
    s.page_size = 48;
    check_split(s, g);
  }
}

// Invalid page ids inside the keys (every 3rd page: negative and >= num_pages in turn) read as zeros in every
// loader: a full tile with one goes to the gather (the split loaders test the ids once they land), whole-tile
// TMA boxes at negative slots fill zeros; the oracle reads a page of zeros there.
TEST(GpuAttentionSm90Split, InvalidPageIdsReadAsZeros) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  for (int ps : {16, 64}) {
    SCOPED_TRACE("page " + std::to_string(ps));
    AttnSpec s;
    s.q_lens = {300, 40};
    s.k_lens = with_prefix(g, s.q_lens, 600);
    s.h_q = 16;
    s.h_kv = 4;
    s.page_size = ps;
    s.invalid_page_every = 3;
    check_split(s, g, /*whole_tma_too=*/true);
  }
}

// The other head dims with split kernels: 192/128 (64-key tiles: 4 row groups, K 3 panels), 256 (32-key tiles:
// 2 row groups, 4 panels); a long prefill that reuses every stage many times; f16.
TEST(GpuAttentionSm90Split, HeadDimsLongPrefillAndF16) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  for (auto [d, dv] : {std::pair{192, 128}, {256, 256}})
    for (int ps : {16, 64}) {
      SCOPED_TRACE("d " + std::to_string(d) + "/" + std::to_string(dv) + " page " + std::to_string(ps));
      AttnSpec s;
      s.d = d;
      s.d_v = dv;
      s.q_lens = {150, 1};
      s.k_lens = with_prefix(g, s.q_lens, 400);
      s.h_q = 16;
      s.h_kv = 4;
      s.page_size = ps;
      check_split(s, g);
    }
  {
    SCOPED_TRACE("long prefill 1337, GQA 16/4, page 16, d 128");
    AttnSpec s;
    s.q_lens = {1337};
    s.k_lens = s.q_lens;
    s.h_q = 16;
    s.h_kv = 4;
    check_split(s, g);
  }
  {
    SCOPED_TRACE("f16, d 128, page 32, extend");
    AttnSpec s;
    s.dtype = DType::f16;
    s.q_lens = {257, 31};
    s.k_lens = with_prefix(g, s.q_lens, 300);
    s.h_q = 16;
    s.h_kv = 4;
    s.page_size = 32;
    check_split(s, g);
  }
}
