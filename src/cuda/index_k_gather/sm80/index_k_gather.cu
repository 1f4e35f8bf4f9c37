// gather_index_k on CUDA: 8 threads per token; thread t copies key bytes [16 t, 16 t + 16) of its token's
// slot (one 16-byte load and store when every address allows it, else 4- or 1-byte pieces), thread 0
// also copies the f32 scale. An out-of-range slot gives a zero key and scale 0. No host sync and no
// allocation: safe inside CUDA graph capture.
#include <cuda_runtime.h>

#include <cstdint>

#include "attnserve/cache_formats.h"
#include "cuda/common/host_util.cuh"
#include "cuda/index_k_gather/index_k_gather.h"

namespace attnserve::cuda {
namespace {

constexpr int kDim = IndexerKeyLayout::kDim;
constexpr int kThreadsPerToken = 8;
constexpr int kBytesPerThread = kDim / kThreadsPerToken;  // 16
static_assert(kBytesPerThread == 16);

struct GatherParams {
  const uint8_t* pool;    // [num_pages, page_size * 132]
  int64_t page_st_bytes;  // bytes between pages
  const void* slots;      // [n] i32 | i64
  int64_t slots_st;       // elements
  uint8_t* out_k;         // [n, 128]
  int64_t out_k_st_bytes;
  float* out_scale;      // [n]
  int64_t out_scale_st;  // elements
  int64_t num_slots;
  int64_t n;
  int page_size;
};

template <int V>
struct VecOf;
template <>
struct VecOf<16> {
  using T = uint4;
};
template <>
struct VecOf<4> {
  using T = uint32_t;
};
template <>
struct VecOf<1> {
  using T = uint8_t;
};

// 16 bytes from src to dst in V-byte pieces (both V-byte aligned); zeros when src is null.
template <int V>
__device__ __forceinline__ void copy16(const uint8_t* src, uint8_t* dst) {
  using T = typename VecOf<V>::T;
#pragma unroll
  for (int i = 0; i < 16 / V; ++i) {
    T v{};
    if (src) v = reinterpret_cast<const T*>(src)[i];
    reinterpret_cast<T*>(dst)[i] = v;
  }
}

template <typename TSlot, int V>
__global__ void gather_index_k_kernel(GatherParams p) {
  const int part = threadIdx.x % kThreadsPerToken;
  const int64_t groups = int64_t(gridDim.x) * (blockDim.x / kThreadsPerToken);
  for (int64_t j = int64_t(blockIdx.x) * (blockDim.x / kThreadsPerToken) + threadIdx.x / kThreadsPerToken; j < p.n;
       j += groups) {
    const int64_t slot = int64_t(static_cast<const TSlot*>(p.slots)[j * p.slots_st]);
    const bool valid = slot >= 0 && slot < p.num_slots;
    const uint8_t* page = nullptr;
    int64_t in_page = 0;
    if (valid) {
      const int64_t page_id = slot / p.page_size;
      in_page = slot - page_id * p.page_size;
      page = p.pool + page_id * p.page_st_bytes;
    }
    copy16<V>(valid ? page + in_page * kDim + part * kBytesPerThread : nullptr,
              p.out_k + j * p.out_k_st_bytes + part * kBytesPerThread);
    if (part == 0) {
      float scale = 0.f;
      if (valid) {
        const uint8_t* s = page + int64_t(p.page_size) * kDim + in_page * 4;
        if constexpr (V >= 4) {
          scale = *reinterpret_cast<const float*>(s);
        } else {
          const uint32_t bits =
              uint32_t(s[0]) | (uint32_t(s[1]) << 8) | (uint32_t(s[2]) << 16) | (uint32_t(s[3]) << 24);
          scale = __uint_as_float(bits);
        }
      }
      p.out_scale[j * p.out_scale_st] = scale;
    }
  }
}

// Widest access (16, 4 or 1 bytes) for which every key address in the pool and in out_k is aligned.
// Key offsets within a page are multiples of 128, so the page base and page stride decide; scales sit at
// multiples of 4 from the page base.
int vector_bytes(const GatherParams& p) {
  auto fits = [&](int v) {
    return aligned_to(p.pool, std::size_t(v)) && p.page_st_bytes % v == 0 && aligned_to(p.out_k, std::size_t(v)) &&
           p.out_k_st_bytes % v == 0;
  };
  return fits(16) ? 16 : fits(4) ? 4 : 1;
}

template <typename TSlot>
void launch(const GatherParams& p, cudaStream_t stream) {
  const int threads = 256;
  const unsigned grid = grid_for(p.n * kThreadsPerToken, threads);
  switch (vector_bytes(p)) {
    case 16: gather_index_k_kernel<TSlot, 16><<<grid, threads, 0, stream>>>(p); break;
    case 4: gather_index_k_kernel<TSlot, 4><<<grid, threads, 0, stream>>>(p); break;
    default: gather_index_k_kernel<TSlot, 1><<<grid, threads, 0, stream>>>(p); break;
  }
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void gather_index_k(const GatherIndexKArgs& a, Stream stream) {
  GatherParams p{};
  p.pool = static_cast<const uint8_t*>(a.index_k_cache.data);
  p.page_st_bytes = a.index_k_cache.stride(0);
  p.slots = a.slots.data;
  p.slots_st = a.slots.stride(0);
  p.out_k = static_cast<uint8_t*>(a.out_k.data);
  p.out_k_st_bytes = a.out_k.stride(0);
  p.out_scale = static_cast<float*>(a.out_scale.data);
  p.out_scale_st = a.out_scale.stride(0);
  p.page_size = a.page_size;
  p.num_slots = a.index_k_cache.size(0) * a.page_size;
  p.n = a.slots.size(0);
  if (p.n == 0) return;
  ATTNSERVE_CHECK(aligned_to(a.out_scale.data, 4), "gather_index_k: 'out_scale' must be 4-byte aligned on CUDA");
  if (a.slots.dtype == DType::i64) launch<int64_t>(p, to_cuda(stream));
  else launch<int32_t>(p, to_cuda(stream));
}

}  // namespace attnserve::cuda
