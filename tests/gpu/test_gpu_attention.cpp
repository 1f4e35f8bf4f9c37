// Paged attention on CUDA against the CPU oracle: decode, draft decode, target verify, extend with
// a cached prefix, prefill; head dims 64/96/128/192/256 and 192/128 (d_v != d); GQA groups 1..16; page sizes 1/16/64;
// causal, windows, softcap; FP8 KV with descale; f16; split-KV (forced counts); named edge cases; and the deterministic
// mode's batch invariance.
#include "gpu_attention_case.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

// The plan the case's call makes under `tune`.
cuda::attn::Plan plan_of(const AttnCase& c, const cuda::attn::Tuning& tune) {
  return cuda::attn::make_plan(
      cuda::attn::problem_of(c.args(c.q_view, c.kc.view, c.vc.view, c.pt.view, c.seqlens.view, c.cu.view, c.q_view,
                                    TensorView{}, TensorView{}, TensorView{})),
      cuda::attn::current_device_caps(), tune);
}

// A switch of the portable kernel that must not change the bits: `on` (the switch pinned on) against the same
// tuning with the switch (a Tuning field) 0.
void expect_bits_unchanged_without(const AttnCase& c, const cuda::attn::Tuning& on, int cuda::attn::Tuning::*field,
                                   const char* what) {
  cuda::attn::Tuning off = on;
  off.*field = 0;
  const GpuResult a = run_on_gpu(c, off), b = run_on_gpu(c, on);
  EXPECT_TRUE(same_bytes(a.out, b.out)) << what << " change the output bits";
  EXPECT_TRUE(same_bytes(a.lse, b.lse)) << what << " change the lse bits";
}

}  // namespace

TEST(GpuAttention, DecodeGqa4PageSizes) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int ps : {1, 16, 64}) {
    SCOPED_TRACE("page_size " + std::to_string(ps));
    AttnSpec s;
    s.q_lens = std::vector<int>(6, 1);
    s.k_lens = random_lens(g, 6, 1, 1500);
    s.h_q = 32;
    s.h_kv = 8;
    s.page_size = ps;
    check_case(s, g);
  }
}

TEST(GpuAttention, DecodeHeadDims64And256) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int d : {64, 256}) {
    SCOPED_TRACE("d " + std::to_string(d));
    AttnSpec s;
    s.q_lens = std::vector<int>(4, 1);
    s.k_lens = random_lens(g, 4, 1, 700);
    s.d = d;
    s.h_q = 16;
    s.h_kv = 4;
    check_case(s, g);
  }
}

TEST(GpuAttention, GroupSizes1To16) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (auto [hq, hkv] : {std::pair{8, 8}, {16, 2}, {16, 1}, {32, 2}}) {
    SCOPED_TRACE("h_q " + std::to_string(hq) + " h_kv " + std::to_string(hkv));
    AttnSpec s;
    s.q_lens = {1, 1, 2, 1};
    s.k_lens = random_lens(g, 4, 3, 600);
    s.h_q = hq;
    s.h_kv = hkv;
    check_case(s, g);
  }
}

TEST(GpuAttention, SpecVerify4AndDraftDecode) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int draft : {4, 2}) {  // target verify (4 draft tokens); a 2-token draft extend
    SCOPED_TRACE("draft " + std::to_string(draft));
    AttnSpec s;
    s.q_lens = std::vector<int>(5, draft);
    s.k_lens = random_lens(g, 5, draft, 900);
    s.h_q = 32;
    s.h_kv = 8;
    check_case(s, g);
  }
  AttnSpec s;  // gqa_16 x verify 4: 64 packed rows per request
  s.q_lens = std::vector<int>(3, 4);
  s.k_lens = random_lens(g, 3, 4, 500);
  s.h_q = 16;
  s.h_kv = 1;
  s.page_size = 1;
  check_case(s, g);
}

TEST(GpuAttention, ExtendWithCachedPrefix) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  AttnSpec s;
  s.q_lens = {37, 100, 1, 64, 5};
  s.k_lens = with_prefix(g, s.q_lens, 400);
  s.h_q = 8;
  s.h_kv = 2;
  s.page_size = 16;
  check_case(s, g);
}

