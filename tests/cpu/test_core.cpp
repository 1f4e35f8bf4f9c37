// Core types: numeric conversions, TensorView, argument checks, DLPack, the FP8 cache layouts.
#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include "attnserve/cache_formats.h"
#include "attnserve/runtime.h"
#include "common/test_util.h"

using namespace attnserve;
using namespace attnserve::test;

TEST(Numeric, Bf16RoundTripAndRounding) {
  auto g = rng_for_test();
  std::uniform_real_distribution<float> d(-1000.f, 1000.f);
  for (int i = 0; i < 10000; ++i) {
    float x = d(g);
    float y = to_float(to_bf16(x));
    EXPECT_LE(std::fabs(x - y), std::fabs(x) / 256.f + 1e-30f);
    EXPECT_EQ(to_bf16(y).bits, to_bf16(x).bits);  // idempotent
  }
  EXPECT_EQ(to_bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(to_bf16(bits_f32(0x3f808000u)).bits, 0x3f80);  // tie to even (down)
  EXPECT_EQ(to_bf16(bits_f32(0x3f818000u)).bits, 0x3f82);  // tie to even (up)
}

TEST(Numeric, F16MatchesExhaustiveDecode) {
  // Every finite f16 value decodes and re-encodes to itself.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    f16_t h{uint16_t(b)};
    float f = to_float(h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(to_f16(f).bits, h.bits) << b;
  }
  EXPECT_FLOAT_EQ(to_float(to_f16(0.1f)), 0.0999755859375f);
}

TEST(Numeric, Fp8E4m3AllCodesRoundTrip) {
  for (uint32_t b = 0; b < 256; ++b) {
    fp8_e4m3_t x{uint8_t(b)};
    float f = to_float(x);
    if (std::isnan(f)) continue;
    if (f == 0.f) continue;  // +-0 both fine
    EXPECT_EQ(to_fp8_e4m3(f).bits, x.bits) << b;
  }
  EXPECT_FLOAT_EQ(to_float(fp8_e4m3_t{0x7e}), 448.f);
  EXPECT_EQ(to_fp8_e4m3(1e6f).bits, 0x7e);  // saturates
  EXPECT_EQ(to_fp8_e4m3(-1e6f).bits, 0xfe);
  EXPECT_FLOAT_EQ(to_float(to_fp8_e4m3(0.005859375f)), 0.005859375f);  // subnormal 3 * 2^-9
  EXPECT_FLOAT_EQ(to_float(to_fp8_e4m3(0.0029296875f)), 0.00390625f);  // 1.5 * 2^-9 ties to even
  EXPECT_FLOAT_EQ(to_float(to_fp8_e4m3(0.0029296875f)), 0.00390625f);  // 1.5 * 2^-9 ties to even
}

TEST(Numeric, Fp8RelativeErrorBound) {
  auto g = rng_for_test();
  std::uniform_real_distribution<float> d(-448.f, 448.f);
  for (int i = 0; i < 20000; ++i) {
    float x = d(g);
    if (std::fabs(x) < 0.015625f) continue;
    EXPECT_LE(std::fabs(to_float(to_fp8_e4m3(x)) - x), std::fabs(x) / 16.f + 1e-6f) << x;
  }
}

TEST(Numeric, Pow2Scale) {
  EXPECT_FLOAT_EQ(fp8_pow2_scale(448.f), 1.f);
  EXPECT_FLOAT_EQ(fp8_pow2_scale(449.f), 2.f);
  EXPECT_FLOAT_EQ(fp8_pow2_scale(0.f), fp8_pow2_scale(1e-4f));  // floor: finite and nonzero
  EXPECT_GT(fp8_pow2_scale(0.f), 0.f);
  for (float a : {0.3f, 7.f, 1000.f, 1e-3f}) {
    float s = fp8_pow2_scale(a);
    int e;
    EXPECT_FLOAT_EQ(std::frexp(s, &e), 0.5f);  // a power of two
    EXPECT_LE(a / s, 448.f);
    EXPECT_GT(a / s, 224.f);  // smallest such power
  }
}

TEST(CacheFormats, Fp8MlaTokenRoundTrip) {
  auto g = rng_for_test();
  std::normal_distribution<float> d(0.f, 2.f);
  std::vector<float> nope(512), rope(64), back(576);
  std::vector<uint8_t> bytes(656);
  for (float& x : nope) x = d(g);
  for (float& x : rope) x = d(g);
  for (int i = 0; i < 128; ++i) nope[128 + i] = 0.f;  // one all-zero tile: scale stays finite
  encode_fp8_mla_token(nope.data(), rope.data(), bytes.data());
  decode_fp8_mla_token(bytes.data(), back.data());
  for (int t = 0; t < 4; ++t) {
    float scale;
    std::memcpy(&scale, bytes.data() + 512 + 4 * t, 4);
    EXPECT_TRUE(std::isfinite(scale) && scale > 0.f);
  }
  for (int i = 0; i < 512; ++i) {
    float amax = 0;
    for (int j = 0; j < 128; ++j) amax = std::fmax(amax, std::fabs(nope[(i / 128) * 128 + j]));
    // e4m3 relative step 2^-3 (half-ulp 2^-4); subnormal floor is scale * 2^-10.
    float tol = std::fabs(nope[i]) / 16.f + fp8_pow2_scale(amax) * std::ldexp(1.f, -10);
    EXPECT_LE(std::fabs(back[i] - nope[i]), tol) << i;
  }
  for (int i = 0; i < 64; ++i) EXPECT_EQ(back[512 + i], to_float(to_bf16(rope[i])));
}

TEST(CacheFormats, IndexerKeyOffsets) {
  EXPECT_EQ(IndexerKeyLayout::bytes_per_page(64), 64u * 132u);
  EXPECT_EQ(IndexerKeyLayout::key_offset(0, 64), 0u);
  EXPECT_EQ(IndexerKeyLayout::key_offset(65, 64), 64u * 132u + 128u);
  EXPECT_EQ(IndexerKeyLayout::scale_offset(65, 64), 64u * 132u + 64u * 128u + 4u);
  EXPECT_EQ(IndexerKeyLayout::scale_offset(3, 1), 3u * 132u + 128u);
}

TEST(TensorView, ShapesSlicesAndChecks) {
  std::vector<float> buf(2 * 3 * 4);
  auto t = TensorView::contiguous(buf.data(), DType::f32, {2, 3, 4});
  EXPECT_EQ(t.numel(), 24);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.strides[0], 12);
  auto s = t.slice(1, 1, 3);
  EXPECT_EQ(s.size(1), 2);
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(static_cast<float*>(s.data), buf.data() + 4);
  auto r = t.reshape({6, -1});
  EXPECT_EQ(r.size(1), 4);
  auto sel = t.select(0, 1);
  EXPECT_EQ(sel.ndim, 2);
  EXPECT_EQ(static_cast<float*>(sel.data), buf.data() + 12);

  EXPECT_NO_THROW(check_tensor("op", "q", t, {DType::f32}, {2, -1, 4}));
  try {
    check_tensor("paged_attention", "q", t, {DType::bf16, DType::f16}, {2, 3, 8});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("'q'"), std::string::npos) << m;
    EXPECT_NE(m.find("f32"), std::string::npos) << m;
  }
  try {
    check_tensor("paged_attention", "q", t, {DType::f32}, {2, 3, 8});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[2, 3, 4]"), std::string::npos) << m;  // actual
    EXPECT_NE(m.find("[2, 3, 8]"), std::string::npos) << m;  // expected
    EXPECT_GT(e.line(), 0);
  }
  EXPECT_THROW(check_tensor("op", "missing", TensorView{}, {DType::f32}, {1}), Error);
  EXPECT_NO_THROW(check_optional_tensor("op", "lse", TensorView{}, {DType::f32}, {1}));
  EXPECT_THROW(narrow_i32(int64_t(1) << 40, "stride"), Error);
  EXPECT_THROW(t.reshape({5, 5}), Error);
}

