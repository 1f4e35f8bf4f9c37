// set_kv_buffer on CUDA: k_cache[loc[i]] = cast(k[i]) (fp8 cache: fp8(k / k_scale)), same for v.
// One warp per token, one lane per 8-element chunk (16-byte accesses for 2-byte types). Out-of-range slots (< 0 or >=
// num_slots) are skipped: the device cannot raise.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "cuda/common/host_util.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/cuda_ops.h"

namespace attnserve::cuda {
namespace {

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

struct StoreSide {
  const void* src;  // [n, h, d]
  int64_t src_st, src_sh;
  void* dst;  // [num_slots, h, d]
  int64_t dst_st, dst_sh;
  int h, d;
  float scale;  // k_scale / v_scale (fp8 cache only)
};

template <typename TIn, typename TOut, int VEC>
__device__ __forceinline__ void store_chunk(const StoreSide& s, int64_t tok, int64_t slot, int c) {
  const int per_head = s.d / VEC;
  const int head = c / per_head, e = (c - head * per_head) * VEC;
  const auto* src = static_cast<const TIn*>(s.src) + tok * s.src_st + head * s.src_sh + e;
  auto* dst = static_cast<TOut*>(s.dst) + slot * s.dst_st + head * s.dst_sh + e;
  Vec<TIn, VEC> in = *reinterpret_cast<const Vec<TIn, VEC>*>(src);
  Vec<TOut, VEC> out;
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    float x = to_f32(in.v[i]);
    if constexpr (std::is_same_v<TOut, __nv_fp8_e4m3>) x = x / s.scale;  // as the CPU: fp8(k / k_scale)
    out.v[i] = from_f32<TOut>(x);
  }
  *reinterpret_cast<Vec<TOut, VEC>*>(dst) = out;
}

// One warp per token (warp-stride), lanes over the token's K chunks then V chunks.
template <typename TIn, typename TOut, int VEC, typename TLoc>
__global__ void store_kv_kernel(StoreSide k, StoreSide v, const TLoc* __restrict__ loc, int64_t n, int64_t num_slots) {
  const int lane = threadIdx.x & 31;
  const int chunks_k = k.h * (k.d / VEC), chunks_v = v.h * (v.d / VEC);
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t tok = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; tok < n; tok += warps) {
    const int64_t slot = int64_t(loc[tok]);
    if (slot < 0 || slot >= num_slots) continue;
#pragma unroll 4
    for (int c = lane; c < chunks_k; c += 32) store_chunk<TIn, TOut, VEC>(k, tok, slot, c);
#pragma unroll 4
    for (int c = lane; c < chunks_v; c += 32) store_chunk<TIn, TOut, VEC>(v, tok, slot, c);
  }
}

StoreSide side_of(const TensorView& src, const TensorView& dst, float scale) {
  StoreSide s{};
  s.src = src.data;
  s.src_st = src.stride(0);
  s.src_sh = src.stride(1);
  s.dst = dst.data;
  s.dst_st = dst.stride(0);
  s.dst_sh = dst.stride(1);
  s.h = int(src.size(1));
  s.d = int(src.size(2));
  s.scale = scale;
  return s;
}

template <typename TIn, typename TOut>
void launch_store(const StoreKvArgs& a, cudaStream_t stream) {
  const int64_t n = a.k.size(0);
  if (n == 0) return;
  StoreSide k = side_of(a.k, a.k_cache, a.k_scale), v = side_of(a.v, a.v_cache, a.v_scale);
  const bool vec = vector_ok(a.k, 8) && vector_ok(a.v, 8) && vector_ok(a.k_cache, 8) && vector_ok(a.v_cache, 8);
  const int threads = 256;
  const unsigned grid = grid_for(n * 32, threads);  // one warp per token
  const int64_t num_slots = a.k_cache.size(0);
  auto go = [&](auto vec_tag, auto loc_tag) {
    constexpr int VW = decltype(vec_tag)::value;
    using TLoc = typename decltype(loc_tag)::type;
    store_kv_kernel<TIn, TOut, VW, TLoc>
        <<<grid, threads, 0, stream>>>(k, v, static_cast<const TLoc*>(a.loc.data), n, num_slots);
  };
  struct I32 {
    using type = int32_t;
  };
  struct I64 {
    using type = int64_t;
  };
  if (vec) {
    if (a.loc.dtype == DType::i64) go(std::integral_constant<int, 8>{}, I64{});
    else go(std::integral_constant<int, 8>{}, I32{});
  } else {
    if (a.loc.dtype == DType::i64) go(std::integral_constant<int, 1>{}, I64{});
    else go(std::integral_constant<int, 1>{}, I32{});
  }
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

template <typename TIn>
void dispatch_out(const StoreKvArgs& a, cudaStream_t s) {
  switch (a.k_cache.dtype) {
    case DType::bf16: return launch_store<TIn, __nv_bfloat16>(a, s);
    case DType::f16: return launch_store<TIn, __half>(a, s);
    case DType::fp8_e4m3: return launch_store<TIn, __nv_fp8_e4m3>(a, s);
    default: ATTNSERVE_FAIL("set_kv_buffer: k_cache dtype ", dtype_name(a.k_cache.dtype), " not supported on CUDA");
  }
}

}  // namespace

void set_kv_buffer(const StoreKvArgs& a, Stream stream) {
  ATTNSERVE_CHECK(a.v.dtype == a.k.dtype, "set_kv_buffer: on CUDA v must have k's dtype (", dtype_name(a.k.dtype),
                  "), got ", dtype_name(a.v.dtype));
  ATTNSERVE_CHECK(a.v_cache.dtype == a.k_cache.dtype, "set_kv_buffer: on CUDA v_cache must have k_cache's dtype (",
                  dtype_name(a.k_cache.dtype), "), got ", dtype_name(a.v_cache.dtype));
  ATTNSERVE_CHECK(a.k.ndim == 3 && a.k_cache.ndim == 3 && a.v.ndim == 3 && a.v_cache.ndim == 3,
                  "set_kv_buffer: k, v, k_cache, v_cache must be 3-d on CUDA");
  for (auto* t : {&a.k, &a.v, &a.k_cache, &a.v_cache})
    ATTNSERVE_CHECK(t->size(-1) <= 1 || t->stride(-1) == 1, "set_kv_buffer: last dims must be contiguous on CUDA");
  cudaStream_t s = to_cuda(stream);
  switch (a.k.dtype) {
    case DType::bf16: return dispatch_out<__nv_bfloat16>(a, s);
    case DType::f16: return dispatch_out<__half>(a, s);
    case DType::f32: return dispatch_out<float>(a, s);
    default: ATTNSERVE_FAIL("set_kv_buffer: k dtype ", dtype_name(a.k.dtype), " not supported on CUDA");
  }
}

}  // namespace attnserve::cuda