TEST(GpuAttention, PrefillCausalAndNonCausal) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "non-causal");
    AttnSpec s;
    s.q_lens = {300, 129, 64};
    s.k_lens = s.q_lens;
    s.h_q = 4;
    s.h_kv = 4;
    s.causal = causal;
    s.page_size = 64;
    check_case(s, g);
  }
}

TEST(GpuAttention, SlidingWindowAndSoftcap) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  {
    AttnSpec s;  // sliding window, extend
    s.q_lens = {50, 1, 17};
    s.k_lens = with_prefix(g, s.q_lens, 300);
    s.window_left = 70;
    check_case(s, g);
  }
  {
    AttnSpec s;  // window on both sides, non-causal
    s.q_lens = {20, 3};
    s.k_lens = {120, 90};
    s.causal = false;
    s.window_left = 10;
    s.window_right = 5;
    check_case(s, g);
  }
  {
    AttnSpec s;  // softcap (Gemma-style), decode + extend
    s.q_lens = {1, 9, 1};
    s.k_lens = {400, 60, 33};
    s.softcap = 5.f;
    s.q_range = 4.f;
    check_case(s, g);
  }
}

TEST(GpuAttention, Fp8KvWithDescale) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (DType t : {DType::bf16, DType::f16}) {
    for (int d : {64, 128, 256}) {
      // fp8_direct -1: the plan's choice; 0: the widening kernel; 1: the e4m3 operands read straight (16-row
      // tiles; d 256 keeps the widening kernel)
      for (int direct : {-1, 0, 1}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " d " + std::to_string(d) + " fp8_direct " + std::to_string(direct));
        AttnSpec s;
        s.dtype = t;
        s.fp8 = true;
        s.descale = true;
        s.d = d;
        s.q_lens = {1, 1, 4, 23};
        s.k_lens = with_prefix(g, s.q_lens, 500);
        s.h_q = 8;
        s.h_kv = 2;
        s.tuning.fp8_direct = direct;
        if (direct > 0) s.tuning.mt = 1;  // 23 x 4 packed rows would pick 64-row tiles
        check_case(s, g);
        if (direct > 0) {
          AttnCase c(s, g);
          EXPECT_EQ(plan_of(c, s.tuning).fp8_direct, d <= 128 ? 1 : 0);
        }
      }
    }
  }
}

