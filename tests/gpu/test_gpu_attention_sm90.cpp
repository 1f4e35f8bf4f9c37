// The Hopper (sm_90a, wgmma) paged-attention kernel against the CPU oracle, through the same
// random cases as the portable kernel (gpu_attention_case.h: shuffled pages, garbage past the used
// table columns, NaN in unowned slots, rows outside the batch untouched, two runs bit-identical).
// Tuning::sm90 = 1 / 2 / 3 / 4 forces each Hopper kernel; each case first checks the selector picked it.
// Covers prefill b1 long, extend with prefixes (varlen, zero-length q), causal on/off, windows,
// softcap, GQA 32/8, 16/2, 8/8, 16/1, page sizes 1/16/64, LSE on/off, lengths off the tile, d 64, f16;
// and the head dims 96, 192, 256 and 192/128 (d_v != d) with their own tiles (sm90/config.h).
#include "cuda/attention/sm90/config.h"
#include "gpu_attention_case.h"
#include "gpu_sm90_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

// Runs the spec through each Hopper kernel (Tuning::sm90 = kCoop, kWarpSpecialized, kPingPong,
// kPingPongEager): checks that the selector takes it, then the full case against the oracle. The
// producer kernels run twice, with each K/V loader (Tuning::sm90_tma 0: cp.async gather, 1: TMA boxes
// for whole tiles, sm90/tile_load_tma.cuh); on pages that TMA cannot take (not a multiple of 16) the
// plan must keep cp.async, and that second run is skipped (it would repeat the first).
void check_sm90(AttnSpec s, std::mt19937_64& g, std::initializer_list<int> variants = {1, 2, 3, 4}) {
  for (int variant : variants) {
    if (!cuda::attn90::variant_built(s.d, s.dv(), variant)) continue;  // kPingPongEager: d 64 and 128 only
    for (int tma : {0, 1}) {
      if (tma && !cuda::attn90::is_ws(variant)) continue;
      SCOPED_TRACE(variant == 1   ? "kernel kCoop (2 warpgroups load + compute)"
                   : variant == 2 ? "kernel kWarpSpecialized (producer + 2 consumers)"
                   : variant == 3 ? "kernel kPingPong (producer + 2 consumers taking turns, stale max)"
                                  : "kernel kPingPongEager (the session-3 ping-pong, exact max)");
      SCOPED_TRACE(tma ? "K/V by TMA (sm90_tma 1)" : "K/V by cp.async (sm90_tma 0)");
      s.tuning.sm90 = variant;
      s.tuning.sm90_tma = tma;
      const bool tma_expected = tma && cuda::attn90::tma_applies(s.page_size);
      {
        std::mt19937_64 g_shape(1);
        AttnCase c(s, g_shape);  // host views: the selector reads shapes and dtypes only
        const PagedAttentionArgs a = c.args(c.q_view, c.kc.view, c.vc.view, c.pt.view, c.seqlens.view, c.cu.view,
                                            c.q_view, TensorView{}, TensorView{}, TensorView{});
        const cuda::attn::Config cfg = cuda::attn::select(a, cuda::attn::current_device_caps(), s.tuning);
        ASSERT_EQ(cfg.sm90(), variant) << "the selector did not pick the Hopper kernel";
        ASSERT_EQ(cfg.sm90_tma, tma_expected) << "page " << s.page_size;
        EXPECT_EQ(cfg.ws_bytes, 0u);
      }
      if (tma && !tma_expected) continue;
      check_case(s, g);
    }
  }
}

}  // namespace

