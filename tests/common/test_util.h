// Shared test helpers: seeded random inputs (seed printed), host tensors, poisoning, error norms.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include "attnserve/numeric.h"
#include "attnserve/tensor.h"
#include "cpu/load.h"

namespace attnserve::test {

// One seed per process: ATTNSERVE_SEED if set, else random. Printed so failures reproduce.
inline uint64_t seed() {
  static uint64_t s = [] {
    const char* e = std::getenv("ATTNSERVE_SEED");
    uint64_t v = e ? std::strtoull(e, nullptr, 10) : std::random_device{}();
    std::cout << "[attnserve] ATTNSERVE_SEED=" << v << std::endl;
    return v;
  }();
  return s;
}

// A per-test generator: the process seed mixed with the test's name, so tests are independent.
inline std::mt19937_64 rng_for_test() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  uint64_t h = seed();
  if (info) {
    for (const char* p = info->test_suite_name(); *p; ++p) h = h * 1099511628211ull ^ uint64_t(*p);
    for (const char* p = info->name(); *p; ++p) h = h * 1099511628211ull ^ uint64_t(*p);
  }
  return std::mt19937_64(h);
}

// Owning host tensor (contiguous).
struct HostTensor {
  std::vector<uint8_t> bytes;
  TensorView view;
  HostTensor() = default;
  HostTensor(DType dtype, std::initializer_list<int64_t> shape) {
    TensorView probe = TensorView::contiguous(nullptr, dtype, shape);
    bytes.assign(probe.nbytes() + 1, 0);  // +1 so empty tensors still have a data pointer
    view = TensorView::contiguous(bytes.data(), dtype, shape);
  }
  // Copies own their bytes: the view is rebound to the new storage.
  HostTensor(const HostTensor& o) : bytes(o.bytes), view(o.view) { view.data = bytes.data(); }
  HostTensor& operator=(const HostTensor& o) {
    bytes = o.bytes;
    view = o.view;
    view.data = bytes.data();
    return *this;
  }
  HostTensor(HostTensor&&) = default;  // vector moves keep their buffer
  HostTensor& operator=(HostTensor&&) = default;
  template <typename T>
  T* ptr() {
    return reinterpret_cast<T*>(bytes.data());
  }
  float get(int64_t i) const { return cpu::load_as_float(bytes.data(), view.dtype, i); }
  void set(int64_t i, float v) { cpu::store_from_float(bytes.data(), view.dtype, i, v); }
  int64_t numel() const { return view.numel(); }
};

// Uniform random values in [lo, hi) rounded to the tensor's dtype; never all zeros.
inline void fill_uniform(HostTensor& t, std::mt19937_64& g, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, d(g));
}

// Poison: floats get all-ones bytes (NaN); integers get 0x7f bytes (a huge positive value, never a
// legal -1 padding or slot), so any unwritten element shows.
inline void poison(HostTensor& t) { std::memset(t.bytes.data(), is_float(t.view.dtype) ? 0xff : 0x7f, t.bytes.size()); }

inline std::vector<double> to_doubles(const HostTensor& t) {
  std::vector<double> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = t.get(i);
  return v;
}

// ||a - ref|| / ||ref|| over finite reference entries; non-finite entries must match exactly
// (same class: -inf, +inf or NaN). Returns +inf on a mismatch of non-finite positions.
inline double rel_l2(const std::vector<double>& a, const std::vector<double>& ref) {
  EXPECT_EQ(a.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < ref.size(); ++i) {
    if (!std::isfinite(ref[i]) || !std::isfinite(a[i])) {
      bool same = (std::isnan(ref[i]) && std::isnan(a[i])) || (ref[i] == a[i]);
      if (!same) return INFINITY;
      continue;
    }
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Unit roundoff of an output dtype (half an ulp at 1.0).
inline double unit_roundoff(DType t) {
  switch (t) {
    case DType::bf16: return 1.0 / 256;
    case DType::f16: return 1.0 / 2048;
    case DType::fp8_e4m3: return 1.0 / 16;
    case DType::f32: return 1.0 / (1 << 24);
    default: return 0;
  }
}

// The tolerance rule (DESIGN.md): a kernel's error against the fp64 reference may be at most twice
// that of a same-precision reference, plus the output dtype's rounding.
inline double tolerance_by_rule(double same_precision_ref_err, DType out_dtype) {
  return 2.0 * same_precision_ref_err + unit_roundoff(out_dtype);
}

}  // namespace attnserve::test