// FP8 operands straight from the e4m3 bytes (Tuning::fp8_direct: ldmatrix on the raw tiles, e4m3 -> f16 in
// registers, f16 tensor cores for both products; 16-row tiles, d = d_v in {64, 128}) against the oracle: decode
// and verify rows, page sizes 1 / 16 / 64 (lane page ids, runs) and 5 (divisions), GQA 1 / 4 / 8 / 16, bf16 and
// f16 q, descales, forced splits (the partials' column order), zero-length and one-token requests, partial last
// pages, softcap, a window, the deterministic mode, three CTAs per SM, pipeline depths 2..4. check_case also runs
// each with lane page ids off and ring counters off (the same direct kernel: identical bits required). Not the
// widening kernel's bits (q and P in f16, another summation order inside each 16-d block). Each case again with
// the lean key loop (Tuning::fp8_direct 2) against the oracle; with a softcap bitwise equal to the direct kernel.
TEST(GpuAttention, Fp8DirectOperands) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  struct Case {
    int ps, d, hq, hkv, q_len, splits, ctas, stages;
    DType dtype;
    float softcap;
    int window;
    bool deterministic;
  };
  for (const Case k : {Case{16, 128, 32, 8, 1, 0, 0, 0, DType::bf16, 0.f, -1, false},
                       Case{1, 128, 32, 8, 1, 3, 0, 0, DType::bf16, 0.f, -1, false},
                       Case{64, 128, 32, 8, 1, 2, 0, 0, DType::f16, 0.f, -1, false},
                       Case{16, 128, 16, 4, 4, 0, 0, 0, DType::bf16, 0.f, -1, false},    // verify 4: 16 rows
                       Case{64, 64, 16, 4, 4, 5, 0, 3, DType::f16, 30.f, -1, false},     // softcap, 3 stages
                       Case{1, 64, 8, 8, 1, 0, 0, 2, DType::bf16, 0.f, -1, false},       // GQA 1, 2 stages (padded)
                       Case{16, 64, 32, 4, 1, 0, 0, 0, DType::bf16, 0.f, 300, false},    // GQA 8, window
                       Case{5, 128, 16, 1, 1, 2, 0, 0, DType::f16, 0.f, -1, false},      // GQA 16, divisions
                       Case{16, 128, 32, 8, 1, 3, 3, 0, DType::bf16, 0.f, -1, false},    // 3 CTAs per SM
                       Case{32, 128, 16, 2, 2, 0, 0, 2, DType::bf16, 0.f, -1, false},    // runs, 2 stages (padded)
                       Case{16, 128, 32, 8, 1, 0, 0, 0, DType::bf16, 0.f, -1, true}}) {  // deterministic
    SCOPED_TRACE("page_size " + std::to_string(k.ps) + " d " + std::to_string(k.d) + " h " + std::to_string(k.hq) +
                 "/" + std::to_string(k.hkv) + " q_len " + std::to_string(k.q_len) + " splits " +
                 std::to_string(k.splits) + " ctas " + std::to_string(k.ctas) + " " + std::string(dtype_name(k.dtype)) +
                 (k.deterministic ? " deterministic" : ""));
    AttnSpec s;
    s.dtype = k.dtype;
    s.fp8 = true;
    s.descale = true;
    s.q_lens = {k.q_len, k.q_len, 1, 1, 1};
    s.k_lens = {1500, 700, 1, 0, 2 * k.ps + 3};  // one token, none, a partial last page
    s.h_q = k.hq;
    s.h_kv = k.hkv;
    s.d = k.d;
    s.page_size = k.ps;
    s.softcap = k.softcap;
    s.window_left = k.window;
    s.deterministic = k.deterministic;
    if (k.deterministic) s.tuning.split_keys = 512;
    s.tuning.num_splits = k.splits;
    s.tuning.ctas = k.ctas;
    s.tuning.stages = k.stages;
    s.tuning.mt = 1;
    s.tuning.fp8_direct = 1;
    check_case(s, g);
    AttnCase c(s, g);
    const auto plan = plan_of(c, s.tuning);
    EXPECT_EQ(plan.kernel, cuda::attn::Kernel::sm80);  // the path under test runs: portable kernel,
    EXPECT_EQ(plan.mt, 1);                             // 16-row tiles,
    EXPECT_EQ(plan.fp8_direct, 1);                     // direct operands
    if (k.ctas == 3) EXPECT_EQ(plan.ctas_per_sm, 3);
    if (k.stages > 0) EXPECT_EQ(plan.stages, k.stages);
    // The lean key loop (Tuning::fp8_direct 2) on the same spec: against the oracle (not the direct kernel's bits:
    // one rounding fewer a score), with lane page ids off as check_case's twin (the lean kernel's per-row loads:
    // the same bytes, so the same bits); ring counters pinned on (without them the plan runs the direct kernel).
    AttnSpec lean = s;
    lean.tuning.fp8_direct = 2;
    lean.tuning.ring_counters = 1;
    {
      SCOPED_TRACE("fp8_direct 2 (lean key loop)");
      check_case(lean, g);
    }
    AttnCase lc(lean, g);
    const auto lean_plan = plan_of(lc, lean.tuning);
    EXPECT_EQ(lean_plan.kernel, cuda::attn::Kernel::sm80);
    EXPECT_EQ(lean_plan.fp8_direct, 2);  // the lean loop runs
    if (k.softcap > 0.f) {  // base-2 scores before the max (sc = 1): the direct kernel's arithmetic and bits
      cuda::attn::Tuning direct = lean.tuning;
      direct.fp8_direct = 1;
      EXPECT_TRUE(same_bytes(run_on_gpu(lc, lean.tuning).out, run_on_gpu(lc, direct).out))
          << "softcap: the lean loop's bits differ from the direct kernel's";
    }
  }
}

