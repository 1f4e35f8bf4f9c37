#include "attnserve/runtime.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "cuda_hooks.h"

namespace attnserve {

#ifdef ATTNSERVE_WITH_CUDA
static constexpr bool kBuiltWithCuda = true;
#else
static constexpr bool kBuiltWithCuda = false;
#endif

static void require_cuda(const char* what) {
  ATTNSERVE_CHECK(kBuiltWithCuda, what, ": attnserve was built without CUDA (configure with -DATTNSERVE_CUDA=ON)");
}

DeviceCaps DeviceCaps::cpu() { return DeviceCaps{1, 48 * 1024, 0}; }

DeviceCaps query_device_caps(Device d) {
  if (d.is_cpu()) return DeviceCaps::cpu();
  require_cuda("query_device_caps");
  DeviceCaps c;
#ifdef ATTNSERVE_WITH_CUDA
  cuda_rt::device_caps(d.index, &c.num_sms, &c.smem_per_block, &c.arch);
#endif
  return c;
}

bool cuda_available() {
#ifdef ATTNSERVE_WITH_CUDA
  static const bool available = cuda_rt::device_count() > 0;  // fixed for the process
  return available;
#else
  return false;
#endif
}

Buffer::Buffer(std::size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    data_ = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    ATTNSERVE_CHECK(data_ != nullptr, "Buffer: out of host memory allocating ", bytes, " bytes");
  } else {
    require_cuda("Buffer");
#ifdef ATTNSERVE_WITH_CUDA
    data_ = cuda_rt::device_malloc(bytes, device.index);
#endif
  }
}

Buffer::~Buffer() {
  if (!data_) return;
  if (device_.is_cpu()) {
    std::free(data_);
  } else {
#ifdef ATTNSERVE_WITH_CUDA
    try {
      cuda_rt::device_free(data_, device_.index);
    } catch (...) {
    }
#endif
  }
}

Buffer::Buffer(Buffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), device_(o.device_) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    Buffer tmp(std::move(*this));
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    device_ = o.device_;
  }
  return *this;
}

TensorView Buffer::view(DType dtype, std::initializer_list<int64_t> shape) const {
  TensorView t = TensorView::contiguous(data_, dtype, shape, device_);
  ATTNSERVE_CHECK(t.nbytes() <= bytes_, "Buffer::view: ", t.shape_string(), " of ", dtype_name(dtype), " needs ",
                  t.nbytes(), " bytes, buffer has ", bytes_);
  return t;
}

void copy_async(const TensorView& dst, const TensorView& src, Stream stream) {
  ATTNSERVE_CHECK(dst.dtype == src.dtype, "copy_async: dtype ", dtype_name(src.dtype), " -> ", dtype_name(dst.dtype));
  ATTNSERVE_CHECK(dst.numel() == src.numel(), "copy_async: ", src.shape_string(), " -> ", dst.shape_string());
  ATTNSERVE_CHECK(dst.is_contiguous() && src.is_contiguous(), "copy_async: views must be contiguous");
  if (dst.nbytes() == 0) return;
  if (dst.device.is_cpu() && src.device.is_cpu()) {
    std::memmove(dst.data, src.data, dst.nbytes());
    return;
  }
  require_cuda("copy_async");
#ifdef ATTNSERVE_WITH_CUDA
  cuda_rt::memcpy_async(dst.data, src.data, dst.nbytes(), stream.handle);
#else
  (void)stream;
#endif
}

void memset_async(const TensorView& dst, int byte_value, Stream stream) {
  ATTNSERVE_CHECK(dst.is_contiguous(), "memset_async: view must be contiguous");
  if (dst.nbytes() == 0) return;
  if (dst.device.is_cpu()) {
    std::memset(dst.data, byte_value, dst.nbytes());
    return;
  }
  require_cuda("memset_async");
#ifdef ATTNSERVE_WITH_CUDA
  cuda_rt::memset_async(dst.data, byte_value, dst.nbytes(), stream.handle);
#else
  (void)stream;
#endif
}

void stream_synchronize(Stream stream) {
#ifdef ATTNSERVE_WITH_CUDA
  // A CUDA build on a machine without a GPU (CI) runs CPU work only: nothing to wait for.
  if (cuda_available()) cuda_rt::stream_synchronize(stream.handle);
#else
  (void)stream;
#endif
}

}  // namespace attnserve
