// quantize_fp8_groups: per 1 x group e4m3 quantization, power-of-two scales, round trip.
#include <gtest/gtest.h>

#include <cmath>

#include "attnserve/ops/indexer.h"
#include "common/test_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

// Smallest power of two s with max(amax, 1e-4) / s <= 448, computed independently in double.
double expected_scale(double amax) {
  const double a = std::max(amax, double(1e-4f));
  double s = std::ldexp(1.0, int(std::ceil(std::log2(a / 448.0))));
  while (a / s > 448.0) s *= 2;  // guard log2 rounding
  while (a / (s / 2) <= 448.0) s /= 2;
  return s;
}

// Random rows whose groups span many magnitudes (1e-3 .. 1e3), never zero.
HostTensor random_activations(DType dtype, int64_t rows, int64_t dim, int group, std::mt19937_64& g) {
  HostTensor x(dtype, {rows, dim});
  std::uniform_real_distribution<float> u(-1.f, 1.f), mag(-3.f, 3.f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t gi = 0; gi < dim / group; ++gi) {
      const float m = std::pow(10.f, mag(g));
      for (int64_t c = gi * group; c < (gi + 1) * group; ++c) {
        float v = u(g) * m;
        if (v == 0.f) v = m;
        x.set(r * dim + c, v);
      }
    }
  return x;
}

void check_quantized(const HostTensor& x, const HostTensor& out, const HostTensor& scales, int group) {
  const int64_t rows = x.view.size(0), dim = x.view.size(1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t gi = 0; gi < dim / group; ++gi) {
      double amax = 0;
      for (int64_t c = gi * group; c < (gi + 1) * group; ++c)
        amax = std::max(amax, std::fabs(double(x.get(r * dim + c))));
      const double scale = scales.get(r * (dim / group) + gi);
      ASSERT_EQ(scale, expected_scale(amax)) << "row " << r << " group " << gi << " amax " << amax;
      for (int64_t c = gi * group; c < (gi + 1) * group; ++c) {
        const double xv = x.get(r * dim + c), q = out.get(r * dim + c);
        ASSERT_TRUE(std::isfinite(q)) << r << "," << c;
        ASSERT_LE(std::fabs(q), 448.0);
        // Round to nearest in e4m3: relative 2^-4 for normals, half the subnormal step 2^-9 below.
        const double err = std::fabs(q * scale - xv);
        ASSERT_LE(err, std::max(std::fabs(xv) / 16.0, scale * std::ldexp(1.0, -10)) * (1 + 1e-12))
            << "x " << xv << " q " << q << " scale " << scale;
        // Nearest code: no other e4m3 value is strictly closer to x / scale.
        const double target = xv / scale;
        const int bits = out.bytes[size_t(r * dim + c)];
        for (int nb : {bits - 1, bits + 1}) {
          if (nb < 0 || nb > 255) continue;
          const double other = to_float(fp8_e4m3_t{uint8_t(nb)});
          if (!std::isfinite(other) || (nb & 0x80) != (bits & 0x80)) continue;
          ASSERT_GE(std::fabs(other - target), std::fabs(q - target)) << target;
        }
      }
    }
}

}  // namespace

TEST(QuantizeFp8, RoundTripAllInputDtypes) {
  auto g = rng_for_test();
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    for (int group : {128, 64}) {
      const int64_t rows = 37, dim = 512;
      HostTensor x = random_activations(dt, rows, dim, group, g);
      HostTensor out(DType::fp8_e4m3, {rows, dim}), scales(DType::f32, {rows, dim / group});
      poison(out);
      poison(scales);
      quantize_fp8_groups({.x = x.view, .out = out.view, .scales = scales.view, .group = group});
      SCOPED_TRACE(std::string(dtype_name(dt)) + " group " + std::to_string(group));
      check_quantized(x, out, scales, group);
    }
  }
}

TEST(QuantizeFp8, AllZeroGroupHasFiniteScale) {
  auto g = rng_for_test();
  HostTensor x = random_activations(DType::f32, 2, 256, 128, g);
  for (int c = 128; c < 256; ++c) x.set(256 + c, 0.f);  // row 1, group 1 all zero
  HostTensor out(DType::fp8_e4m3, {2, 256}), scales(DType::f32, {2, 2});
  poison(out);
  poison(scales);
  quantize_fp8_groups({.x = x.view, .out = out.view, .scales = scales.view});
  EXPECT_EQ(scales.get(3), std::ldexp(1.f, -22));  // 1e-4 / 448 rounded up to a power of two
  for (int c = 128; c < 256; ++c) EXPECT_EQ(out.get(256 + c), 0.f);
  check_quantized(x, out, scales, 128);
}

TEST(QuantizeFp8, ExactPowerOfTwoAmaxMapsTo448) {
  auto g = rng_for_test();
  HostTensor x = random_activations(DType::f32, 1, 128, 128, g);
  for (int c = 0; c < 128; ++c) x.set(c, x.get(c) * 1e-3f);  // |x| << 448 * 2^-3
  x.set(17, -448.f * 0.125f);                                // amax = 56 = 448 * 2^-3
  HostTensor out(DType::fp8_e4m3, {1, 128}), scales(DType::f32, {1, 1});
  quantize_fp8_groups({.x = x.view, .out = out.view, .scales = scales.view});
  EXPECT_EQ(scales.get(0), 0.125f);
  EXPECT_EQ(out.bytes[17], 0xfe);  // -448
}

TEST(QuantizeFp8, StridedRows) {
  auto g = rng_for_test();
  HostTensor wide = random_activations(DType::bf16, 5, 384, 128, g);
  TensorView x = wide.view.slice(1, 128, 384);  // row stride 384, 256 columns
  HostTensor out(DType::fp8_e4m3, {5, 256}), scales(DType::f32, {5, 2});
  poison(out);
  quantize_fp8_groups({.x = x, .out = out.view, .scales = scales.view});
  HostTensor packed(DType::bf16, {5, 256});
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 256; ++c) packed.set(r * 256 + c, wide.get(r * 384 + 128 + c));
  check_quantized(packed, out, scales, 128);
}

TEST(QuantizeFp8, BadArgumentsNameTheArgument) {
  HostTensor x(DType::f32, {4, 256}), out(DType::fp8_e4m3, {4, 256}), scales(DType::f32, {4, 2});
  HostTensor bad_out(DType::bf16, {4, 256}), bad_scales(DType::f32, {4, 3}), xi(DType::i32, {4, 256});
  auto expect_error = [](auto&& fn, const char* needle) {
    try {
      fn();
      ADD_FAILURE() << "no error, expected one naming " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error([&] { quantize_fp8_groups({.x = x.view, .out = bad_out.view, .scales = scales.view}); }, "'out'");
  expect_error([&] { quantize_fp8_groups({.x = x.view, .out = out.view, .scales = bad_scales.view}); }, "'scales'");
  expect_error([&] { quantize_fp8_groups({.x = xi.view, .out = out.view, .scales = scales.view}); }, "'x'");
  expect_error([&] { quantize_fp8_groups({.x = x.view, .out = out.view, .scales = scales.view, .group = 0}); },
               "'group'");
  expect_error([&] { quantize_fp8_groups({.x = x.view, .out = out.view, .scales = scales.view, .group = 96}); },
               "'group'");
}
