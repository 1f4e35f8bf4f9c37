// Helpers of the DeepSeek sparse-attention GPU tests (indexer, top-k, sparse MLA, FP8 quantization):
// device mirrors of host views (any strides: the view's byte span is mirrored), device-side poisoning,
// bit comparisons. Run on the device machine (scripts/gpu_check.sh); skipped without a GPU.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attnserve/runtime.h"
#include "common/test_util.h"

namespace attnserve::test::dsa_gpu {

#define DSA_REQUIRE_GPU()                                                 \
  do {                                                                    \
    if (!::attnserve::cuda_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

inline TensorView bytes_view(const void* data, std::size_t n, Device d) {
  return TensorView::contiguous(const_cast<void*>(data), DType::u8, {int64_t(n)}, d);
}

// Bytes from a view's first element to one past its last (non-negative strides).
inline std::size_t span_bytes(const TensorView& v) {
  if (v.empty_view()) return 0;
  int64_t last = 0;
  for (int d = 0; d < v.ndim; ++d) {
    if (v.shape[std::size_t(d)] == 0) return 0;
    last += (v.shape[std::size_t(d)] - 1) * v.strides[std::size_t(d)];
  }
  return std::size_t(last + 1) * dtype_size(v.dtype);
}

// A device copy of a host view: same dtype, shape and strides, its byte span copied. Empty views
// stay empty (an optional argument left out).
struct DeviceMirror {
  Buffer buf;
  TensorView view;
  std::size_t span = 0;
  DeviceMirror() = default;
  explicit DeviceMirror(const TensorView& h, Stream s = {}) {
    if (h.empty_view()) return;
    span = span_bytes(h);
    buf = Buffer(std::max<std::size_t>(span, 16), Device::cuda());
    view = h;
    view.data = buf.data();
    view.device = Device::cuda();
    upload(h, s);
  }
  void upload(const TensorView& h, Stream s = {}) {
    if (span == 0) return;
    copy_async(bytes_view(buf.data(), span, Device::cuda()), bytes_view(h.data, span, Device::cpu()), s);
    stream_synchronize(s);
  }
  // Copies the device bytes over the host view's span.
  void download(const TensorView& h, Stream s = {}) const {
    if (span == 0) return;
    copy_async(bytes_view(h.data, span, Device::cpu()), bytes_view(buf.data(), span, Device::cuda()), s);
    stream_synchronize(s);
  }
  std::vector<uint8_t> bytes(Stream s = {}) const {
    std::vector<uint8_t> v(span);
    if (span) {
      copy_async(bytes_view(v.data(), span, Device::cpu()), bytes_view(buf.data(), span, Device::cuda()), s);
      stream_synchronize(s);
    }
    return v;
  }
  // Floats: 0xff bytes (NaN); integers: 0x7f bytes (never a legal slot, position or -1).
  void poison(Stream s = {}) {
    if (span) memset_async(bytes_view(buf.data(), span, Device::cuda()), is_float(view.dtype) ? 0xff : 0x7f, s);
  }
};

// The larger of two same-precision references' errors: the tolerance rule's base.
inline double same_precision_error(const std::vector<double>& a, const std::vector<double>& b,
                                   const std::vector<double>& ref) {
  return std::max(rel_l2(a, ref), rel_l2(b, ref));
}

// Positions where ref is not finite must hold exactly the same class in got (and the reverse).
inline int64_t nonfinite_mismatches(const std::vector<double>& got, const std::vector<double>& ref) {
  int64_t bad = 0;
  for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
    if (std::isfinite(ref[i]) && std::isfinite(got[i])) continue;
    if (std::isnan(ref[i]) && std::isnan(got[i])) continue;
    if (ref[i] != got[i]) ++bad;
  }
  return bad;
}

inline int64_t count_nan(const std::vector<double>& v) {
  return std::count_if(v.begin(), v.end(), [](double x) { return std::isnan(x); });
}

}  // namespace attnserve::test::dsa_gpu
