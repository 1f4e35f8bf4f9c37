// Arrays on the run's device that the demo fills from the host (the model stand-in's activations,
// the query rows' slots) and reads back for the oracle. Grow-only; on the CPU it is host memory all
// the same, so both devices run the same code.
#pragma once
#include <cstring>
#include <initializer_list>
#include <vector>

#include "attnserve/runtime.h"

namespace demo {

class DeviceArray {
 public:
  explicit DeviceArray(attnserve::Device device) : device_(device) {}

  // A view of `shape` over the array, grown when needed (views from before a growth dangle: take
  // them again each step).
  attnserve::TensorView view(attnserve::DType t, std::initializer_list<int64_t> shape) {
    std::size_t n = attnserve::dtype_size(t);
    for (int64_t s : shape) n *= std::size_t(s);
    if (n > buf_.bytes()) {
      attnserve::stream_synchronize({});  // work still reading the old buffer
      buf_ = attnserve::Buffer(n + n / 2 + 256, device_);
    }
    return attnserve::TensorView::contiguous(buf_.data(), t, shape, device_);
  }

  // Copies host data (as many elements as the shape holds) into the array.
  template <typename T>
  attnserve::TensorView upload(const std::vector<T>& host, attnserve::DType t, std::initializer_list<int64_t> shape) {
    const attnserve::TensorView dst = view(t, shape);
    if (dst.numel() > 0) {
      attnserve::copy_async(dst, attnserve::TensorView::contiguous(const_cast<T*>(host.data()), t, shape));
    }
    return dst;
  }

 private:
  attnserve::Device device_;
  attnserve::Buffer buf_;
};

// A contiguous view's contents on the host (waits for the device).
template <typename T>
std::vector<T> download(const attnserve::TensorView& v) {
  std::vector<T> out(std::size_t(v.numel()));
  if (out.empty()) return out;
  attnserve::copy_async(attnserve::TensorView::contiguous(out.data(), v.dtype, v.shape.data(), v.ndim), v);
  attnserve::stream_synchronize({});
  return out;
}

}  // namespace demo
