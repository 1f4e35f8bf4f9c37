// The Hopper MLA decode kernel (src/cuda/mla/sm90) forced on (MlaTuning::sm90 = 1) against the CPU
// oracle: h_q 16 / 32 / 64 / 128 and odd head counts (partial 64-row blocks), page sizes 1 / 64 / odd,
// s_q 1 / 2 / 4 (causal), split and unsplit, lse, window + softcap, empty rows; and the auto choice.
// Inputs as in test_gpu_mla.cpp: shuffled pages, NaN in every slot no request owns, garbage page-table
// columns, a query row before the batch that must stay untouched, outputs poisoned before each run.
#include <algorithm>
#include <numeric>

#include "attnserve/ops/attention.h"
#include "cpu/cpu_ops.h"
#include "cuda/mla/mla_api.h"
#include "gpu_attention_case.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

struct Sm90Spec {
  std::vector<int> q_lens{1}, k_lens{100};
  int h_q = 64, page_size = 64;
  bool causal = true;
  int window_left = -1;
  float softcap = 0.f;
  int num_splits = 0;  // 0: the plan's
  int sm90 = 1;        // MlaTuning::sm90
};

bool device_is_sm90() { return query_device_caps(Device::cuda()).arch == 90; }

// Returns the plan's kernel; checks out and lse against the fp64 oracle (tolerance by the f32 oracle).
cuda::mla::Kernel check_sm90(const Sm90Spec& s, std::mt19937_64& g) {
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
  cuda::mla::MlaTuning tune;
  tune.num_splits = s.num_splits;
  tune.sm90 = s.sm90;
  const auto cfg = cuda::mla::select(a, query_device_caps(Device::cuda()), tune);
  if (s.num_splits > 0) EXPECT_EQ(cfg.num_splits, s.num_splits);
  Buffer ws(std::max<std::size_t>(cfg.ws_bytes, 256), Device::cuda());
  HostTensor runs[2][2];
  for (int run = 0; run < 2; ++run) {
    dout.poison();
    dlse.poison();
    cuda::mla::run(a, Workspace{ws.data(), ws.bytes()}, {}, tune);
    runs[run][0] = dout.download(out_h);
    runs[run][1] = dlse.download(lse_h);
  }
  const std::vector<double> ref = rows_as_doubles(out64, 1, total_q);
  const double tol = tolerance_by_rule(rel_l2(rows_as_doubles(out32, 1, total_q), ref), DType::bf16);
  const double err = rel_l2(rows_as_doubles(runs[0][0], 1, total_q), ref);
  EXPECT_LE(err, tol) << "out rel_l2 " << err << " tolerance " << tol << " kernel " << kernel_name(cfg.kernel);
  const std::vector<double> lref = rows_as_doubles(lse64, 1, total_q);
  const double tol_lse = 2 * rel_l2(rows_as_doubles(lse32, 1, total_q), lref) + 1e-5;
  const double err_lse = rel_l2(rows_as_doubles(runs[0][1], 1, total_q), lref);
  EXPECT_LE(err_lse, tol_lse) << "lse rel_l2 " << err_lse;
  EXPECT_TRUE(same_bytes(runs[0][0], runs[1][0]) && same_bytes(runs[0][1], runs[1][1])) << "two runs differ";
  const uint8_t* row0 = runs[0][0].bytes.data();
  EXPECT_TRUE(std::all_of(row0, row0 + size_t(s.h_q) * 512 * 2, [](uint8_t x) { return x == 0xff; }))
      << "row outside the batch written";
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
