// CUDA error checks: every runtime call and every launch is checked; errors become attnserve::Error.
#pragma once
#include <cuda_runtime.h>

#include "attnserve/error.h"

#define ATTNSERVE_CUDA_CHECK(expr)                                                                            \
  do {                                                                                                        \
    cudaError_t err__ = (expr);                                                                               \
    if (err__ != cudaSuccess)                                                                                 \
      ::attnserve::detail::throw_error(__FILE__, __LINE__, #expr, "CUDA error: ", cudaGetErrorString(err__)); \
  } while (0)

// After every kernel launch.
#define ATTNSERVE_CUDA_CHECK_LAUNCH() ATTNSERVE_CUDA_CHECK(cudaGetLastError())
