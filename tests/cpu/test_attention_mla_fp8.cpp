// CPU oracle of MLA (absorbed) over an FP8-656 cache: each token is dequantized (decode_fp8_mla_token)
// and then the same math as a cache holding the dequantized values, so out and lse equal the bf16 / f32
// / f64 cache path bit for bit; FP8 zero tiles; and the argument errors of the FP8 cache.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "attnserve/cache_formats.h"
#include "cpu/attention_cases.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

PagedSpec fp8_spec(std::vector<int> q_lens, std::vector<int> k_lens, int page_size, DType dtype) {
  PagedSpec s;
  s.q_lens = std::move(q_lens);
  s.k_lens = std::move(k_lens);
  s.page_size = page_size;
  s.h_q = 16;
  s.h_kv = 1;
  s.d = 576;
  s.d_v = 512;
  s.softmax_scale = 0.1352337f;
  s.dtype = dtype;
  return s;
}

// Encodes every slot of the case's cache into FP8-656 (tile t of every `zero_every`-th token all zeros)
// and writes the dequantized values back into the case's cache, so both describe the same keys.
HostTensor to_fp8_656(PagedCase& c, int zero_every) {
  TensorView k = c.args.k_cache;
  const int64_t pages = k.size(0), ps = k.size(1);
  HostTensor fp8(DType::u8, {pages, ps, 1, 656});
  std::vector<float> nope(512), rope(64), back(576);
  for (int64_t pg = 0; pg < pages; ++pg)
    for (int64_t s = 0; s < ps; ++s) {
      const int64_t slot = pg * ps + s;
      for (int e = 0; e < 576; ++e) {
        const float x = cpu::load_as_float(k.data, k.dtype, cpu::offset_of(k, pg, s, 0, e));
        (e < 512 ? nope[size_t(e)] : rope[size_t(e - 512)]) = std::isnan(x) ? 0.f : x;
      }
      if (zero_every > 0 && slot % zero_every == 0)
        for (int e = 0; e < 128; ++e) nope[size_t(128 * (slot % 4) + e)] = 0.f;  // a zero tile
      uint8_t* dst = fp8.ptr<uint8_t>() + slot * 656;
      encode_fp8_mla_token(nope.data(), rope.data(), dst);
      decode_fp8_mla_token(dst, back.data());
      for (int e = 0; e < 576; ++e)
        cpu::store_from_float(k.data, k.dtype, cpu::offset_of(k, pg, s, 0, e), back[size_t(e)]);
    }
  return fp8;
}

void expect_same_as_dequantized(const PagedSpec& s, std::mt19937_64& g, const std::string& label) {
  SCOPED_TRACE(label + " [" + std::string(dtype_name(s.dtype)) + "]");
  PagedCase c = make_paged_case(s, g);
  HostTensor fp8 = to_fp8_656(c, 5);
  const bool fp64 = s.dtype == DType::f64;
  MlaAttentionArgs m = mla_args_of(c);
  poison(c.out);
  poison(c.lse);
  if (fp64) cpu::mla_attention(m, true);
  else mla_attention(m);
  const std::vector<uint8_t> out = c.out.bytes, lse = c.lse.bytes;
  m.kv_cache = fp8.view;
  poison(c.out);
  poison(c.lse);
  if (fp64) cpu::mla_attention(m, true);
  else mla_attention(m);
  EXPECT_EQ(c.out.bytes, out) << "out differs from the dequantized cache's";
  EXPECT_EQ(c.lse.bytes, lse) << "lse differs from the dequantized cache's";
}

void expect_error(const std::function<void()>& f, std::initializer_list<std::string> needles,
                  const std::string& label) {
  try {
    f();
    ADD_FAILURE() << label << ": expected an attnserve::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles)
      EXPECT_NE(msg.find(n), std::string::npos) << label << ": '" << n << "' not in: " << msg;
  }
}

}  // namespace