TEST(DLPack, RoundTrip) {
  std::vector<uint16_t> buf(6);
  auto t = TensorView::contiguous(buf.data(), DType::bf16, {2, 3});
  DLTensor dl{};
  to_dlpack(t, dl);
  EXPECT_EQ(dl.dtype.code, kDLBfloat);
  auto back = from_dlpack(dl);
  EXPECT_EQ(back.dtype, DType::bf16);
  EXPECT_EQ(back.shape_string(), "[2, 3]");
  EXPECT_EQ(back.data, t.data);
  auto as_fp8 = TensorView::contiguous(buf.data(), DType::fp8_e4m3, {12});
  to_dlpack(as_fp8, dl);
  EXPECT_EQ(from_dlpack(dl, DType::fp8_e4m3).dtype, DType::fp8_e4m3);
  dl.dtype = DLDataType{kDLComplex, 64, 1};
  EXPECT_THROW(from_dlpack(dl), Error);
}

TEST(Runtime, HostBufferAndCopy) {
  Buffer a(64, Device::cpu()), b(64, Device::cpu());
  auto va = a.view(DType::i32, {16}), vb = b.view(DType::i32, {16});
  for (int i = 0; i < 16; ++i) va.ptr<int32_t>()[i] = i * 7;
  copy_async(vb, va);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(vb.ptr<int32_t>()[i], i * 7);
  EXPECT_THROW(a.view(DType::i32, {17}), Error);
  EXPECT_FALSE(cuda_available() && false);
  if (!cuda_available()) EXPECT_THROW(Buffer(16, Device::cuda(0)), Error);
}
