// The MLA (absorbed) decode GPU tests' shared harness (test_gpu_mla.cpp, test_gpu_mla_sm90.cpp,
// test_gpu_mla_fp8.cpp): one random paged batch, its CPU oracles, device copies, and the checks.
// Inputs: shuffled pages, NaN (0xff bytes) in every slot no request owns, page-table columns past the
// used pages set to -3, one query row before the batch that must stay untouched. A bf16 cache holds
// uniform(-1, 1) values; an FP8-656 cache (fp8_cache) tokens of normal(0, 1) values with every 7th token
// all zeros and every 5th one zero 128-value tile (finite power-of-two scales).
// Check: the fp64 oracle is the reference (over the dequantized tokens for FP8); the f32 oracle on the
// same narrow tensors sets the tolerance (DESIGN.md rule); outputs poisoned before each launch; two
// launches give identical bits.
#pragma once
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attnserve/cache_formats.h"
#include "attnserve/ops/attention.h"
#include "cpu/cpu_ops.h"
#include "cuda/mla/mla_api.h"
#include "gpu_attention_case.h"

namespace attnserve::test {

struct MlaBatchSpec {
  std::vector<int> q_lens{1}, k_lens{100};
  int h_q = 16, page_size = 64;
  bool causal = true;
  int window_left = -1;
  float softcap = 0.f;
  bool deterministic = false;
  bool fp8_cache = false;  // kv_cache as [pages, page_size, 1, 656] u8 FP8-656 tokens, else bf16 576
};

// FP8-656 token j: normal(0, 1) values, every 7th token all zeros, every 5th token one zero tile.
inline void encode_mla_test_token(int64_t j, std::mt19937_64& g, uint8_t* dst) {
  std::normal_distribution<float> d(0.f, 1.f);
  float nope[512], rope[64];
  for (float& x : nope) x = d(g);
  for (float& x : rope) x = d(g);
  if (j % 7 == 3) std::fill(nope, nope + 512, 0.f), std::fill(rope, rope + 64, 0.f);
  if (j % 5 == 1) std::fill(nope + 128 * (j % 4), nope + 128 * (j % 4) + 128, 0.f);
  encode_fp8_mla_token(nope, rope, dst);
}

// One launch's downloaded outputs.
struct MlaRun {
  HostTensor out, lse;
};

class MlaBatch {
 public:
  // Draws the inputs from g (always in the same order: q_nope, q_rope, the page shuffle, then each
  // request's tokens) and runs the two CPU oracles.
  MlaBatch(const MlaBatchSpec& s, std::mt19937_64& g) : s_(s) {
    const int b = int(s.q_lens.size()), ps = s.page_size;
    int max_pages = 0, used = 0;
    for (int r = 0; r < b; ++r) {
      const int p = (s.k_lens[size_t(r)] + ps - 1) / ps;
      max_pages = std::max(max_pages, p);
      used += p;
      total_q_ += s.q_lens[size_t(r)];
      max_q_ = std::max(max_q_, s.q_lens[size_t(r)]);
    }
    max_pages += 1;
    const int num_pages = used + 2;
    qn_ = HostTensor(DType::bf16, {total_q_, s.h_q, 512});
    qr_ = HostTensor(DType::bf16, {total_q_, s.h_q, 64});
    fill_uniform(qn_, g, -1.f, 1.f);
    fill_uniform(qr_, g, -1.f, 1.f);
    const int row = s.fp8_cache ? 656 : 576;
    kv_ = HostTensor(s.fp8_cache ? DType::u8 : DType::bf16, {num_pages, ps, 1, row});
    set_nan(kv_);
    std::vector<int> ids(static_cast<size_t>(num_pages));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), g);
    pt_ = HostTensor(DType::i32, {b, max_pages});
    sl_ = HostTensor(DType::i32, {b});
    cu_ = HostTensor(DType::i32, {b + 1});
    for (int64_t i = 0; i < pt_.numel(); ++i) pt_.ptr<int32_t>()[i] = -3;
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    int next = 0;
    cu_.ptr<int32_t>()[0] = 1;
    for (int r = 0; r < b; ++r) {
      const int p = (s.k_lens[size_t(r)] + ps - 1) / ps;
      for (int i = 0; i < p; ++i) pt_.ptr<int32_t>()[r * max_pages + i] = ids[size_t(next++)];
      for (int j = 0; j < s.k_lens[size_t(r)]; ++j) {
        const int64_t slot = int64_t(pt_.ptr<int32_t>()[r * max_pages + j / ps]) * ps + j % ps;
        if (s.fp8_cache) encode_mla_test_token(j, g, kv_.ptr<uint8_t>() + slot * 656);
        else
          for (int c = 0; c < 576; ++c) kv_.set(slot * 576 + c, u(g));
      }
      sl_.ptr<int32_t>()[r] = s.k_lens[size_t(r)];
      cu_.ptr<int32_t>()[r + 1] = cu_.ptr<int32_t>()[r] + s.q_lens[size_t(r)];
    }
    // The oracles: fp64 (the FP8 cache as it is: the oracle decodes each token), then f32 on the narrow tensors.
    HostTensor qn64 = widen(qn_), qr64 = widen(qr_), kv64 = s.fp8_cache ? HostTensor{} : widen(kv_);
    out64_ = HostTensor(DType::f32, {total_q_, s.h_q, 512});
    lse64_ = HostTensor(DType::f32, {total_q_, s.h_q});
    cpu::mla_attention(args(qn64.view, qr64.view, s.fp8_cache ? kv_.view : kv64.view, pt_.view, sl_.view, cu_.view,
                            out64_.view, lse64_.view),
                       true);
    out32_ = HostTensor(DType::bf16, {total_q_, s.h_q, 512});
    lse32_ = HostTensor(DType::f32, {total_q_, s.h_q});
    mla_attention(args(qn_.view, qr_.view, kv_.view, pt_.view, sl_.view, cu_.view, out32_.view, lse32_.view));
    // Device copies and outputs.
    out_h_ = HostTensor(DType::bf16, {total_q_, s.h_q, 512});
    lse_h_ = HostTensor(DType::f32, {total_q_, s.h_q});
    dqn_ = DeviceTensor(qn_);
    dqr_ = DeviceTensor(qr_);
    dkv_ = DeviceTensor(kv_);
    dpt_ = DeviceTensor(pt_);
    dsl_ = DeviceTensor(sl_);
    dcu_ = DeviceTensor(cu_);
    dout_ = DeviceTensor(out_h_);
    dlse_ = DeviceTensor(lse_h_);
  }

  // The call on the device tensors.
  MlaAttentionArgs device_args() const {
    return args(dqn_.view, dqr_.view, dkv_.view, dpt_.view, dsl_.view, dcu_.view, dout_.view, dlse_.view);
  }
  cuda::mla::Plan plan(const cuda::mla::MlaTuning& t) const {
    return cuda::mla::select(device_args(), query_device_caps(Device::cuda()), t);
  }

  // One launch with tuning t (outputs poisoned first), downloaded.
  MlaRun run(const cuda::mla::MlaTuning& t) {
    const auto cfg = plan(t);
    Buffer ws(std::max<std::size_t>(cfg.ws_bytes, 256), Device::cuda());
    dout_.poison();
    dlse_.poison();
    cuda::mla::run(device_args(), Workspace{ws.data(), ws.bytes()}, {}, t);
    return {dout_.download(out_h_), dlse_.download(lse_h_)};
  }

  // Two launches with tuning t: both checked against the oracle as the file header says (`what` names the
  // variant in messages); inf_lse also asks -inf lse exactly where the fp64 oracle has it. Returns the first.
  MlaRun check(const cuda::mla::MlaTuning& t, const std::string& what = "", bool inf_lse = false) {
    const MlaRun r0 = run(t), r1 = run(t);
    const std::vector<double> ref = rows_as_doubles(out64_, 1, total_q_);
    const double tol = tolerance_by_rule(rel_l2(rows_as_doubles(out32_, 1, total_q_), ref), DType::bf16);
    const double err = rel_l2(rows_as_doubles(r0.out, 1, total_q_), ref);
    EXPECT_LE(err, tol) << "out rel_l2 " << err << " tolerance " << tol << what;
    const std::vector<double> lref = rows_as_doubles(lse64_, 1, total_q_);
    const double tol_lse = 2 * rel_l2(rows_as_doubles(lse32_, 1, total_q_), lref) + 1e-5;
    const double err_lse = rel_l2(rows_as_doubles(r0.lse, 1, total_q_), lref);
    EXPECT_LE(err_lse, tol_lse) << "lse rel_l2 " << err_lse << what;
    if (inf_lse)
      for (int64_t i = s_.h_q; i < lse64_.numel(); ++i)
        EXPECT_EQ(std::isinf(lse64_.get(i)), std::isinf(r0.lse.get(i))) << "lse element " << i << what;
    EXPECT_TRUE(same_bytes(r0.out, r1.out) && same_bytes(r0.lse, r1.lse)) << "two runs differ" << what;
    const uint8_t* row0 = r0.out.bytes.data();
    EXPECT_TRUE(std::all_of(row0, row0 + size_t(s_.h_q) * 512 * 2, [](uint8_t x) { return x == 0xff; }))
        << "row outside the batch written" << what;
    return r0;
  }

 private:
  MlaAttentionArgs args(const TensorView& n, const TensorView& rr, const TensorView& k, const TensorView& p,
                        const TensorView& l, const TensorView& c, const TensorView& o, const TensorView& lse) const {
    MlaAttentionArgs a{
        .q_nope = n, .q_rope = rr, .kv_cache = k, .page_table = p, .cache_seqlens = l, .cu_seqlens_q = c, .out = o};
    a.lse = lse;
    a.max_seqlen_q = max_q_;
    a.softmax_scale = 0.1352337f;
    a.causal = s_.causal;
    a.window_left = s_.window_left;
    a.softcap = s_.softcap;
    a.deterministic = s_.deterministic;
    return a;
  }

  MlaBatchSpec s_;
  int total_q_ = 1, max_q_ = 0;  // one row before the batch
  HostTensor qn_, qr_, kv_, pt_, sl_, cu_, out64_, lse64_, out32_, lse32_, out_h_, lse_h_;
  DeviceTensor dqn_, dqr_, dkv_, dpt_, dsl_, dcu_, dout_, dlse_;
};

}  // namespace attnserve::test
