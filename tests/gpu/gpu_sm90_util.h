// Skip helper for the Hopper (sm_90a) tests: they run only when the library carries the sm_90a
// kernels (ATTNSERVE_HAVE_SM90) and the device is compute capability 9.0.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "gpu_test_util.h"

namespace attnserve::test {

// Why this machine cannot run the sm_90a code, or "" when it can.
inline std::string sm90_skip_reason() {
#ifndef ATTNSERVE_HAVE_SM90
  return "built without the sm_90a kernels (ATTNSERVE_CUDA_ARCHS lacks 90)";
#else
  if (!cuda_available()) return "no GPU";
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (major != 9 || minor != 0)
    return "device is sm_" + std::to_string(major * 10 + minor) + "; the Hopper kernels need sm_90a";
  return "";
#endif
}

}  // namespace attnserve::test

#define ATTNSERVE_REQUIRE_SM90()                                    \
  do {                                                              \
    const std::string why_ = ::attnserve::test::sm90_skip_reason(); \
    if (!why_.empty()) GTEST_SKIP() << why_;                        \
  } while (0)