TEST(GpuAttentionSm90, AutoSelectsHopperForPrefillOnly) {
  ATTNSERVE_REQUIRE_SM90();
  std::mt19937_64 g(7);
  auto selected = [&](const AttnSpec& s) {
    AttnCase c(s, g);
    const PagedAttentionArgs a = c.args(c.q_view, c.kc.view, c.vc.view, c.pt.view, c.seqlens.view, c.cu.view, c.q_view,
                                        TensorView{}, TensorView{}, TensorView{});
    return cuda::attn::select(a, cuda::attn::current_device_caps(), s.tuning).sm90() != 0;
  };
  AttnSpec prefill;
  prefill.q_lens = {2048};
  prefill.k_lens = {2048};
  prefill.h_q = 32;
  prefill.h_kv = 8;
  prefill.extra_table_cols = 0;
  EXPECT_TRUE(selected(prefill)) << "prefill b1 2K h32/8";
  AttnSpec mla = prefill;  // DeepSeek's non-absorbed MLA prefill: q/k 192, v 128, MHA
  mla.d = 192;
  mla.d_v = 128;
  mla.h_q = mla.h_kv = 16;
  EXPECT_TRUE(selected(mla)) << "prefill b1 2K h16/16 d 192/128";
  AttnSpec decode;
  decode.q_lens = std::vector<int>(4, 1);
  decode.k_lens = std::vector<int>(4, 500);
  EXPECT_FALSE(selected(decode)) << "decode stays on the portable kernel";
  AttnSpec forced_off = prefill;
  forced_off.tuning.sm90 = 0;
  EXPECT_FALSE(selected(forced_off)) << "Tuning::sm90 = 0 keeps the portable kernel";
  AttnSpec fp8 = prefill;
  fp8.fp8 = true;
  fp8.tuning.sm90 = 1;
  EXPECT_FALSE(selected(fp8)) << "fp8 KV is not supported by the Hopper kernel";
}

TEST(GpuAttentionSm90, PrefillB1LongCausalGqa32x8) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  AttnSpec s;
  s.q_lens = {1337};  // not a multiple of the 128-row or 128-key tile
  s.k_lens = s.q_lens;
  s.h_q = 32;
  s.h_kv = 8;
  s.page_size = 16;
  check_sm90(s, g);
}

TEST(GpuAttentionSm90, PrefillCausalAndNonCausal) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "non-causal");
    AttnSpec s;
    s.q_lens = {300, 129, 64, 1};
    s.k_lens = s.q_lens;
    s.h_q = 8;
    s.h_kv = 8;
    s.causal = causal;
    s.page_size = 64;
    check_sm90(s, g);
  }
}

TEST(GpuAttentionSm90, ExtendVarlenWithPrefixAndEmptyRequests) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "non-causal");
    AttnSpec s;
    s.q_lens = {37, 300, 0, 1, 129, 64, 0};
    s.k_lens = with_prefix(g, s.q_lens, 700);
    s.h_q = 32;
    s.h_kv = 8;
    s.causal = causal;
    s.page_size = 16;
    check_sm90(s, g);
  }
}

TEST(GpuAttentionSm90, GqaGroupsAndPageSizes) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  for (auto [hq, hkv] : {std::pair{32, 8}, {16, 2}, {8, 8}, {16, 1}})
    for (int ps : {1, 16, 64}) {
      SCOPED_TRACE("h_q " + std::to_string(hq) + " h_kv " + std::to_string(hkv) + " page " + std::to_string(ps));
      AttnSpec s;
      s.q_lens = random_lens(g, 3, 1, 200);
      s.k_lens = with_prefix(g, s.q_lens, 300);
      s.h_q = hq;
      s.h_kv = hkv;
      s.page_size = ps;
      check_sm90(s, g);
    }
}

// The TMA loader's box shapes (sm90/kv_tma.h: the largest power of two dividing the page, at most the
// tile): page 32 (32-slot boxes, 4 per 128-key tile), 48 (16-slot boxes, pages not a power of two:
// divisions), 256 (one 128-slot box per tile), and 8 (no TMA: the plan keeps cp.async); d 64 and 128,
// prefill and extend lengths off the tile, so every request also has cp.async tail tiles.
TEST(GpuAttentionSm90, TmaBoxShapesAndFallback) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  for (int d : {64, 128})
    for (int ps : {32, 48, 256, 8}) {
      SCOPED_TRACE("d " + std::to_string(d) + " page " + std::to_string(ps));
      AttnSpec s;
      s.q_lens = {700, 1, 190};
      s.k_lens = with_prefix(g, s.q_lens, 400);
      s.h_q = 16;
      s.h_kv = 4;
      s.d = d;
      s.page_size = ps;
      check_sm90(s, g, {2, 3});
    }
}

