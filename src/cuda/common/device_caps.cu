// The current CUDA device's capabilities, queried once per device (cudaGetDeviceProperties is slow)
// and shared by every launcher's selector.
#include <array>
#include <mutex>

#include "cuda/common/host_util.cuh"

namespace attnserve::cuda {

const DeviceCaps& current_device_caps() {
  static std::mutex mu;
  static std::array<DeviceCaps, 64> caps{};
  static std::array<bool, 64> have{};
  int dev = 0;
  ATTNSERVE_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (!have[size_t(dev)]) {
    caps[size_t(dev)] = query_device_caps(Device::cuda(dev));
    have[size_t(dev)] = true;
  }
  return caps[size_t(dev)];
}

}  // namespace attnserve::cuda