TEST(AttentionMlaFp8, EqualsDequantizedCache) {
  auto g = rng_for_test();
  for (DType t : {DType::f64, DType::f32, DType::bf16}) {
    expect_same_as_dequantized(fp8_spec({1, 1, 1}, {1, 70, 129}, 64, t), g, "decode page 64");
    expect_same_as_dequantized(fp8_spec({2, 1}, {33, 20}, 1, t), g, "s_q 2 page 1");
    expect_same_as_dequantized(fp8_spec({2, 5, 1}, {0, 40, 0}, 16, t), g, "zero_len_kv");
  }
}

TEST(AttentionMlaFp8, WindowSoftcap) {
  auto g = rng_for_test();
  PagedSpec s = fp8_spec({4, 1}, {30, 25}, 8, DType::f32);
  s.window_left = 6;
  s.softcap = 2.f;
  expect_same_as_dequantized(s, g, "window softcap");
}

TEST(AttentionMlaFp8, ZeroTokenGivesZeroScores) {
  // An all-zero token (every tile zero: finite power-of-two scales) scores 0 and adds nothing to P V.
  std::vector<float> zeros(576, 0.f), back(576, 1.f);
  uint8_t tok[656];
  encode_fp8_mla_token(zeros.data(), zeros.data() + 512, tok);
  decode_fp8_mla_token(tok, back.data());
  for (float x : back) EXPECT_EQ(x, 0.f);
  for (int t = 0; t < 4; ++t) {
    float scale;
    std::memcpy(&scale, tok + 512 + 4 * t, 4);
    EXPECT_TRUE(std::isfinite(scale) && scale > 0.f);
  }
}

TEST(AttentionMlaFp8, ArgumentErrors) {
  auto g = rng_for_test();
  PagedCase c = make_paged_case(fp8_spec({1, 2}, {10, 5}, 4, DType::f32), g);
  HostTensor fp8 = to_fp8_656(c, 0);
  MlaAttentionArgs ok = mla_args_of(c);
  ok.kv_cache = fp8.view;
  EXPECT_NO_THROW(mla_attention(ok));
  auto expect_mla_error = [&](const std::function<void(MlaAttentionArgs&)>& mutate,
                              std::initializer_list<std::string> needles, const std::string& label) {
    MlaAttentionArgs m = ok;
    mutate(m);
    expect_error([&] { mla_attention(m); }, needles, "mla fp8 " + label);
  };
  HostTensor wide(DType::u8, {fp8.view.size(0), 4, 1, 576});
  expect_mla_error([&](MlaAttentionArgs& m) { m.kv_cache = wide.view; }, {"'kv_cache'", "656"}, "u8 rows of 576");
  expect_mla_error([](MlaAttentionArgs& m) { m.kv_cache = m.kv_cache.slice(3, 0, 640); }, {"'kv_cache'", "656"},
                   "u8 rows of 640");
  expect_mla_error([](MlaAttentionArgs& m) { m.q_nope = m.q_nope.slice(2, 0, 256); }, {"FP8-656", "d_v 256"},
                   "d_v 256");
  expect_mla_error([](MlaAttentionArgs& m) { m.q_rope = m.q_rope.slice(2, 0, 32); }, {"FP8-656", "d_rope 32"},
                   "d_rope 32");
  HostTensor two(DType::u8, {fp8.view.size(0), 4, 2, 656});
  expect_mla_error([&](MlaAttentionArgs& m) { m.kv_cache = two.view; }, {"'kv_cache'", "[*, *, 1, 656]"},
                   "two kv heads");
  expect_mla_error([](MlaAttentionArgs& m) { m.kv_cache = m.kv_cache.with_dtype(DType::fp8_e4m3); }, {"'kv_cache'"},
                   "fp8_e4m3 dtype");
  expect_mla_error([](MlaAttentionArgs& m) { m.page_table.ptr<int32_t>()[0] = 12345; },
                   {"'page_table'", "request 0", "position 0"}, "page id");
}