TEST(GpuAttention, F16AllHeadDims) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int d : {64, 128, 256}) {
    SCOPED_TRACE("d " + std::to_string(d));
    AttnSpec s;
    s.dtype = DType::f16;
    s.d = d;
    s.q_lens = {1, 70, 3};
    s.k_lens = with_prefix(g, s.q_lens, 300);
    check_case(s, g);
  }
}

TEST(GpuAttention, ForcedSplitCounts) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int splits : {1, 2, 5, 13}) {
    for (int mt : {1, 4}) {
      SCOPED_TRACE("splits " + std::to_string(splits) + " mt " + std::to_string(mt));
      AttnSpec s;
      s.q_lens = {1, 1, 3, 1};
      s.k_lens = {2000, 1, 700, 129};
      s.h_q = 16;
      s.h_kv = 4;
      s.tuning.num_splits = splits;
      s.tuning.mt = mt;
      check_case(s, g);
    }
  }
}

TEST(GpuAttention, PageAddressingShiftsAndDivision) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int ps : {1, 16, 12, 5}) {  // 12 and 5 are not powers of two: integer division
    for (int shifts : {1, 0}) {
      SCOPED_TRACE("page_size " + std::to_string(ps) + " shifts " + std::to_string(shifts));
      AttnSpec s;
      s.q_lens = {1, 1, 40};
      s.k_lens = {900, 77, 300};
      s.page_size = ps;
      s.tuning.page_shifts = shifts;
      check_case(s, g);
    }
  }
}

// Decode-shaped tiles over page sizes (incl. not a power of two), head dims, GQA groups, verify rows,
// splits, windows and softcap.
TEST(GpuAttention, DecodeTilesAcrossPageSizesAndHeadDims) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int ps : {1, 16, 64, 5})
    for (int d : {64, 128, 256}) {
      SCOPED_TRACE("page_size " + std::to_string(ps) + " d " + std::to_string(d));
      AttnSpec s;
      s.q_lens = {1, 4, 1, 1};
      s.k_lens = {1500, 700, 1, 129};
      s.h_q = ps == 16 ? 32 : 16;
      s.h_kv = ps == 16 ? 8 : 4;
      s.d = d;
      s.page_size = ps;
      s.softcap = ps == 64 ? 30.f : 0.f;
      if (ps == 5) s.window_left = 300;
      s.tuning.num_splits = ps == 1 ? 3 : 0;
      check_case(s, g);
    }
}

// Page runs (one page-table entry per run of a thread's rows): every page size that takes them
// (pages of 2 load steps and more, a tile inside one page from 64 on), each head dim and the FP8
// cache (other load steps), partial last pages, empty and one-token requests, splits; the bits
// equal the per-row addressing's (same arithmetic, other addresses).
TEST(GpuAttention, PageRunsAcrossPageSizesAndHeadDims) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int ps : {8, 16, 32, 64, 128, 256})
    for (int d : {64, 128, 256})
      for (bool fp8 : {false, true}) {
        if (fp8 && d != 128 && ps != 32) continue;
        SCOPED_TRACE("page_size " + std::to_string(ps) + " d " + std::to_string(d) + (fp8 ? " fp8" : ""));
        AttnSpec s;
        s.q_lens = {1, 4, 1, 1, 1};
        s.k_lens = {1500, 700, 1, 0, 2 * ps + 3};
        s.h_q = 16;
        s.h_kv = 4;
        s.d = d;
        s.page_size = ps;
        s.fp8 = fp8;
        s.descale = fp8;
        s.tuning.num_splits = ps == 32 ? 3 : 0;
        s.tuning.page_runs = 1;
        check_case(s, g);
        // Another draw of the case, per-row addressing against page runs: identical bits.
        AttnCase c(s, g);
        cuda::attn::Tuning per_row = s.tuning;
        per_row.page_runs = 0;
        const GpuResult rows = run_on_gpu(c, per_row), runs = run_on_gpu(c, s.tuning);
        EXPECT_TRUE(same_bytes(rows.out, runs.out)) << "page runs change the output bits";
        EXPECT_TRUE(same_bytes(rows.lse, runs.lse)) << "page runs change the lse bits";
      }
}

