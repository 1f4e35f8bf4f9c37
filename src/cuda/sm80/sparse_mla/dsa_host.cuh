// Host-side helpers of the DeepSeek sparse-attention launchers: stream handle, device guard,
// alignment requirements (checked with messages that name the op and the argument), launch checks.
// Own copy (namespace attnserve::cuda::dsa) so it can later be merged into src/cuda/common/.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string_view>

#include "attnserve/runtime.h"
#include "cuda/common/check.cuh"

namespace attnserve::cuda::dsa {

inline cudaStream_t to_cuda(Stream s) { return static_cast<cudaStream_t>(s.handle); }

// Makes the tensors' device current for the launch, restores the previous one afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device d) {
    ATTNSERVE_CUDA_CHECK(cudaGetDevice(&prev_));
    if (prev_ != d.index) ATTNSERVE_CUDA_CHECK(cudaSetDevice(d.index));
    cur_ = d.index;
  }
  ~DeviceGuard() {
    if (prev_ != cur_) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0, cur_ = 0;
};

inline bool aligned_to(const void* p, std::size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// True when the base and every stride but the last (which must be 1 or a size-1 dim) keep
// `bytes`-aligned addresses at the start of every last-dim row.
inline bool rows_aligned(const TensorView& t, std::size_t bytes) {
  if (!aligned_to(t.data, bytes)) return false;
  const std::size_t esize = dtype_size(t.dtype);
  for (int d = 0; d + 1 < t.ndim; ++d)
    if (t.shape[std::size_t(d)] > 1 && (std::size_t(t.strides[std::size_t(d)]) * esize) % bytes != 0) return false;
  return true;
}

inline void require_rows_aligned(std::string_view op, std::string_view arg, const TensorView& t, std::size_t bytes) {
  ATTNSERVE_CHECK(rows_aligned(t, bytes), op, ": argument '", arg, "' needs a ", bytes,
                  "-byte aligned base and row strides that are multiples of ", bytes, " bytes on CUDA (shape ",
                  t.shape_string(), ")");
}

inline int max_dynamic_smem(int device) {
  int v = 0;
  ATTNSERVE_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return v;
}

inline int num_sms(int device) {
  int v = 0;
  ATTNSERVE_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device));
  return v;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace attnserve::cuda::dsa
