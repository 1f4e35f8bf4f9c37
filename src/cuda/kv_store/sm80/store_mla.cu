// set_mla_kv_buffer (bf16 576-value rows or the FP8-656 layout) and set_index_k (indexer keys,
// per-token power-of-two scale) on CUDA. One warp per token; 16-byte stores.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "attnserve/cache_formats.h"
#include "cuda/common/host_util.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/cuda_ops.h"

namespace attnserve::cuda {
namespace {

struct MlaStoreParams {
  const void* kv_c;  // [n, 512]
  int64_t kv_c_st;
  const void* k_rope;  // [n, 64]
  int64_t k_rope_st;
  uint8_t* cache;  // [num_slots, row_bytes]
  int64_t cache_st_bytes;
  int64_t num_slots;
  int64_t n;
};

template <typename T>
struct alignas(sizeof(T) * 8) Vec8 {
  T v[8];
};

// Eight values from an 8-element-aligned address (one 16-byte load for 2-byte types).
template <typename T>
__device__ __forceinline__ void load8(const T* p, float* x) {
  const Vec8<T> in = *reinterpret_cast<const Vec8<T>*>(p);
#pragma unroll
  for (int i = 0; i < 8; ++i) x[i] = to_f32(in.v[i]);
}

// bf16 cache: 72 chunks of 8 values per token (64 latent chunks, then 8 rope chunks).
template <typename TIn, typename TLoc>
__global__ void store_mla_bf16_kernel(MlaStoreParams p, const TLoc* __restrict__ loc) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t tok = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; tok < p.n; tok += warps) {
    const int64_t slot = int64_t(loc[tok]);
    if (slot < 0 || slot >= p.num_slots) continue;
    auto* dst = reinterpret_cast<__nv_bfloat16*>(p.cache + slot * p.cache_st_bytes);
#pragma unroll
    for (int c = lane; c < 72; c += 32) {
      const TIn* src = c < 64 ? static_cast<const TIn*>(p.kv_c) + tok * p.kv_c_st + c * 8
                              : static_cast<const TIn*>(p.k_rope) + tok * p.k_rope_st + (c - 64) * 8;
      float x[8];
      load8(src, x);
      uint4 o;
      o.x = ptx::pack2<__nv_bfloat16>(x[0], x[1]);
      o.y = ptx::pack2<__nv_bfloat16>(x[2], x[3]);
      o.z = ptx::pack2<__nv_bfloat16>(x[4], x[5]);
      o.w = ptx::pack2<__nv_bfloat16>(x[6], x[7]);
      *reinterpret_cast<uint4*>(dst + c * 8) = o;
    }
  }
}

// FP8-656: lane l owns latent values [16 l, 16 l + 16) of tile l / 8; the tile's amax is reduced
// over its 8 lanes; scale = fp8_pow2_scale(amax); lanes 0..7 also write the bf16 rope.
template <typename TIn, typename TLoc>
__global__ void store_mla_fp8_kernel(MlaStoreParams p, const TLoc* __restrict__ loc) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t tok = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; tok < p.n; tok += warps) {
    const int64_t slot = int64_t(loc[tok]);
    if (slot < 0 || slot >= p.num_slots) continue;
    uint8_t* dst = p.cache + slot * p.cache_st_bytes;
    const TIn* src = static_cast<const TIn*>(p.kv_c) + tok * p.kv_c_st + lane * 16;
    float x[16];
    load8(src, x);
    load8(src + 8, x + 8);
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i) amax = fmaxf(amax, fabsf(x[i]));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 4));
    const float scale = fp8_pow2_scale(amax);
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      w[j] = uint32_t(fp8_bits(x[4 * j] / scale)) | (uint32_t(fp8_bits(x[4 * j + 1] / scale)) << 8) |
             (uint32_t(fp8_bits(x[4 * j + 2] / scale)) << 16) | (uint32_t(fp8_bits(x[4 * j + 3] / scale)) << 24);
    }
    *reinterpret_cast<uint4*>(dst + lane * 16) = make_uint4(w[0], w[1], w[2], w[3]);
    if ((lane & 7) == 0) *reinterpret_cast<float*>(dst + Fp8MlaLayout::kScaleOffset + 4 * (lane / 8)) = scale;
    if (lane < 8) {
      float r[8];
      load8(static_cast<const TIn*>(p.k_rope) + tok * p.k_rope_st + lane * 8, r);
      uint4 o;
      o.x = ptx::pack2<__nv_bfloat16>(r[0], r[1]);
      o.y = ptx::pack2<__nv_bfloat16>(r[2], r[3]);
      o.z = ptx::pack2<__nv_bfloat16>(r[4], r[5]);
      o.w = ptx::pack2<__nv_bfloat16>(r[6], r[7]);
      *reinterpret_cast<uint4*>(dst + Fp8MlaLayout::kRopeOffset + lane * 16) = o;
    }
  }
}

struct IndexKParams {
  const void* k;  // [n, 128]
  int64_t k_st;
  uint8_t* pool;  // [num_pages, page_size * 132]
  int64_t page_st_bytes;
  int64_t num_slots;
  int page_size;
  int64_t n;
};

