#include "../../core/cuda_hooks.h"
#include "check.cuh"

namespace attnserve::cuda_rt {

void* device_malloc(std::size_t bytes, int device) {
  int prev = 0;
  ATTNSERVE_CUDA_CHECK(cudaGetDevice(&prev));
  ATTNSERVE_CUDA_CHECK(cudaSetDevice(device));
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes);
  cudaSetDevice(prev);
  ATTNSERVE_CUDA_CHECK(err);
  return p;
}

void device_free(void* p, int) { ATTNSERVE_CUDA_CHECK(cudaFree(p)); }

void memcpy_async(void* dst, const void* src, std::size_t bytes, void* stream) {
  ATTNSERVE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
}

void memset_async(void* dst, int value, std::size_t bytes, void* stream) {
  ATTNSERVE_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, static_cast<cudaStream_t>(stream)));
}

void stream_synchronize(void* stream) {
  ATTNSERVE_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

void device_caps(int device, int* num_sms, std::size_t* smem_per_block, int* arch) {
  cudaDeviceProp p{};
  ATTNSERVE_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  *num_sms = p.multiProcessorCount;
  *smem_per_block = p.sharedMemPerBlockOptin;
  *arch = p.major * 10 + p.minor;
}

}  // namespace attnserve::cuda_rt