TEST(GpuAttentionSm90, SlidingWindowAndSoftcap) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  {
    SCOPED_TRACE("window_left 70, causal extend");
    AttnSpec s;
    s.q_lens = {150, 1, 17};
    s.k_lens = with_prefix(g, s.q_lens, 300);
    s.window_left = 70;
    check_sm90(s, g);
  }
  {
    SCOPED_TRACE("window 100 left, 20 right, non-causal");
    AttnSpec s;
    s.q_lens = {260, 33};
    s.k_lens = with_prefix(g, s.q_lens, 200);
    s.causal = false;
    s.window_left = 100;
    s.window_right = 20;
    s.h_q = 16;
    s.h_kv = 2;
    check_sm90(s, g);
  }
  {
    SCOPED_TRACE("softcap 30, causal prefill");
    AttnSpec s;
    s.q_lens = {200, 77};
    s.k_lens = s.q_lens;
    s.softcap = 30.f;
    s.q_range = 8.f;  // scores large enough for the cap to bend them
    check_sm90(s, g);
  }
  {
    SCOPED_TRACE("softcap 20 + window 50 + page 1");
    AttnSpec s;
    s.q_lens = {140};
    s.k_lens = {400};
    s.softcap = 20.f;
    s.window_left = 50;
    s.page_size = 1;
    check_sm90(s, g);
  }
}

TEST(GpuAttentionSm90, EdgeCases) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  {
    SCOPED_TRACE("q_len_gt_k_len (rows before the first key see nothing: 0 and lse -inf)");
    AttnSpec s;
    s.q_lens = {150, 3};
    s.k_lens = {20, 3};
    check_sm90(s, g);
  }
  {
    SCOPED_TRACE("zero_len_kv");
    AttnSpec s;
    s.q_lens = {40, 2};
    s.k_lens = {0, 50};
    check_sm90(s, g);
  }
  {
    SCOPED_TRACE("no_lse + strided q/out");
    AttnSpec s;
    s.with_lse = false;
    s.strided = true;
    s.q_lens = {130, 9};
    s.k_lens = {300, 9};
    check_sm90(s, g);
  }
  {
    SCOPED_TRACE("window_gt_seq");
    AttnSpec s;
    s.q_lens = {64};
    s.k_lens = {64};
    s.window_left = 1000;
    s.window_right = 1000;
    s.causal = false;
    check_sm90(s, g);
  }
}

TEST(GpuAttentionSm90, F16AndHeadDim64) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  for (DType t : {DType::bf16, DType::f16})
    for (int d : {64, 128}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " d " + std::to_string(d));
      AttnSpec s;
      s.dtype = t;
      s.d = d;
      s.q_lens = {257, 31};
      s.k_lens = with_prefix(g, s.q_lens, 150);
      s.h_q = 16;
      s.h_kv = 4;
      check_sm90(s, g);
    }
}

// The stale running max (kCoop, kWarpSpecialized, kPingPong) rescales O only when a row's max grows
// by more than 2^8 after its first tile, which the small random scores of the other tests almost
// never do. Here they do: q in [-16, 16] makes a score's spread ~7.7 base-2 units (d 128), and a
// sliding window starts many rows' first tile with only a few visible keys; q in [-32, 32] with
// long prefixes does it without a window. A numpy model of these distributions (the kernel's tile
// walk and threshold) moves some row's max after its first tile in ~10 % of the rows of the first
// case and ~40 % of the second.
TEST(GpuAttentionSm90, StaleMaxRescalesWhenScoresGrow) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  {
    SCOPED_TRACE("window_left 300, causal prefill, q_range 16");
    AttnSpec s;
    s.q_lens = {700};
    s.k_lens = s.q_lens;
    s.window_left = 300;
    s.q_range = 16.f;
    check_sm90(s, g);
  }
  {
    SCOPED_TRACE("extend with prefix, GQA 32/8, q_range 32, f16");
    AttnSpec s;
    s.dtype = DType::f16;
    s.q_lens = {200, 65};
    s.k_lens = with_prefix(g, s.q_lens, 900);
    s.h_q = 32;
    s.h_kv = 8;
    s.q_range = 32.f;
    check_sm90(s, g);
  }
}

// The head dims with their own tiles (config.h: tile_keys, ws_stages): 96 (a padded second panel),
// 192 (96-key tiles, 2 stages), 192/128 (d_v != d: DeepSeek's non-absorbed MLA prefill, MHA), 256
// (64-key tiles, 2 stages).
const std::pair<int, int> kNewHeadDims[] = {{96, 96}, {192, 192}, {192, 128}, {256, 256}};

