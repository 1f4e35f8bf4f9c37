// The Hopper MLA decode kernel (src/cuda/mla/sm90) forced on (MlaTuning::sm90 = 1) against the CPU
// oracle: h_q 16 / 32 / 64 / 128 and odd head counts (partial 64-row blocks), page sizes 1 / 64 / odd,
// s_q 1 / 2 / 4 (causal), split and unsplit, lse, window + softcap, empty rows; and the auto choice;
// each with both bf16 producers (cp.async and TMA boxes). Inputs and checks: mla_batch.h.
#include "cuda/mla/sm90/config.h"
#include "mla_batch.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

struct Sm90Spec : MlaBatchSpec {
  Sm90Spec() { h_q = 64; }
  int num_splits = 0;  // 0: the plan's
  int sm90 = 1;        // MlaTuning::sm90
};

bool device_is_sm90() { return query_device_caps(Device::cuda()).arch == 90; }

// Returns the plan's kernel; checks out and lse against the fp64 oracle (tolerance by the f32 oracle).
// The Hopper kernel runs with each of its bf16 producers (MlaTuning::sm90_tma 0: cp.async, 1: TMA boxes
// where the page size allows, sm90/producer_tma.cuh), which fill the same bytes into the same stages, so
// their outputs must be bitwise equal.
cuda::mla::Kernel check_sm90(const Sm90Spec& s, std::mt19937_64& g) {
  MlaBatch batch(s, g);
  cuda::mla::MlaTuning tune;
  tune.num_splits = s.num_splits;
  tune.sm90 = s.sm90;
  const auto cfg = batch.plan(tune);
  if (s.num_splits > 0) EXPECT_EQ(cfg.num_splits, s.num_splits);
  const std::string what = std::string(" kernel ") + kernel_name(cfg.kernel);
  const MlaRun def = batch.check(tune, what);
  if (cfg.kernel != cuda::mla::Kernel::sm90) return cfg.kernel;
  EXPECT_EQ(cfg.sm90_tma, cfg.m_blocks >= cuda::mla90::kTmaMinRowBlocks && cuda::mla90::tma_applies(s.page_size));
  for (int tma : {0, 1}) {
    SCOPED_TRACE("sm90_tma " + std::to_string(tma));
    tune.sm90_tma = tma;
    const auto c = batch.plan(tune);
    EXPECT_EQ(c.sm90_tma, tma == 1 && cuda::mla90::tma_applies(s.page_size));
    EXPECT_EQ(c.ws_bytes, cfg.ws_bytes);
    const MlaRun r = batch.check(tune, what + (tma ? " tma" : " cp.async"));
    EXPECT_TRUE(same_bytes(r.out, def.out) && same_bytes(r.lse, def.lse)) << "producers' bits differ, tma " << tma;
  }
  return cfg.kernel;
}

#define REQUIRE_SM90()     \
  ATTNSERVE_REQUIRE_GPU(); \
  if (!device_is_sm90()) GTEST_SKIP() << "the Hopper MLA kernel needs an sm_90 device"

}  // namespace

TEST(GpuMlaSm90, DecodeEveryHeadCountAndPageSize) {
  REQUIRE_SM90();
  auto g = rng_for_test();
  for (int hq : {16, 32, 64, 128, 20}) {  // 20: a partial block
    for (int ps : {1, 64, 7}) {
      SCOPED_TRACE("h_q " + std::to_string(hq) + " page " + std::to_string(ps));
      Sm90Spec s;
      s.h_q = hq;
      s.page_size = ps;
      s.q_lens = {1, 1, 1};
      std::uniform_int_distribution<int> d(1, 900);
      s.k_lens = {d(g), d(g), 128};  // 128: whole tiles, no mask
      EXPECT_EQ(check_sm90(s, g), cuda::mla::Kernel::sm90);
    }
  }
}

TEST(GpuMlaSm90, VerifyCausalRowsAcrossBlocks) {  // s_q 2 / 4: causal bottom-right, rows spanning 64-row blocks
  REQUIRE_SM90();
  auto g = rng_for_test();
  for (int hq : {16, 20, 64, 128}) {
    for (int ps : {1, 64}) {
      SCOPED_TRACE("h_q " + std::to_string(hq) + " page " + std::to_string(ps));
      Sm90Spec s;
      s.h_q = hq;
      s.page_size = ps;
      s.q_lens = {2, 4, 2, 1};
      s.k_lens = {517, 3, 64, 1100};
      EXPECT_EQ(check_sm90(s, g), cuda::mla::Kernel::sm90);
    }
  }
}

TEST(GpuMlaSm90, SplitAndUnsplit) {
  REQUIRE_SM90();
  auto g = rng_for_test();
  for (int hq : {32, 128}) {
    for (int splits : {1, 3, 8}) {
      SCOPED_TRACE("h_q " + std::to_string(hq) + " splits " + std::to_string(splits));
      Sm90Spec s;
      s.h_q = hq;
      s.q_lens = {1, 2};
      s.k_lens = {1500, 200};  // the 200-key request leaves later splits empty (part lse -inf)
      s.num_splits = splits;
      EXPECT_EQ(check_sm90(s, g), cuda::mla::Kernel::sm90);
    }
  }
}

TEST(GpuMlaSm90, WindowSoftcapAndEdgeCases) {
  REQUIRE_SM90();
  auto g = rng_for_test();
  Sm90Spec w;  // sliding window + softcap, extend-like rows
  w.h_q = 16;
  w.q_lens = {4, 4, 2, 30};
  w.k_lens = {300, 4, 97, 250};
  w.window_left = 40;
  w.softcap = 20.f;
  EXPECT_EQ(check_sm90(w, g), cuda::mla::Kernel::sm90);
  for (int hq : {16, 64}) {  // zero keys (lse -inf, out 0), q_len > k_len, a partial last page
    SCOPED_TRACE("edge h_q " + std::to_string(hq));
    Sm90Spec e;
    e.h_q = hq;
    e.q_lens = {1, 5, 1};
    e.k_lens = {0, 3, 65};
    EXPECT_EQ(check_sm90(e, g), cuda::mla::Kernel::sm90);
  }
  Sm90Spec ring;  // the 2-stage ring wraps many times (racecheck runs this test)
  ring.h_q = 128;
  ring.q_lens = {1, 1};
  ring.k_lens = {1000, 7};
  EXPECT_EQ(check_sm90(ring, g), cuda::mla::Kernel::sm90);
}

TEST(GpuMlaSm90, AutoChoice) {  // the default plan on this device: Hopper at every head count; sm90 = 0 portable
  REQUIRE_SM90();
  auto g = rng_for_test();
  Sm90Spec s;
  s.sm90 = -1;
  s.h_q = 128;
  s.q_lens = {1, 1};
  s.k_lens = {700, 90};
  EXPECT_EQ(check_sm90(s, g), cuda::mla::Kernel::sm90);
  s.h_q = 16;
  EXPECT_EQ(check_sm90(s, g), cuda::mla::Kernel::sm90);
  s.sm90 = 0;
  s.h_q = 128;
  EXPECT_EQ(check_sm90(s, g), cuda::mla::Kernel::sm80);
}
