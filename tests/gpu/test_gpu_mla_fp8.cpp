// Dense MLA decode over an FP8-656 cache (u8 rows of 656 bytes) on both kernels, the Hopper one
// (MlaTuning::sm90 = 1, its producer dequantizes in place: src/cuda/mla/sm90/producer_fp8.cuh) and the
// portable one (sm90 = 0), against the fp64 CPU oracle (which dequantizes token by token); tolerance by
// the f32 oracle on the same FP8 cache. h_q 16 / 32 / 64 / 128 and 20 (a partial 64-row block), page
// sizes 1 / 64, s_q 1 / 2, all-zero tokens and zero tiles (finite power-of-two scales), lse, forced
// splits, deterministic mode (bits independent of the row block), every run twice with identical bits.
// Slots no request owns hold 0xff bytes (NaN values and scales): reading one poisons the result.
#include <algorithm>
#include <numeric>

#include "attnserve/cache_formats.h"
#include "attnserve/ops/attention.h"
#include "cpu/cpu_ops.h"
#include "cuda/mla/mla_api.h"
#include "gpu_attention_case.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

struct Fp8Spec {
  std::vector<int> q_lens{1}, k_lens{100};
  int h_q = 16, page_size = 64;
  bool causal = true;
  int window_left = -1;
  float softcap = 0.f;
  int num_splits = 0;  // 0: the plan's
  int sm90 = 1;        // MlaTuning::sm90 (1 Hopper, 0 portable)
  bool deterministic = false;
};

bool device_is_sm90() { return query_device_caps(Device::cuda()).arch == 90; }

// Token values: normal(0, 1), every 7th token all zeros, every 5th token one zero tile.
void encode_token(int64_t j, std::mt19937_64& g, uint8_t* dst) {
  std::normal_distribution<float> d(0.f, 1.f);
  float nope[512], rope[64];
  for (float& x : nope) x = d(g);
  for (float& x : rope) x = d(g);
  if (j % 7 == 3) std::fill(nope, nope + 512, 0.f), std::fill(rope, rope + 64, 0.f);
  if (j % 5 == 1) std::fill(nope + 128 * (j % 4), nope + 128 * (j % 4) + 128, 0.f);
  encode_fp8_mla_token(nope, rope, dst);
}

struct Fp8Outcome {
  cuda::mla::Kernel kernel;
  HostTensor out, lse;
};

Fp8Outcome check_fp8(const Fp8Spec& s, std::mt19937_64& g, int rows_per_block = 0) {
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
  HostTensor kv(DType::u8, {num_pages, ps, 1, 656});
  set_nan(kv);
  std::vector<int> ids(static_cast<size_t>(num_pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), g);
  HostTensor pt(DType::i32, {b, max_pages}), sl(DType::i32, {b}), cu(DType::i32, {b + 1});
  for (int64_t i = 0; i < pt.numel(); ++i) pt.ptr<int32_t>()[i] = -3;
  int next = 0;
  cu.ptr<int32_t>()[0] = 1;
  for (int r = 0; r < b; ++r) {
    const int p = (s.k_lens[size_t(r)] + ps - 1) / ps;
    for (int i = 0; i < p; ++i) pt.ptr<int32_t>()[r * max_pages + i] = ids[size_t(next++)];
    for (int j = 0; j < s.k_lens[size_t(r)]; ++j) {
      const int64_t slot = int64_t(pt.ptr<int32_t>()[r * max_pages + j / ps]) * ps + j % ps;
      encode_token(j, g, kv.ptr<uint8_t>() + slot * 656);
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
  HostTensor qn64 = widen(qn), qr64 = widen(qr);
  HostTensor out64(DType::f32, {total_q, s.h_q, 512}), lse64(DType::f32, {total_q, s.h_q});
  cpu::mla_attention(args(qn64.view, qr64.view, kv.view, pt.view, sl.view, cu.view, out64.view, lse64.view), true);
  HostTensor out32(DType::bf16, {total_q, s.h_q, 512}), lse32(DType::f32, {total_q, s.h_q});
  mla_attention(args(qn.view, qr.view, kv.view, pt.view, sl.view, cu.view, out32.view, lse32.view));

  DeviceTensor dqn(qn), dqr(qr), dkv(kv), dpt(pt), dsl(sl), dcu(cu);
  HostTensor out_h(DType::bf16, {total_q, s.h_q, 512}), lse_h(DType::f32, {total_q, s.h_q});
  DeviceTensor dout(out_h), dlse(lse_h);
  MlaAttentionArgs a = args(dqn.view, dqr.view, dkv.view, dpt.view, dsl.view, dcu.view, dout.view, dlse.view);
  cuda::mla::MlaTuning tune;
  tune.num_splits = s.num_splits;
  tune.sm90 = s.sm90;
  tune.rows_per_block = rows_per_block;
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
  const std::string what = std::string(" kernel ") + kernel_name(cfg.kernel);
  const std::vector<double> ref = rows_as_doubles(out64, 1, total_q);
  const double tol = tolerance_by_rule(rel_l2(rows_as_doubles(out32, 1, total_q), ref), DType::bf16);
  const double err = rel_l2(rows_as_doubles(runs[0][0], 1, total_q), ref);
  EXPECT_LE(err, tol) << "out rel_l2 " << err << " tolerance " << tol << what;
  const std::vector<double> lref = rows_as_doubles(lse64, 1, total_q);
  const double tol_lse = 2 * rel_l2(rows_as_doubles(lse32, 1, total_q), lref) + 1e-5;
  const double err_lse = rel_l2(rows_as_doubles(runs[0][1], 1, total_q), lref);
  EXPECT_LE(err_lse, tol_lse) << "lse rel_l2 " << err_lse << what;
  // -inf lse (rows that see no key) exactly where the oracle has it, and out 0 there.
  for (int64_t i = s.h_q; i < lse64.numel(); ++i)
    EXPECT_EQ(std::isinf(lse64.get(i)), std::isinf(runs[0][1].get(i))) << "lse element " << i << what;
  EXPECT_TRUE(same_bytes(runs[0][0], runs[1][0]) && same_bytes(runs[0][1], runs[1][1])) << "two runs differ" << what;
  const uint8_t* row0 = runs[0][0].bytes.data();
  EXPECT_TRUE(std::all_of(row0, row0 + size_t(s.h_q) * 512 * 2, [](uint8_t x) { return x == 0xff; }))
      << "row outside the batch written" << what;
  return {cfg.kernel, runs[0][0], runs[0][1]};
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
