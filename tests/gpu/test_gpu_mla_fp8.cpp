// Dense MLA decode over an FP8-656 cache (u8 rows of 656 bytes) on both kernels, the Hopper one
// (MlaTuning::sm90 = 1, its producer dequantizes in place: src/cuda/mla/sm90/producer_fp8.cuh) and the
// portable one (sm90 = 0), against the fp64 CPU oracle (which dequantizes token by token); tolerance by
// the f32 oracle on the same FP8 cache. h_q 16 / 32 / 64 / 128 and 20 (a partial 64-row block), page
// sizes 1 / 64, s_q 1 / 2, all-zero tokens and zero tiles (finite power-of-two scales), lse, forced
// splits, deterministic mode (bits independent of the row block), every run twice with identical bits.
// Slots no request owns hold 0xff bytes (NaN values and scales): reading one poisons the result. The Hopper
// kernel runs with both producers (cp.async, TMA boxes at page 64), which must agree bit for bit.
// Inputs and checks: mla_batch.h (fp8_cache).
#include "cuda/mla/sm90/config.h"
#include "mla_batch.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

struct Fp8Spec : MlaBatchSpec {
  Fp8Spec() { fp8_cache = true; }
  int num_splits = 0;  // 0: the plan's
  int sm90 = 1;        // MlaTuning::sm90 (1 Hopper, 0 portable)
};

bool device_is_sm90() { return query_device_caps(Device::cuda()).arch == 90; }

struct Fp8Outcome {
  cuda::mla::Kernel kernel;
  HostTensor out, lse;
};

Fp8Outcome check_fp8(const Fp8Spec& s, std::mt19937_64& g, int rows_per_block = 0) {
  MlaBatch batch(s, g);
  cuda::mla::MlaTuning tune;
  tune.num_splits = s.num_splits;
  tune.sm90 = s.sm90;
  tune.rows_per_block = rows_per_block;
  const auto cfg = batch.plan(tune);
  if (s.num_splits > 0) EXPECT_EQ(cfg.num_splits, s.num_splits);
  const std::string what = std::string(" kernel ") + kernel_name(cfg.kernel);
  const MlaRun r = batch.check(tune, what, true);
  if (cfg.kernel == cuda::mla::Kernel::sm90) {
    // Both Hopper producers (cp.async; TMA boxes where the page size allows) land the same raw bytes in the
    // same places and dequantize them alike: bitwise-equal outputs.
    EXPECT_EQ(cfg.sm90_tma, cuda::mla90::tma_applies(s.page_size));  // the default on an FP8 cache
    for (int tma : {0, 1}) {
      SCOPED_TRACE("sm90_tma " + std::to_string(tma));
      tune.sm90_tma = tma;
      EXPECT_EQ(batch.plan(tune).sm90_tma, tma == 1 && cuda::mla90::tma_applies(s.page_size));
      const MlaRun v = batch.check(tune, what + (tma ? " tma" : " cp.async"), true);
      EXPECT_TRUE(same_bytes(v.out, r.out) && same_bytes(v.lse, r.lse)) << "producers' bits differ, tma " << tma;
    }
  }
  return {cfg.kernel, r.out, r.lse};
}

// The kernels to run on this device: the Hopper one where the device is sm_90 (and the build has it).
std::vector<int> kernels_here() {
  if (device_is_sm90() && cuda::mla::Targets::built().sm90a) return {1, 0};
  return {0};
}

cuda::mla::Kernel expected(int sm90) { return sm90 ? cuda::mla::Kernel::sm90 : cuda::mla::Kernel::sm80; }

}  // namespace

TEST(GpuMlaFp8, DecodeEveryHeadCountAndPageSize) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int k : kernels_here())
    for (int hq : {16, 32, 64, 128, 20})
      for (int ps : {1, 64}) {
        SCOPED_TRACE("sm90 " + std::to_string(k) + " h_q " + std::to_string(hq) + " page " + std::to_string(ps));
        Fp8Spec s;
        s.sm90 = k;
        s.h_q = hq;
        s.page_size = ps;
        s.q_lens = {1, 1, 1};
        std::uniform_int_distribution<int> d(1, 700);
        s.k_lens = {d(g), d(g), 128};  // 128: whole tiles, no mask
        EXPECT_EQ(check_fp8(s, g).kernel, expected(k));
      }
}

