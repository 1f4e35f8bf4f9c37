// CUDA: per 1 x group FP8 e4m3 quantization of activations (quantize_fp8_groups), bit-identical to
// the CPU oracle (src/cpu/quantize_fp8.cpp): amax is exact, the power-of-two scale is exact, x / scale
// is exact, and the e4m3 rounding is round-to-nearest-even with saturation, as numeric.h.
// One warp per (row, group): lanes stride the group twice (amax, then quantize; the second read
// hits L1). Memory bound: reads rows * dim * sizeof(x), writes rows * dim + 4 * rows * groups bytes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/common/host_util.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/cuda_ops.h"

namespace attnserve::cuda {
namespace {

template <typename T>
__device__ __forceinline__ float load_f32(const T* p);
template <>
__device__ __forceinline__ float load_f32<float>(const float* p) {
  return *p;
}
template <>
__device__ __forceinline__ float load_f32<__nv_bfloat16>(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}
template <>
__device__ __forceinline__ float load_f32<__half>(const __half* p) {
  return __half2float(*p);
}

struct QuantizeParams {
  const void* x;
  uint8_t* out;
  float* scales;
  int64_t rows, groups, group;
  int64_t x_row_stride, out_row_stride;        // elements (last dims contiguous)
  int64_t scale_row_stride, scale_col_stride;  // elements
};

template <typename T>
__global__ void __launch_bounds__(256) quantize_fp8_groups_kernel(QuantizeParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t warps_total = int64_t(gridDim.x) * (blockDim.x / 32);
  const int64_t tasks = p.rows * p.groups;
  for (int64_t task = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; task < tasks; task += warps_total) {
    const int64_t r = task / p.groups, gi = task % p.groups;
    const T* gx = static_cast<const T*>(p.x) + r * p.x_row_stride + gi * p.group;  // [group]
    uint8_t* gout = p.out + r * p.out_row_stride + gi * p.group;                   // [group]
    float amax = 0.f;  // fmaxf ignores NaN, as std::fmax on the CPU
    for (int64_t c = lane; c < p.group; c += 32) amax = fmaxf(amax, fabsf(load_f32(gx + c)));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(ptx::kFullMask, amax, o));
    const float scale = fp8_pow2_scale(amax);
    for (int64_t c = lane; c < p.group; c += 32) gout[c] = float_to_fp8_bits(load_f32(gx + c) / scale);
    if (lane == 0) p.scales[r * p.scale_row_stride + gi * p.scale_col_stride] = scale;
  }
}

}  // namespace

void quantize_fp8_groups(const QuantizeFp8Args& a, Stream stream) {
  const int64_t rows = a.x.size(0), dim = a.x.size(1), groups = dim / a.group;
  if (rows == 0 || groups == 0) return;
  DeviceGuard guard(a.x.device);
  QuantizeParams p{a.x.data,        a.out.ptr<uint8_t>(), a.scales.ptr<float>(), rows, groups, a.group, a.x.stride(0),
                   a.out.stride(0), a.scales.stride(0),   a.scales.stride(1)};
  constexpr int kThreads = 256, kWarps = kThreads / 32;
  const int64_t wanted = ceil_div(rows * groups, kWarps);
  const int64_t cap = int64_t(current_device_caps().num_sms) * 16;
  const unsigned grid = unsigned(wanted < cap ? wanted : cap);
  cudaStream_t s = to_cuda(stream);
  switch (a.x.dtype) {
    case DType::f32: quantize_fp8_groups_kernel<float><<<grid, kThreads, 0, s>>>(p); break;
    case DType::bf16: quantize_fp8_groups_kernel<__nv_bfloat16><<<grid, kThreads, 0, s>>>(p); break;
    case DType::f16: quantize_fp8_groups_kernel<__half><<<grid, kThreads, 0, s>>>(p); break;
    default:
      ATTNSERVE_FAIL("quantize_fp8_groups: argument 'x' has dtype ", dtype_name(a.x.dtype),
                     ", expected bf16, f16 or f32");
  }
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace attnserve::cuda