// Lane page ids (Tuning::lane_pages, 16-row tiles: one lane per key row looks up its page id once per
// tile, the loading lanes take the slots by shuffle) on the page sizes page runs leave alone (1, 2, 5: integer
// division, 8) and on 16 with page runs off; every head dim and the FP8 cache (segments of 4, 8, 16
// and 32 lanes), GQA groups 1 to 16, verify rows, forced splits, the deterministic mode, empty and
// one-token requests, partial last pages, and the page table's garbage entries past each request's
// pages. check_case compares with the oracle; the bits must equal the per-row addressing's.
TEST(GpuAttention, LanePagesAcrossPageSizes) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int ps : {1, 2, 5, 8, 16})
    for (int d : {64, 128, 256})
      for (bool fp8 : {false, true}) {
        if (fp8 && d != 128 && ps != 2) continue;
        const bool deterministic = ps == 5;
        SCOPED_TRACE("page_size " + std::to_string(ps) + " d " + std::to_string(d) + (fp8 ? " fp8" : "") +
                     (deterministic ? " deterministic" : ""));
        AttnSpec s;
        s.q_lens = {1, 4, 1, 1, 1};
        s.k_lens = {1500, 700, 1, 0, 2 * ps + 3};
        const int groups[5] = {4, 8, 1, 16, 4};  // by page size
        const int gi = ps == 1 ? 0 : ps == 2 ? 1 : ps == 5 ? 2 : ps == 8 ? 3 : 4;
        s.h_q = 16;
        s.h_kv = 16 / groups[gi];
        s.d = d;
        s.page_size = ps;
        s.fp8 = fp8;
        s.descale = fp8;
        s.deterministic = deterministic;
        if (deterministic) s.tuning.split_keys = 512;  // 3 splits of the longest request
        s.tuning.num_splits = ps == 2 ? 3 : ps == 8 ? 2 : 0;
        s.tuning.page_runs = ps == 16 ? 0 : -1;
        s.tuning.mt = 1;  // the lane path is the 16-row (decode / verify) tile's; groups 8 and 16 would pick 64 rows
        s.tuning.lane_pages = 1;
        check_case(s, g);
        AttnCase c(s, g);
        const auto plan = plan_of(c, s.tuning);
        EXPECT_EQ(plan.kernel, cuda::attn::Kernel::sm80);  // the path under test runs: portable kernel,
        EXPECT_EQ(plan.mt, 1);                             // 16-row tiles,
        EXPECT_EQ(plan.lane_pages, 1);                     // lane page ids on
        expect_bits_unchanged_without(c, s.tuning, &cuda::attn::Tuning::lane_pages, "lane page ids");
      }
}

