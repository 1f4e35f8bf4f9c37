// Internal: the few CUDA runtime calls host code needs. Defined in src/cuda/common/runtime.cu when
// built with CUDA; runtime.cpp never calls them otherwise.
#pragma once
#include <cstddef>

namespace attnserve::cuda_rt {
void* device_malloc(std::size_t bytes, int device);
void device_free(void* p, int device);
void memcpy_async(void* dst, const void* src, std::size_t bytes, void* stream);  // cudaMemcpyDefault
void memset_async(void* dst, int value, std::size_t bytes, void* stream);
void stream_synchronize(void* stream);
int device_count();
void device_caps(int device, int* num_sms, std::size_t* smem_per_block, int* arch);
}  // namespace attnserve::cuda_rt
