// Shared by the DeepSeek sparse-attention benchmarks (bench_topk, bench_indexer, bench_sparse):
// CUDA-event timing (warm-up, median of many), device-side random fills (fast, never all zeros, no
// fp8 NaN codes), rotation over input sets whose sum exceeds the 60 MB L2, and the report line.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnserve/ops.h"
#include "attnserve/runtime.h"
#include "bench_spin.cuh"

namespace dsa_bench {

// Throws rather than exit() (DESIGN.md): each bench main's catch prints the error and returns 1.
#define DSA_CK(x)                                                                                               \
  do {                                                                                                          \
    cudaError_t e__ = (x);                                                                                      \
    if (e__ != cudaSuccess)                                                                                     \
      throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorString(e__) + " at " + __FILE__ + ":" + \
                               std::to_string(__LINE__));                                                       \
  } while (0)

inline bool g_quick = false;
inline std::string g_filter;
constexpr std::size_t kL2Bytes = std::size_t(60) << 20;

inline void parse_args(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) g_quick = true;
    else g_filter = argv[i];
  }
}
inline bool selected(const std::string& name) { return g_filter.empty() || name.find(g_filter) != std::string::npos; }

__device__ __forceinline__ uint32_t hash32(uint64_t i, uint32_t seed) {
  uint32_t h = uint32_t(i) * 2654435761u ^ uint32_t(i >> 32) * 0x85ebca6bu ^ seed;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return h;
}
__device__ __forceinline__ float unit(uint64_t i, uint32_t seed) {  // (-1, 1), never 0
  return (float(hash32(i, seed) & 0xffffff) + 0.5f) / 8388608.f - 1.f;
}

// f32 values in (-scale, scale).
__global__ void fill_f32_kernel(float* p, std::size_t n, uint32_t seed, float scale) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    p[i] = unit(i, seed) * scale;
}
// bf16 values in (-scale, scale) (round to nearest even).
__global__ void fill_bf16_kernel(uint16_t* p, std::size_t n, uint32_t seed, float scale) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const uint32_t u = __float_as_uint(unit(i, seed) * scale);
    p[i] = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
}
// Random e4m3 codes in [0x08, 0x77] with a random sign: normal, finite values between 2^-6 and 240.
__global__ void fill_fp8_kernel(uint8_t* p, std::size_t n, uint32_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const uint32_t h = hash32(i, seed);
    p[i] = uint8_t(0x08 + (h % 0x70)) | uint8_t((h >> 16) & 0x80);
  }
}
// i32 values in [0, modulo).
__global__ void fill_index_kernel(int32_t* p, std::size_t n, uint32_t seed, uint32_t modulo) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    p[i] = int32_t(hash32(i, seed) % modulo);
}
__global__ void fill_const_i32_kernel(int32_t* p, std::size_t n, int32_t v) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    p[i] = v;
}

inline void fill_f32(void* p, std::size_t n, uint32_t seed, float scale = 1.f) {
  fill_f32_kernel<<<2048, 256>>>(static_cast<float*>(p), n, seed, scale);
  DSA_CK(cudaGetLastError());
}
inline void fill_bf16(void* p, std::size_t n, uint32_t seed, float scale = 1.f) {
  fill_bf16_kernel<<<2048, 256>>>(static_cast<uint16_t*>(p), n, seed, scale);
  DSA_CK(cudaGetLastError());
}
inline void fill_fp8(void* p, std::size_t n, uint32_t seed) {
  fill_fp8_kernel<<<2048, 256>>>(static_cast<uint8_t*>(p), n, seed);
  DSA_CK(cudaGetLastError());
}
inline void fill_index(void* p, std::size_t n, uint32_t seed, uint32_t modulo) {
  fill_index_kernel<<<2048, 256>>>(static_cast<int32_t*>(p), n, seed, modulo);
  DSA_CK(cudaGetLastError());
}
inline void fill_const(void* p, std::size_t n, int32_t v) {
  fill_const_i32_kernel<<<2048, 256>>>(static_cast<int32_t*>(p), n, v);
  DSA_CK(cudaGetLastError());
}

// Number of input sets so that sets * bytes_per_set exceeds the L2 by 2x (at least 2, at most 16).
inline int sets_for(std::size_t bytes_per_set) {
  const std::size_t want = (2 * kL2Bytes + bytes_per_set - 1) / std::max<std::size_t>(bytes_per_set, 1);
  return int(std::clamp<std::size_t>(want, 2, 16));
}

// Median time in microseconds of fn(i) over `reps` timed runs after `warm` warm-ups; hide_host: device time
// only (bench_spin.cuh), else the host's launch path too (an event recorded on an idle GPU).
inline double timed_median_us(const std::function<void(int)>& fn, int warm, int reps, bool hide_host) {
  if (g_quick) reps = std::min(reps, 8);
  for (int i = 0; i < warm; ++i) fn(i);
  DSA_CK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  DSA_CK(cudaEventCreate(&a));
  DSA_CK(cudaEventCreate(&b));
  std::vector<double> v;
  for (int i = 0; i < reps; ++i) {
    if (hide_host) attnserve::bench::hide_host_launch();
    DSA_CK(cudaEventRecord(a));
    fn(warm + i);
    DSA_CK(cudaEventRecord(b));
    DSA_CK(cudaEventSynchronize(b));
    float ms = 0;
    DSA_CK(cudaEventElapsedTime(&ms, a, b));
    v.push_back(ms * 1000.0);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
inline double median_us(const std::function<void(int)>& fn, int warm = 3, int reps = 30) {
  return timed_median_us(fn, warm, reps, true);
}
inline double median_with_host_us(const std::function<void(int)>& fn, int warm = 3, int reps = 30) {
  return timed_median_us(fn, warm, reps, false);
}

// name | time | TFLOP/s (if flops > 0) | GB/s of the minimal bytes | note
inline void report(const std::string& name, double us, double flops, double bytes, const std::string& note = "") {
  char fl[32] = "";
  if (flops > 0) std::snprintf(fl, sizeof fl, "%8.1f TFLOP/s", flops / us * 1e-6);
  std::printf("%-50s %10.1f us %16s %8.0f GB/s  %s\n", name.c_str(), us, fl, bytes / us * 1e-3, note.c_str());
  std::fflush(stdout);
}

// Device-to-device copy ceiling (read + write), GB/s.
inline double copy_ceiling_gbs() {
  const std::size_t bytes = std::size_t(1) << 30;
  attnserve::Buffer a(bytes, attnserve::Device::cuda()), b(bytes, attnserve::Device::cuda());
  fill_fp8(a.data(), bytes, 1);
  const double us =
      median_us([&](int) { DSA_CK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice)); }, 2, 10);
  const double gbs = 2.0 * bytes / us * 1e-3;
  std::printf("%-50s %10.1f us %16s %8.0f GB/s  (read + write: the ceiling)\n", "copy 1 GiB d2d", us, "", gbs);
  return gbs;
}

// The start of every DSA bench's main: arguments, the GPU check, the title, the copy ceiling.
// False when there is no CUDA device (the bench then prints so and exits 0).
inline bool bench_start(int argc, char** argv, const char* title) {
  parse_args(argc, argv);
  if (!attnserve::cuda_available()) {
    std::printf("no CUDA device\n");
    return false;
  }
  std::printf("%s\n", title);
  copy_ceiling_gbs();
  return true;
}

}  // namespace dsa_bench