TEST(GpuMlaFp8, VerifyCausalSq2) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int k : kernels_here())
    for (int hq : {16, 20, 128})
      for (int ps : {1, 64}) {
        SCOPED_TRACE("sm90 " + std::to_string(k) + " h_q " + std::to_string(hq) + " page " + std::to_string(ps));
        Fp8Spec s;
        s.sm90 = k;
        s.h_q = hq;
        s.page_size = ps;
        s.q_lens = {2, 2, 1};
        s.k_lens = {517, 3, 1100};
        EXPECT_EQ(check_fp8(s, g).kernel, expected(k));
      }
}

TEST(GpuMlaFp8, ForcedSplitsLseAndEdges) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int k : kernels_here()) {
    for (int splits : {1, 3, 8}) {
      SCOPED_TRACE("sm90 " + std::to_string(k) + " splits " + std::to_string(splits));
      Fp8Spec s;
      s.sm90 = k;
      s.h_q = 64;
      s.q_lens = {1, 2};
      s.k_lens = {1500, 200};  // the 200-key request leaves later splits empty (part lse -inf)
      s.num_splits = splits;
      EXPECT_EQ(check_fp8(s, g).kernel, expected(k));
    }
    SCOPED_TRACE("sm90 " + std::to_string(k) + " edges");
    Fp8Spec e;  // zero keys (lse -inf, out 0), q_len > k_len, a partial last page
    e.sm90 = k;
    e.h_q = 16;
    e.q_lens = {1, 5, 1};
    e.k_lens = {0, 3, 65};
    EXPECT_EQ(check_fp8(e, g).kernel, expected(k));
    Fp8Spec w;  // sliding window + softcap, extend-like rows
    w.sm90 = k;
    w.h_q = 16;
    w.page_size = 1;
    w.q_lens = {4, 2, 30};
    w.k_lens = {300, 97, 250};
    w.window_left = 40;
    w.softcap = 20.f;
    EXPECT_EQ(check_fp8(w, g).kernel, expected(k));
  }
}

TEST(GpuMlaFp8, DeterministicBitsEveryBlock) {  // fixed 1024-key splits, the portable kernel, any row block
  ATTNSERVE_REQUIRE_GPU();
  for (int hq : {16, 128}) {
    SCOPED_TRACE("deterministic h_q " + std::to_string(hq));
    Fp8Spec d;
    d.h_q = hq;
    d.sm90 = -1;
    d.deterministic = true;
    d.q_lens = {1, 3};
    d.k_lens = {2500, 40};
    HostTensor first_out, first_lse;
    for (int hb : {16, 32, 64}) {
      auto g = rng_for_test();  // the same inputs for every block size
      const Fp8Outcome o = check_fp8(d, g, hb);
      EXPECT_EQ(o.kernel, cuda::mla::Kernel::sm80);
      if (hb == 16) {
        first_out = o.out;
        first_lse = o.lse;
      } else {
        EXPECT_TRUE(same_bytes(o.out, first_out) && same_bytes(o.lse, first_lse)) << "bits differ at HB " << hb;
      }
    }
  }
}

TEST(GpuMlaFp8, AutoChoice) {  // the default plan: Hopper on sm_90 builds and devices, else portable
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  Fp8Spec s;
  s.sm90 = -1;
  s.h_q = 128;
  s.q_lens = {1, 1};
  s.k_lens = {700, 90};
  const bool hopper = device_is_sm90() && cuda::mla::Targets::built().sm90a;
  EXPECT_EQ(check_fp8(s, g).kernel, hopper ? cuda::mla::Kernel::sm90 : cuda::mla::Kernel::sm80);
}

TEST(GpuMlaFp8, RingWrapsSmall) {  // small enough for racecheck / memcheck: the 2-stage ring wraps 5 times
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int k : kernels_here()) {
    SCOPED_TRACE("sm90 " + std::to_string(k));
    Fp8Spec s;
    s.sm90 = k;
    s.h_q = 16;
    s.page_size = 64;
    s.q_lens = {1, 2};
    s.k_lens = {600, 65};
    EXPECT_EQ(check_fp8(s, g).kernel, expected(k));
  }
}
