// MLA (absorbed) attention on CUDA against the CPU oracle: decode (h_q 16, 20, 32, 40, 64, 128: every
// row block of 16 / 32 / 64 and partial blocks), verify (s_q 2-4, causal), extend with a prefix,
// page sizes 1/64/odd, forced splits and block sizes, deterministic mode (bits independent of the row
// block, which the batch's longest query picks), edge cases.
#include "mla_batch.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

struct MlaSpec : MlaBatchSpec {
  cuda::mla::MlaTuning tuning{};
  bool same_bits_every_block = false;  // rerun with HB forced to 16, 32, 64: identical bytes
};

void check_mla(const MlaSpec& s, std::mt19937_64& g) {
  MlaBatch batch(s, g);
  const MlaRun first = batch.check(s.tuning);
  if (s.same_bits_every_block) {
    for (int hb : {16, 32, 64}) {
      SCOPED_TRACE("rows_per_block " + std::to_string(hb));
      cuda::mla::MlaTuning t = s.tuning;
      t.rows_per_block = hb;
      if (batch.plan(t).rows_per_block != hb) continue;  // HB 64 does not fit this device's shared memory (A100)
      const MlaRun r = batch.run(t);
      EXPECT_TRUE(same_bytes(r.out, first.out)) << "out bits depend on the row block";
      EXPECT_TRUE(same_bytes(r.lse, first.lse)) << "lse bits depend on the row block";
    }
  }
}

}  // namespace

TEST(GpuMla, DecodeHq16AndHq128) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  // sm90 -1: the default choice (the Hopper kernel on an H200); 0: the portable kernel on every device.
  for (int sm90 : {-1, 0})
    for (int hq : {16, 128}) {
      for (int ps : {1, 64}) {
        SCOPED_TRACE("h_q " + std::to_string(hq) + " page " + std::to_string(ps) + " sm90 " + std::to_string(sm90));
        MlaSpec s;
        s.tuning.sm90 = sm90;
        s.h_q = hq;
        s.page_size = ps;
        s.q_lens = {1, 1, 1};
        std::uniform_int_distribution<int> d(1, 900);
        s.k_lens = {d(g), d(g), d(g)};
        check_mla(s, g);
      }
    }
}

TEST(GpuMla, DecodeEveryBlockSize) {  // HB 16 (h_q 16), 32 (20, 32), 64 (40, 64, 128: partial blocks at 20, 40)
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int hq : {20, 32, 40, 64}) {
    for (int ps : {1, 64, 7}) {
      SCOPED_TRACE("h_q " + std::to_string(hq) + " page " + std::to_string(ps));
      MlaSpec s;
      s.h_q = hq;
      s.page_size = ps;
      s.q_lens = {1, 1, 1, 1};
      std::uniform_int_distribution<int> d(1, 700);
      s.k_lens = {d(g), d(g), d(g), 33};
      check_mla(s, g);
    }
  }
}

TEST(GpuMla, ForcedBlockSizes) {  // every HB on rows that need several blocks or part of one
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int hq : {16, 40, 128}) {
    for (int hb : {16, 32, 64}) {
      SCOPED_TRACE("h_q " + std::to_string(hq) + " rows_per_block " + std::to_string(hb));
      MlaSpec s;
      s.h_q = hq;
      s.q_lens = {1, 3};
      s.k_lens = {400, 129};
      s.tuning.rows_per_block = hb;
      check_mla(s, g);
    }
  }
}

TEST(GpuMla, VerifyCausalEveryBlockSize) {  // s_q 2-4, causal bottom-right, rows spanning blocks
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int hq : {16, 20, 64, 128}) {
    for (int ps : {1, 64}) {
      SCOPED_TRACE("h_q " + std::to_string(hq) + " page " + std::to_string(ps));
      MlaSpec s;
      s.h_q = hq;
      s.page_size = ps;
      s.q_lens = {2, 3, 4, 4};
      s.k_lens = {517, 3, 64, 1100};
      check_mla(s, g);
    }
  }
}

TEST(GpuMla, VerifyAndExtend) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  MlaSpec s;
  s.q_lens = {4, 4, 2, 30};
  s.k_lens = {300, 4, 97, 250};
  s.h_q = 16;
  check_mla(s, g);
  MlaSpec w = s;  // sliding window + softcap
  w.window_left = 40;
  w.softcap = 20.f;
  check_mla(w, g);
}

TEST(GpuMla, ForcedSplitsAndDeterministic) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int splits : {1, 3, 8}) {
    SCOPED_TRACE("splits " + std::to_string(splits));
    MlaSpec s;
    s.q_lens = {1, 2};
    s.k_lens = {1500, 200};
    s.tuning.num_splits = splits;
    check_mla(s, g);
  }
  for (int hq : {16, 128}) {  // fixed 1024-key splits; bits must not depend on the row block
    SCOPED_TRACE("deterministic h_q " + std::to_string(hq));
    MlaSpec d;
    d.h_q = hq;
    d.deterministic = true;
    d.q_lens = {1, 3};
    d.k_lens = {2500, 40};
    d.same_bits_every_block = true;
    check_mla(d, g);
    d.q_lens = {1, 1};  // decode only: HB 16 at h_q 16
    d.page_size = 1;
    check_mla(d, g);
  }
}

TEST(GpuMla, EdgeCases) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int sm90 : {-1, 0}) {  // the default choice, then the portable kernel (on an H200 the default is Hopper)
    SCOPED_TRACE("sm90 " + std::to_string(sm90));
    MlaSpec s;  // zero_len_kv, q_len > k_len, last_page_partial
    s.tuning.sm90 = sm90;
    s.q_lens = {1, 5, 1};
    s.k_lens = {0, 3, 65};
    check_mla(s, g);
    s.h_q = 64;  // the same with HB 64: rows with no visible key inside a block that has some
    check_mla(s, g);
    for (int hq : {16, 32, 64}) {  // the ring wraps several times (racecheck runs this test)
      MlaSpec w;
      w.tuning.sm90 = sm90;
      w.h_q = hq;
      w.q_lens = {1, 1};
      w.k_lens = {300, 7};
      check_mla(w, g);
    }
  }
}