// Ring counters (Tuning::ring_counters: the key loop carries the K/V stage and page-id ring slots as
// counters, the page-id prefetch shifts on power-of-two pages) at every pipeline depth 2..8 (the counters
// wrap at `stages` and at 2 * stages; requests of fewer tiles than stages, of one and of no key), on pages
// of 1, 5 (divisions), 16 (runs) and 64, with lane page ids, 3 CTAs per SM, forced splits, FP8 with
// descale, softcap, a window and the deterministic mode. check_case compares with the oracle; the bits
// must equal the modulo indexing's (the same loads, the same arithmetic).
TEST(GpuAttention, RingCountersAcrossDepthsAndPages) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  struct Case {
    int stages, ps, d, hq, hkv, splits, ctas, lanes;
    bool fp8, deterministic;
    float softcap;
    int window;
  };
  for (const Case k :
       {Case{2, 16, 128, 32, 8, 0, 0, -1, false, false, 0.f, -1},
        Case{3, 1, 128, 32, 8, 0, 0, 1, false, false, 0.f, -1}, Case{3, 5, 128, 16, 2, 3, 0, -1, false, false, 0.f, -1},
        Case{4, 64, 64, 16, 4, 2, 0, -1, false, false, 30.f, -1},
        Case{5, 16, 128, 32, 8, 0, 0, -1, true, false, 0.f, -1}, Case{8, 2, 64, 16, 4, 5, 0, 1, false, false, 0.f, 300},
        Case{2, 16, 128, 32, 8, 3, 3, -1, false, false, 0.f, -1},
        Case{2, 1, 128, 16, 16, 0, 3, 1, true, false, 0.f, -1},
        Case{3, 16, 256, 16, 4, 0, 0, -1, false, false, 0.f, -1}, Case{3, 5, 128, 32, 8, 0, 0, 1, false, true, 0.f, -1},
        Case{7, 8, 64, 8, 8, 0, 0, -1, false, true, 0.f, -1}}) {
    SCOPED_TRACE("stages " + std::to_string(k.stages) + " page_size " + std::to_string(k.ps) + " d " +
                 std::to_string(k.d) + " h " + std::to_string(k.hq) + "/" + std::to_string(k.hkv) + " splits " +
                 std::to_string(k.splits) + " ctas " + std::to_string(k.ctas) + (k.lanes > 0 ? " lanes" : "") +
                 (k.fp8 ? " fp8" : "") + (k.deterministic ? " deterministic" : ""));
    AttnSpec s;
    s.q_lens = {1, 4, 1, 1, 1};
    s.k_lens = {1500, 700, 1, 0, 130};  // 24, 11, 1, 0 and 3 tiles
    s.h_q = k.hq;
    s.h_kv = k.hkv;
    s.d = k.d;
    s.page_size = k.ps;
    s.fp8 = k.fp8;
    s.descale = k.fp8;
    s.softcap = k.softcap;
    s.window_left = k.window;
    s.deterministic = k.deterministic;
    if (k.deterministic) s.tuning.split_keys = 512;
    s.tuning.stages = k.ctas == 3 ? 0 : k.stages;  // three CTAs per SM take 2 stages
    s.tuning.num_splits = k.splits;
    s.tuning.ctas = k.ctas;
    s.tuning.lane_pages = k.lanes;
    s.tuning.mt = 1;  // the counters are the 16-row tile's; groups 8 and 16 with verify rows would pick 64
    s.tuning.ring_counters = 1;
    // FP8: the widening kernel (its 2-stage budget at three CTAs); the direct operands run their ring-counter
    // twins in Fp8DirectOperands.
    if (k.fp8) s.tuning.fp8_direct = 0;
    check_case(s, g);
    AttnCase c(s, g);
    const auto plan = plan_of(c, s.tuning);
    EXPECT_EQ(plan.kernel, cuda::attn::Kernel::sm80);  // the path under test runs: portable kernel,
    EXPECT_EQ(plan.mt, 1);                             // 16-row tiles,
    EXPECT_EQ(plan.ring_counters, 1);                  // ring counters on,
    EXPECT_EQ(plan.stages, k.ctas == 3 ? 2 : k.stages);
    if (k.ctas == 3) EXPECT_EQ(plan.ctas_per_sm, 3);
    expect_bits_unchanged_without(c, s.tuning, &cuda::attn::Tuning::ring_counters, "ring counters");
  }
}

// Three CTAs per SM (the 168-register MT = 1 kernel, 2 stages): decode, verify, GQA groups, page
// sizes, FP8 with descale, windows, softcap, forced splits, empty and one-token requests; and the
// bits equal the two-CTA kernel's (same arithmetic; only the pipeline depth and registers differ).
TEST(GpuAttention, ThreeCtasPerSm) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  struct Case {
    int ps, d, hq, hkv, q_len, splits;
    bool fp8;
    float softcap;
    int window;
  };
  // Split counts are pinned: the heuristic counts 3 x 132 slots and would split differently.
  for (const Case k : {Case{16, 128, 32, 8, 1, 1, false, 0.f, -1}, Case{1, 128, 16, 2, 1, 3, false, 0.f, -1},
                       Case{64, 128, 32, 8, 4, 2, false, 30.f, -1}, Case{16, 64, 16, 4, 4, 1, false, 0.f, 300},
                       Case{32, 128, 8, 2, 1, 4, true, 0.f, -1}, Case{5, 128, 16, 1, 1, 5, false, 0.f, -1}}) {
    SCOPED_TRACE("page_size " + std::to_string(k.ps) + " d " + std::to_string(k.d) + " q_len " +
                 std::to_string(k.q_len) + (k.fp8 ? " fp8" : ""));
    AttnSpec s;
    s.q_lens = {k.q_len, k.q_len, 1, 1};
    s.k_lens = {1800, 900, 0, 1};
    s.k_lens[3] = std::max(1, k.q_len);
    s.h_q = k.hq;
    s.h_kv = k.hkv;
    s.d = k.d;
    s.page_size = k.ps;
    s.fp8 = k.fp8;
    s.descale = k.fp8;
    s.softcap = k.softcap;
    s.window_left = k.window;
    s.tuning.num_splits = k.splits;
    s.tuning.ctas = 3;
    check_case(s, g);
    AttnCase c(s, g);
    const auto plan3 = plan_of(c, s.tuning);
    EXPECT_EQ(plan3.ctas_per_sm, 3);  // <= 16 packed rows (MT = 1), d <= 128
    cuda::attn::Tuning two = s.tuning;
    two.ctas = 2;
    const GpuResult r3 = run_on_gpu(c, s.tuning), r2 = run_on_gpu(c, two);
    EXPECT_TRUE(same_bytes(r3.out, r2.out)) << "three CTAs per SM change the output bits";
    EXPECT_TRUE(same_bytes(r3.lse, r2.lse)) << "three CTAs per SM change the lse bits";
  }
}

