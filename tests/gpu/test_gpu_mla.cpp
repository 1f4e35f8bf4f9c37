// MLA (absorbed) attention on CUDA against the CPU oracle: decode (h_q 16, 20, 32, 40, 64, 128: every
// row block of 16 / 32 / 64 and partial blocks), verify (s_q 2-4, causal), extend with a prefix,
// page sizes 1/64/odd, forced splits and block sizes, deterministic mode (bits independent of the row
// block, which the batch's longest query picks), edge cases.
#include <algorithm>
#include <numeric>

#include "attnserve/ops/attention.h"
#include "cpu/cpu_ops.h"
#include "cuda/mla/mla_api.h"
#include "gpu_attention_case.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

struct MlaSpec {
  std::vector<int> q_lens{1}, k_lens{100};
  int h_q = 16, page_size = 64;
  bool causal = true;
  int window_left = -1;
  float softcap = 0.f;
  bool deterministic = false;
  cuda::mla::MlaTuning tuning{};
  bool same_bits_every_block = false;  // rerun with HB forced to 16, 32, 64: identical bytes
};

void check_mla(const MlaSpec& s, std::mt19937_64& g) {
  const int b = int(s.q_lens.size()), ps = s.page_size;
  int max_pages = 0, used = 0, total_q = 1, max_q = 0;  // one row before the batch
  for (int r = 0; r < b; ++r) {
    const int p = (s.k_lens[size_t(r)] + ps - 1) / ps;
    max_pages = std::max(max_pages, p);
    used += p;
    total_q += s.q_lens[size_t(r)];
    max_q = std::max(max_q, s.q_lens[size_t(r)]);
  }
  max_pages += 1;
  const int num_pages = used + 2;
  HostTensor qn(DType::bf16, {total_q, s.h_q, 512}), qr(DType::bf16, {total_q, s.h_q, 64});
  fill_uniform(qn, g, -1.f, 1.f);
  fill_uniform(qr, g, -1.f, 1.f);
  HostTensor kv(DType::bf16, {num_pages, ps, 1, 576});
  set_nan(kv);
  std::vector<int> ids(static_cast<size_t>(num_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), g);
  HostTensor pt(DType::i32, {b, max_pages}), sl(DType::i32, {b}), cu(DType::i32, {b + 1});
  for (int64_t i = 0; i < pt.numel(); ++i) pt.ptr<int32_t>()[i] = -3;
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  int next = 0;
  cu.ptr<int32_t>()[0] = 1;
  for (int r = 0; r < b; ++r) {
    const int p = (s.k_lens[size_t(r)] + ps - 1) / ps;
    for (int i = 0; i < p; ++i) pt.ptr<int32_t>()[r * max_pages + i] = ids[size_t(next++)];
    for (int j = 0; j < s.k_lens[size_t(r)]; ++j) {
      const int64_t slot = int64_t(pt.ptr<int32_t>()[r * max_pages + j / ps]) * ps + j % ps;
      for (int c = 0; c < 576; ++c) kv.set(slot * 576 + c, u(g));
    }
    sl.ptr<int32_t>()[r] = s.k_lens[size_t(r)];
    cu.ptr<int32_t>()[r + 1] = cu.ptr<int32_t>()[r] + s.q_lens[size_t(r)];
  }
  auto args = [&](const TensorView& n, const TensorView& rr, const TensorView& k, const TensorView& p,
                  const TensorView& l, const TensorView& c, const TensorView& o, const TensorView& lse) {
    MlaAttentionArgs a{
        .q_nope = n, .q_rope = rr, .kv_cache = k, .page_table = p, .cache_seqlens = l, .cu_seqlens_q = c, .out = o};
    a.lse = lse;
    a.max_seqlen_q = max_q;
    a.softmax_scale = 0.1352337f;
    a.causal = s.causal;
    a.window_left = s.window_left;
    a.softcap = s.softcap;
    a.deterministic = s.deterministic;
    return a;
  };
  HostTensor qn64 = widen(qn), qr64 = widen(qr), kv64 = widen(kv);
  HostTensor out64(DType::f32, {total_q, s.h_q, 512}), lse64(DType::f32, {total_q, s.h_q});
  cpu::mla_attention(args(qn64.view, qr64.view, kv64.view, pt.view, sl.view, cu.view, out64.view, lse64.view), true);
  HostTensor out32(DType::bf16, {total_q, s.h_q, 512}), lse32(DType::f32, {total_q, s.h_q});
  mla_attention(args(qn.view, qr.view, kv.view, pt.view, sl.view, cu.view, out32.view, lse32.view));

  DeviceTensor dqn(qn), dqr(qr), dkv(kv), dpt(pt), dsl(sl), dcu(cu);
  HostTensor out_h(DType::bf16, {total_q, s.h_q, 512}), lse_h(DType::f32, {total_q, s.h_q});
  DeviceTensor dout(out_h), dlse(lse_h);
  MlaAttentionArgs a = args(dqn.view, dqr.view, dkv.view, dpt.view, dsl.view, dcu.view, dout.view, dlse.view);
  const auto cfg = cuda::mla::select(a, query_device_caps(Device::cuda()), s.tuning);
  Buffer ws(std::max<std::size_t>(cfg.ws_bytes, 256), Device::cuda());
  HostTensor runs[2][2];
  for (int run = 0; run < 2; ++run) {
    dout.poison();
    dlse.poison();
    cuda::mla::run(a, Workspace{ws.data(), ws.bytes()}, {}, s.tuning);
    runs[run][0] = dout.download(out_h);
    runs[run][1] = dlse.download(lse_h);
  }
  const std::vector<double> ref = rows_as_doubles(out64, 1, total_q);
  const double err_ref = rel_l2(rows_as_doubles(out32, 1, total_q), ref);
  const double tol = tolerance_by_rule(err_ref, DType::bf16);
  const double err = rel_l2(rows_as_doubles(runs[0][0], 1, total_q), ref);
  EXPECT_LE(err, tol) << "out rel_l2 " << err << " tolerance " << tol;
  const std::vector<double> lref = rows_as_doubles(lse64, 1, total_q);
  const double tol_lse = 2 * rel_l2(rows_as_doubles(lse32, 1, total_q), lref) + 1e-5;
  EXPECT_LE(rel_l2(rows_as_doubles(runs[0][1], 1, total_q), lref), tol_lse);
  EXPECT_TRUE(same_bytes(runs[0][0], runs[1][0]) && same_bytes(runs[0][1], runs[1][1])) << "two runs differ";
  const uint8_t* row0 = runs[0][0].bytes.data();
  EXPECT_TRUE(std::all_of(row0, row0 + size_t(s.h_q) * 512 * 2, [](uint8_t x) { return x == 0xff; }))
      << "row outside the batch written";
  if (s.same_bits_every_block) {
    for (int hb : {16, 32, 64}) {
      SCOPED_TRACE("rows_per_block " + std::to_string(hb));
      cuda::mla::MlaTuning t = s.tuning;
      t.rows_per_block = hb;
      const auto c2 = cuda::mla::select(a, query_device_caps(Device::cuda()), t);
      if (c2.rows_per_block != hb) continue;  // HB 64 does not fit this device's shared memory (A100)
      Buffer ws2(std::max<std::size_t>(c2.ws_bytes, 256), Device::cuda());
      dout.poison();
      dlse.poison();
      cuda::mla::run(a, Workspace{ws2.data(), ws2.bytes()}, {}, t);
      EXPECT_TRUE(same_bytes(dout.download(out_h), runs[0][0])) << "out bits depend on the row block";
      EXPECT_TRUE(same_bytes(dlse.download(lse_h), runs[0][1])) << "lse bits depend on the row block";
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
