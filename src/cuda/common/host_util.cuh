// Host-side helpers shared by the CUDA launchers: stream handles, alignment checks, grid sizing.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "attnserve/runtime.h"
#include "check.cuh"
#include "plan_util.h"  // ceil_div, heuristic_splits

namespace attnserve::cuda {

inline cudaStream_t to_cuda(Stream s) { return static_cast<cudaStream_t>(s.handle); }

inline bool aligned_to(const void* p, std::size_t bytes) { return (reinterpret_cast<uintptr_t>(p) % bytes) == 0; }

// True when the view's base and every non-last stride are multiples of `elems` elements and the
// last dim is contiguous: then `elems`-wide vector accesses along the last dim are aligned.
inline bool vector_ok(const TensorView& t, int elems) {
  if (t.ndim == 0) return true;
  if (t.size(-1) % elems != 0) return false;
  if (t.size(-1) > 1 && t.stride(-1) != 1) return false;
  if (!aligned_to(t.data, std::size_t(elems) * dtype_size(t.dtype))) return false;
  for (int d = 0; d + 1 < t.ndim; ++d)
    if (t.shape[d] > 1 && t.strides[d] % elems != 0) return false;
  return true;
}

// Requires the last dim contiguous and 16-byte aligned rows (cp.async / vector loads).
inline void require_rows16(std::string_view op, std::string_view arg, const TensorView& t) {
  int elems = int(16 / dtype_size(t.dtype));
  ATTNSERVE_CHECK(vector_ok(t, elems), op, ": ", arg,
                  " must have a contiguous last dim, a 16-byte aligned base and "
                  "strides that are multiples of 16 bytes on CUDA (shape ",
                  t.shape_string(), ")");
}

// True when the base and every stride but the last keep `bytes`-aligned addresses at the start of
// every last-dim row (the last dim itself may have any length).
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

// The current device's capabilities (SM count, shared memory per block, arch), queried once per device.
const DeviceCaps& current_device_caps();

// Grid for a grid-stride loop over `work` items with `threads` per block.
inline unsigned grid_for(int64_t work, int threads) {
  int64_t blocks = (work + threads - 1) / threads;
  int64_t cap = int64_t(current_device_caps().num_sms) * 32;
  if (blocks > cap) blocks = cap;
  return unsigned(blocks < 1 ? 1 : blocks);
}

}  // namespace attnserve::cuda