std::string dims_name(std::pair<int, int> dims) {
  return "d " + std::to_string(dims.first) + (dims.first == dims.second ? "" : "/" + std::to_string(dims.second));
}

TEST(GpuAttentionSm90, HeadDimsPrefillCausalAndNonCausal) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  for (auto dims : kNewHeadDims)
    for (bool causal : {true, false}) {
      SCOPED_TRACE(dims_name(dims) + (causal ? " causal" : " non-causal"));
      AttnSpec s;
      s.d = dims.first;
      s.d_v = dims.second;
      s.q_lens = {300, 129, 1};  // off the 64/96/128-key tiles and the 128-row block
      s.k_lens = s.q_lens;
      s.h_q = 16;
      s.h_kv = 4;
      s.causal = causal;
      check_sm90(s, g, {1, 2, 3});
    }
}

// Extend with prefixes over GQA groups 1/4/8, page sizes 1/16/64/128 (128: one page per 128-key
// tile), windows, softcap, LSE off, empty and one-token requests: the ping-pong kernel (the auto
// choice), then kWarpSpecialized on the window case.
TEST(GpuAttentionSm90, HeadDimsExtendGqaPagesWindowsSoftcap) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  for (auto dims : kNewHeadDims) {
    SCOPED_TRACE(dims_name(dims));
    AttnSpec base;
    base.d = dims.first;
    base.d_v = dims.second;
    {
      SCOPED_TRACE("MHA 8/8, page 1, empty and one-token requests");
      AttnSpec s = base;
      s.q_lens = {37, 0, 1, 200};
      s.k_lens = with_prefix(g, s.q_lens, 300);
      s.h_q = 8;
      s.h_kv = 8;
      s.page_size = 1;
      check_sm90(s, g, {3});
    }
    {
      SCOPED_TRACE("GQA 16/4, page 64, window_left 70");
      AttnSpec s = base;
      s.q_lens = {150, 17};
      s.k_lens = with_prefix(g, s.q_lens, 400);
      s.h_q = 16;
      s.h_kv = 4;
      s.page_size = 64;
      s.window_left = 70;
      check_sm90(s, g, {2, 3});
    }
    {
      SCOPED_TRACE("GQA 32/4, page 128, softcap 30, no lse, non-causal window 100 / 20");
      AttnSpec s = base;
      s.q_lens = {90, 33};
      s.k_lens = with_prefix(g, s.q_lens, 500);
      s.h_q = 32;
      s.h_kv = 4;
      s.page_size = 128;
      s.softcap = 30.f;
      s.q_range = 8.f;
      s.with_lse = false;
      s.causal = false;
      s.window_left = 100;
      s.window_right = 20;
      check_sm90(s, g, {3});
    }
    {
      SCOPED_TRACE("f16, GQA 16/2, page 16, q_len > k_len");
      AttnSpec s = base;
      s.dtype = DType::f16;
      s.q_lens = {150, 64};
      s.k_lens = {20, 300};
      s.h_q = 16;
      s.h_kv = 2;
      check_sm90(s, g, {3});
    }
  }
}

// Long prefill (many tiles per CTA, every pipeline stage reused) and the stale max's rescale branch
// (q in [-16, 16] with a window) at the widest head dims.
TEST(GpuAttentionSm90, HeadDimsLongPrefillAndRescale) {
  ATTNSERVE_REQUIRE_SM90();
  auto g = rng_for_test();
  for (auto dims : {std::pair{192, 128}, {256, 256}}) {
    SCOPED_TRACE(dims_name(dims));
    {
      AttnSpec s;
      s.d = dims.first;
      s.d_v = dims.second;
      s.q_lens = {1337};
      s.k_lens = s.q_lens;
      s.h_q = 16;
      s.h_kv = 4;
      check_sm90(s, g, {3});
    }
    {
      SCOPED_TRACE("window_left 300, q_range 16");
      AttnSpec s;
      s.d = dims.first;
      s.d_v = dims.second;
      s.q_lens = {700};
      s.k_lens = s.q_lens;
      s.window_left = 300;
      s.q_range = 16.f;
      check_sm90(s, g, {3});
    }
  }
}