// Indexer keys: lane l owns values [4 l, 4 l + 4); amax over the warp; one scale per token.
template <typename TIn, typename TLoc>
__global__ void store_index_k_kernel(IndexKParams p, const TLoc* __restrict__ loc) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t tok = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32; tok < p.n; tok += warps) {
    const int64_t slot = int64_t(loc[tok]);
    if (slot < 0 || slot >= p.num_slots) continue;
    const TIn* src = static_cast<const TIn*>(p.k) + tok * p.k_st + lane * 4;
    float x[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] = to_f32(src[i]);
    float amax = fmaxf(fmaxf(fabsf(x[0]), fabsf(x[1])), fmaxf(fabsf(x[2]), fabsf(x[3])));
    amax = ptx::warp_max(amax);
    const float scale = fp8_pow2_scale(amax);
    const int64_t page = slot / p.page_size, off = slot - page * p.page_size;
    uint8_t* base = p.pool + page * p.page_st_bytes;
    const uint32_t w = uint32_t(fp8_bits(x[0] / scale)) | (uint32_t(fp8_bits(x[1] / scale)) << 8) |
                       (uint32_t(fp8_bits(x[2] / scale)) << 16) | (uint32_t(fp8_bits(x[3] / scale)) << 24);
    *reinterpret_cast<uint32_t*>(base + off * IndexerKeyLayout::kDim + lane * 4) = w;
    if (lane == 0) *reinterpret_cast<float*>(base + int64_t(p.page_size) * IndexerKeyLayout::kDim + off * 4) = scale;
  }
}

template <typename F>
void with_loc_type(DType t, F&& f) {
  if (t == DType::i64) f(int64_t{});
  else f(int32_t{});
}

template <typename TIn>
void launch_mla(const StoreMlaArgs& a, cudaStream_t stream) {
  MlaStoreParams p{};
  p.kv_c = a.kv_c.data;
  p.kv_c_st = a.kv_c.stride(0);
  p.k_rope = a.k_rope.data;
  p.k_rope_st = a.k_rope.stride(0);
  p.cache = static_cast<uint8_t*>(a.cache.data);
  p.cache_st_bytes = a.cache.stride(0) * int64_t(dtype_size(a.cache.dtype));
  p.num_slots = a.cache.size(0);
  p.n = a.kv_c.size(0);
  if (p.n == 0) return;
  const bool fp8 = a.cache.dtype == DType::u8;
  ATTNSERVE_CHECK(aligned_to(a.cache.data, 16) && p.cache_st_bytes % 16 == 0,
                  "set_mla_kv_buffer: cache rows must be 16-byte aligned on CUDA");
  ATTNSERVE_CHECK(vector_ok(a.kv_c, 8) && vector_ok(a.k_rope, 8),
                  "set_mla_kv_buffer: kv_c and k_rope need contiguous rows aligned to 8 elements on CUDA");
  const int threads = 256;
  const unsigned grid = grid_for(p.n * 32, threads);
  with_loc_type(a.loc.dtype, [&](auto tag) {
    using TLoc = decltype(tag);
    const TLoc* loc = static_cast<const TLoc*>(a.loc.data);
    if (fp8) store_mla_fp8_kernel<TIn, TLoc><<<grid, threads, 0, stream>>>(p, loc);
    else store_mla_bf16_kernel<TIn, TLoc><<<grid, threads, 0, stream>>>(p, loc);
  });
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

template <typename TIn>
void launch_index_k(const StoreIndexKArgs& a, cudaStream_t stream) {
  IndexKParams p{};
  p.k = a.k.data;
  p.k_st = a.k.stride(0);
  p.pool = static_cast<uint8_t*>(a.index_k_cache.data);
  p.page_st_bytes = a.index_k_cache.stride(0);
  p.page_size = a.page_size;
  p.num_slots = a.index_k_cache.size(0) * a.page_size;
  p.n = a.k.size(0);
  if (p.n == 0) return;
  ATTNSERVE_CHECK(aligned_to(a.index_k_cache.data, 4) && p.page_st_bytes % 4 == 0,
                  "set_index_k: index_k_cache pages must be 4-byte aligned on CUDA");
  ATTNSERVE_CHECK(a.k.stride(1) == 1, "set_index_k: k needs a contiguous last dim on CUDA");
  const int threads = 256;
  const unsigned grid = grid_for(p.n * 32, threads);
  with_loc_type(a.loc.dtype, [&](auto tag) {
    using TLoc = decltype(tag);
    store_index_k_kernel<TIn, TLoc><<<grid, threads, 0, stream>>>(p, static_cast<const TLoc*>(a.loc.data));
  });
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void set_mla_kv_buffer(const StoreMlaArgs& a, Stream stream) {
  ATTNSERVE_CHECK(a.kv_c.dtype == a.k_rope.dtype, "set_mla_kv_buffer: on CUDA k_rope must have kv_c's dtype (",
                  dtype_name(a.kv_c.dtype), "), got ", dtype_name(a.k_rope.dtype));
  ATTNSERVE_CHECK(a.kv_c.size(1) == 512 && a.k_rope.size(1) == 64,
                  "set_mla_kv_buffer: CUDA supports kv_c [n, 512] and k_rope [n, 64]");
  switch (a.kv_c.dtype) {
    case DType::bf16: return launch_mla<__nv_bfloat16>(a, to_cuda(stream));
    case DType::f32: return launch_mla<float>(a, to_cuda(stream));
    default: ATTNSERVE_FAIL("set_mla_kv_buffer: kv_c dtype ", dtype_name(a.kv_c.dtype), " not supported on CUDA");
  }
}

void set_index_k(const StoreIndexKArgs& a, Stream stream) {
  ATTNSERVE_CHECK(a.k.size(1) == IndexerKeyLayout::kDim, "set_index_k: k must be [n, 128]");
  switch (a.k.dtype) {
    case DType::bf16: return launch_index_k<__nv_bfloat16>(a, to_cuda(stream));
    case DType::f32: return launch_index_k<float>(a, to_cuda(stream));
    default: ATTNSERVE_FAIL("set_index_k: k dtype ", dtype_name(a.k.dtype), " not supported on CUDA");
  }
}

}  // namespace attnserve::cuda
