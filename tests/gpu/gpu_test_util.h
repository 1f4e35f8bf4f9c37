// GPU test helpers: device copies of host tensors, poisoning on the device, bit comparisons, and
// the skip when no GPU is present (the suite runs only on the device machine, scripts/gpu_check.sh).
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "attnserve/runtime.h"
#include "common/test_util.h"

namespace attnserve::test {

#define ATTNSERVE_REQUIRE_GPU()                                   \
  do {                                                            \
    if (!::attnserve::cuda_available()) GTEST_SKIP() << "no GPU"; \
  } while (0)

// A device tensor mirroring a host tensor (same shape, dtype, strides: contiguous).
struct DeviceTensor {
  Buffer buf;
  TensorView view;
  DeviceTensor() = default;
  explicit DeviceTensor(const HostTensor& h) : buf(h.bytes.size(), Device::cuda()) {
    view = h.view;
    view.data = buf.data();
    view.device = Device::cuda();
    upload(h);
  }
  // A device view with the same strides as `h.view` but pointing into this buffer.
  void upload(const HostTensor& h) {
    TensorView src = TensorView::contiguous(const_cast<uint8_t*>(h.bytes.data()), DType::u8, {int64_t(h.bytes.size())});
    TensorView dst = TensorView::contiguous(buf.data(), DType::u8, {int64_t(h.bytes.size())}, Device::cuda());
    copy_async(dst, src);
    stream_synchronize({});
  }
  HostTensor download(const HostTensor& like) const {
    HostTensor h = like;
    TensorView dst = TensorView::contiguous(h.bytes.data(), DType::u8, {int64_t(h.bytes.size())});
    TensorView src = TensorView::contiguous(buf.data(), DType::u8, {int64_t(h.bytes.size())}, Device::cuda());
    copy_async(dst, src);
    stream_synchronize({});
    return h;
  }
  void poison() {
    memset_async(TensorView::contiguous(buf.data(), DType::u8, {int64_t(buf.bytes())}, Device::cuda()), 0xff);
  }
};

inline bool same_bytes(const HostTensor& a, const HostTensor& b) {
  return a.bytes.size() == b.bytes.size() && std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0;
}

// Index of the first differing byte, or -1.
inline int64_t first_diff(const HostTensor& a, const HostTensor& b) {
  const size_t n = std::min(a.bytes.size(), b.bytes.size());
  for (size_t i = 0; i < n; ++i)
    if (a.bytes[i] != b.bytes[i]) return int64_t(i);
  return a.bytes.size() == b.bytes.size() ? -1 : int64_t(n);
}

// Elements of `t` as doubles, only over the given rows of a [rows, ...] tensor.
inline std::vector<double> rows_as_doubles(const HostTensor& t, int64_t row_begin, int64_t row_end) {
  const int64_t per_row = t.view.ndim ? t.numel() / std::max<int64_t>(t.view.shape[0], 1) : 0;
  std::vector<double> v;
  v.reserve(size_t((row_end - row_begin) * per_row));
  for (int64_t i = row_begin * per_row; i < row_end * per_row; ++i) v.push_back(t.get(i));
  return v;
}

inline int count_nonfinite(const std::vector<double>& v) {
  int n = 0;
  for (double x : v) n += std::isnan(x) ? 1 : 0;
  return n;
}

}  // namespace attnserve::test