TEST(GpuAttention, PipelineDepths) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (auto [mt, stages] : {std::pair{4, 2}, {4, 3}, {4, 4}, {1, 2}, {1, 5}, {1, 8}}) {
    SCOPED_TRACE("mt " + std::to_string(mt) + " stages " + std::to_string(stages));
    AttnSpec s;
    s.q_lens = {1, 30};
    s.k_lens = {1000, 400};
    s.d = 64;
    s.tuning.stages = stages;
    s.tuning.mt = mt;
    check_case(s, g);
  }
}

TEST(GpuAttention, EdgeCases) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  {
    SCOPED_TRACE("zero_len_kv");
    AttnSpec s;
    s.q_lens = {1, 1, 2};
    s.k_lens = {0, 50, 0};
    check_case(s, g);
  }
  {
    SCOPED_TRACE("q_len_gt_k_len (rows before the first key see nothing)");
    AttnSpec s;
    s.q_lens = {8, 3};
    s.k_lens = {5, 3};
    check_case(s, g);
  }
  {
    SCOPED_TRACE("last_page_partial");
    AttnSpec s;
    s.q_lens = {1, 1};
    s.k_lens = {65, 127};
    s.page_size = 64;
    check_case(s, g);
  }
  {
    SCOPED_TRACE("window_gt_seq");
    AttnSpec s;
    s.q_lens = {4, 1};
    s.k_lens = {30, 12};
    s.window_left = 1000;
    check_case(s, g);
  }
  {
    SCOPED_TRACE("no_lse");
    AttnSpec s;
    s.with_lse = false;
    s.q_lens = {1, 9};
    s.k_lens = {300, 9};
    check_case(s, g);
  }
  {
    SCOPED_TRACE("strided_q_out");
    AttnSpec s;
    s.strided = true;
    s.q_lens = {1, 12};
    s.k_lens = {260, 40};
    check_case(s, g);
  }
  {
    SCOPED_TRACE("rows_outside_batch_none");
    AttnSpec s;
    s.rows_before = 0;
    s.rows_after = 0;
    s.q_lens = {2};
    s.k_lens = {2};
    check_case(s, g);
  }
}

