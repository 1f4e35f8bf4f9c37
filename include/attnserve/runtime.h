// Streams, workspaces, device capabilities, and owning device buffers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attnserve/tensor.h"

namespace attnserve {

// An opaque CUDA stream (cudaStream_t); nullptr is the legacy default stream. Ignored on the CPU.
struct Stream {
  void* handle = nullptr;
};

// Scratch memory the caller provides; ops never allocate.
struct Workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};

// What planning needs to know about a device. Passed in, never queried inside planning.
struct DeviceCaps {
  int num_sms = 1;
  std::size_t smem_per_block = 48 * 1024;
  int arch = 0;  // e.g. 80, 90; 0 for the CPU
  static DeviceCaps cpu();
};
DeviceCaps query_device_caps(Device d);  // at the edge only

bool cuda_available();  // built with CUDA and a device is present

// Owning, device-aware allocation (host memory on the CPU, cudaMalloc on CUDA).
class Buffer {
 public:
  Buffer() = default;
  Buffer(std::size_t bytes, Device device);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  TensorView view(DType dtype, std::initializer_list<int64_t> shape) const;

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_{};
};

// Copies between views of the same shape and dtype (contiguous), any devices; async on CUDA.
void copy_async(const TensorView& dst, const TensorView& src, Stream stream = {});
// Fills raw bytes (memset); async on CUDA.
void memset_async(const TensorView& dst, int byte_value, Stream stream = {});
void stream_synchronize(Stream stream);

}  // namespace attnserve