// Deterministic mode: a request's bits do not depend on the rest of the batch (other lengths,
// another max_seqlen_q and page-table width, hence another split count and grid).
TEST(GpuAttention, DeterministicBatchInvariance) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (auto [q_len, split_keys] : {std::pair{1, 0}, {4, 0}, {1, 1024}, {4, 2000}}) {
    SCOPED_TRACE("q_len " + std::to_string(q_len) + " split_keys " + std::to_string(split_keys));
    AttnSpec big;
    big.deterministic = true;
    big.tuning.split_keys = split_keys;
    big.q_lens = {3, q_len, 1, 40};
    big.k_lens = {5000, 2500, 7000, 3100};
    big.h_q = 16;
    big.h_kv = 4;
    big.rows_before = 0;
    big.rows_after = 0;
    AttnCase c(big, g);
    // The same request alone: its page-table row, its query rows, the same caches.
    AttnCase solo = AttnCase(big, g);  // shapes only; contents replaced below
    const int r = 1, q0 = c.cu.ptr<int32_t>()[r];
    solo.b = 1;
    solo.spec.q_lens = {q_len};
    solo.spec.k_lens = {big.k_lens[1]};
    solo.total_q = q_len;
    solo.max_q = q_len;
    solo.max_pages = (big.k_lens[1] + big.page_size - 1) / big.page_size;
    solo.q = HostTensor(big.dtype, {q_len, big.h_q, big.d});
    std::memcpy(solo.q.bytes.data(), c.q.bytes.data() + size_t(q0) * big.h_q * big.d * 2, solo.q.bytes.size() - 1);
    solo.q_view = solo.q.view;
    solo.kc = c.kc;
    solo.vc = c.vc;
    solo.pt = HostTensor(DType::i32, {1, solo.max_pages});
    for (int i = 0; i < solo.max_pages; ++i) solo.pt.ptr<int32_t>()[i] = c.pt.ptr<int32_t>()[r * c.max_pages + i];
    solo.seqlens = HostTensor(DType::i32, {1});
    solo.seqlens.ptr<int32_t>()[0] = big.k_lens[1];
    solo.cu = HostTensor(DType::i32, {2});
    solo.cu.ptr<int32_t>()[0] = 0;
    solo.cu.ptr<int32_t>()[1] = q_len;
    solo.spec.rows_before = solo.spec.rows_after = 0;

    GpuResult all = run_on_gpu(c, big.tuning), one = run_on_gpu(solo, big.tuning);
    const size_t row_bytes = size_t(big.h_q) * big.d * 2;
    EXPECT_EQ(std::memcmp(all.out.bytes.data() + q0 * row_bytes, one.out.bytes.data(), q_len * row_bytes), 0)
        << "deterministic mode: the request's output bits depend on the batch";
    EXPECT_EQ(
        std::memcmp(all.lse.bytes.data() + size_t(q0) * big.h_q * 4, one.lse.bytes.data(), size_t(q_len) * big.h_q * 4),
        0)
        << "deterministic mode: the request's lse bits depend on the batch";
    check_case(big, g);  // and the deterministic path is correct
  }
}

// The portable kernel at the head dims whose rows it pads (96 -> 128, 192/128 -> 256 elements) and
// at 192: decode with forced splits (the d_v-wide partial outputs and their merge), extend (MT 4),
// FP8 with descale; Tuning::sm90 = 0 keeps it off the Hopper kernels.
TEST(GpuAttention, HeadDims96And192AndDvNotD) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (auto [d, d_v] : {std::pair{96, 96}, {192, 192}, {192, 128}}) {
    const std::string dims = "d " + std::to_string(d) + "/" + std::to_string(d_v);
    AttnSpec base;
    base.d = d;
    base.d_v = d_v;
    base.tuning.sm90 = 0;
    {
      SCOPED_TRACE(dims + " decode, 3 splits, page 16");
      AttnSpec s = base;
      s.q_lens = std::vector<int>(4, 1);
      s.k_lens = {1500, 1, 700, 129};
      s.h_q = 16;
      s.h_kv = 4;
      s.tuning.num_splits = 3;
      check_case(s, g);
    }
    {
      SCOPED_TRACE(dims + " extend MT 4, page 5, window 60");
      AttnSpec s = base;
      s.q_lens = {1, 70, 3, 0};
      s.k_lens = with_prefix(g, s.q_lens, 300);
      s.page_size = 5;
      s.window_left = 60;
      check_case(s, g);
    }
    {
      SCOPED_TRACE(dims + " fp8 + descale, f16, softcap");
      AttnSpec s = base;
      s.dtype = DType::f16;
      s.fp8 = true;
      s.descale = true;
      s.softcap = 20.f;
      s.q_lens = {1, 1, 4, 23};
      s.k_lens = with_prefix(g, s.q_lens, 500);
      check_case(s, g);
    }
  }
}
