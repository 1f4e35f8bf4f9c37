// The CuTe toolchain check (see cute_tma_wgmma.h): per CTA, one warpgroup computes a 64 x 64 tile
// of C = A B^T. Each K step: one thread issues two TMA tile loads (A and B, 64 x 64 bf16 each, into
// 128-byte-swizzled K-major shared tiles) that complete on one mbarrier with a transaction count;
// everyone waits on the barrier's phase; the warpgroup runs the GMMA atom 64x64x16 (SS, both
// K-major) over the tile's K, accumulating in f32 registers. No pipelining: this proves the toolchain
// (headers, sm_90a flags, descriptor encoding by CuTe), not speed.
#include <cuda_runtime.h>

#include <cutlass/arch/barrier.h>
#include <cutlass/numeric_types.h>
#include <cute/tensor.hpp>

#include "cute_tma_wgmma.h"

namespace attnserve::test::sm90 {
namespace {

using namespace cute;
using T = cute::bfloat16_t;
using Tile = Int<kCuteTile>;
using SmemLayout = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<T>{}, make_shape(Tile{}, Tile{})));  // (64,64)
using TiledMma = decltype(make_tiled_mma(SM90_64x64x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>{}));

struct SharedStorage {
  // The swizzle atom repeats every 1024 bytes: TMA and GMMA need the tiles aligned to it.
  alignas(1024) ArrayEngine<T, cosize_v<SmemLayout>> a;
  alignas(1024) ArrayEngine<T, cosize_v<SmemLayout>> b;
  alignas(8) uint64_t tma_barrier;
};

template <class TmaA, class TmaB>
__global__ void __launch_bounds__(128) gemm_kernel(int m, int n, int k, CUTE_GRID_CONSTANT TmaA const tma_a,
                                                   CUTE_GRID_CONSTANT TmaB const tma_b, float* c) {
#if defined(CUTE_ARCH_TMA_SM90_ENABLED) && defined(CUTE_ARCH_MMA_SM90A_ENABLED)
  extern __shared__ char smem_raw[];
  SharedStorage& smem = *reinterpret_cast<SharedStorage*>(smem_raw);
  using Barrier = cutlass::arch::ClusterTransactionBarrier;

  Tensor mA = tma_a.get_tma_tensor(make_shape(m, k));                                          // (M,K) coordinates
  Tensor mB = tma_b.get_tma_tensor(make_shape(n, k));                                          // (N,K) coordinates
  Tensor mC = make_tensor(make_gmem_ptr(c), make_shape(m, n), make_stride(n, Int<1>{}));       // (M,N)
  Tensor gA = local_tile(mA, make_shape(Tile{}, Tile{}), make_coord(blockIdx.x, _));           // (64,64,k_tiles)
  Tensor gB = local_tile(mB, make_shape(Tile{}, Tile{}), make_coord(blockIdx.y, _));           // (64,64,k_tiles)
  Tensor gC = local_tile(mC, make_shape(Tile{}, Tile{}), make_coord(blockIdx.x, blockIdx.y));  // (64,64)
  Tensor sA = make_tensor(make_smem_ptr(smem.a.begin()), SmemLayout{});                        // (64,64)
  Tensor sB = make_tensor(make_smem_ptr(smem.b.begin()), SmemLayout{});                        // (64,64)

  // TMA partitions: no multicast, so the one "CTA slice" 0 owns the whole tile.
  auto cta_tma_a = tma_a.get_slice(Int<0>{});
  auto cta_tma_b = tma_b.get_slice(Int<0>{});
  Tensor tAgA = cta_tma_a.partition_S(gA);                             // (TMA,TMA_M,TMA_K,k_tiles)
  Tensor tAsA = cta_tma_a.partition_D(sA);                             // (TMA,TMA_M,TMA_K)
  Tensor tBgB = cta_tma_b.partition_S(gB);                             // (TMA,TMA_N,TMA_K,k_tiles)
  Tensor tBsB = cta_tma_b.partition_D(sB);                             // (TMA,TMA_N,TMA_K)
  constexpr uint32_t kTxBytes = 2 * cosize_v<SmemLayout> * sizeof(T);  // both tiles, per K step

  // GMMA partitions: the A/B "fragments" are shared-memory descriptors, not registers.
  TiledMma mma;
  ThrMMA thr_mma = mma.get_thread_slice(threadIdx.x);
  Tensor tCsA = thr_mma.partition_A(sA);        // (MMA,MMA_M,MMA_K)
  Tensor tCsB = thr_mma.partition_B(sB);        // (MMA,MMA_N,MMA_K)
  Tensor tCgC = thr_mma.partition_C(gC);        // (MMA,MMA_M,MMA_N)
  Tensor tCrA = thr_mma.make_fragment_A(tCsA);  // descriptors
  Tensor tCrB = thr_mma.make_fragment_B(tCsB);  // descriptors
  Tensor tCrC = thr_mma.make_fragment_C(tCgC);  // f32 accumulators
  clear(tCrC);

  const bool issuer = threadIdx.x == 0;
  if (issuer) {
    Barrier::init(&smem.tma_barrier, 1);
    cutlass::arch::fence_barrier_init();  // the barrier's init is visible to the TMA unit (async proxy)
  }
  __syncthreads();

  const int k_tiles = size<3>(tAgA);
  for (int kt = 0; kt < k_tiles; ++kt) {
    if (issuer) {
      Barrier::arrive_and_expect_tx(&smem.tma_barrier, kTxBytes);
      copy(tma_a.with(smem.tma_barrier), tAgA(_, _, _, kt), tAsA);
      copy(tma_b.with(smem.tma_barrier), tBgB(_, _, _, kt), tBsB);
    }
    Barrier::wait(&smem.tma_barrier, kt & 1);  // one completion per K step: the phase alternates

    warpgroup_fence_operand(tCrC);
    warpgroup_arrive();
    gemm(mma, tCrA, tCrB, tCrC);  // 4 wgmma k16 steps over the 64-wide K tile
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    warpgroup_fence_operand(tCrC);
    __syncthreads();  // every wgmma has read the tiles before the next TMA overwrites them
  }
  copy(tCrC, tCgC);
#endif
}

std::string cuda_error(const char* what, cudaError_t e) { return std::string(what) + ": " + cudaGetErrorString(e); }

}  // namespace

std::string run_cute_tma_wgmma_gemm(int m, int n, int k, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                                    std::vector<float>& c) {
  if (m <= 0 || n <= 0 || k <= 0 || m % kCuteTile || n % kCuteTile || k % kCuteTile)
    return "m, n, k must be positive multiples of " + std::to_string(kCuteTile);
  if (a.size() != size_t(m) * k || b.size() != size_t(n) * k) return "a must be m x k and b n x k";
  T *d_a = nullptr, *d_b = nullptr;
  float* d_c = nullptr;
  std::string err;
  auto check = [&](const char* what, cudaError_t e) {
    if (e != cudaSuccess && err.empty()) err = cuda_error(what, e);
    return err.empty();
  };
  if (check("cudaMalloc", cudaMalloc(&d_a, a.size() * sizeof(T))) &&
      check("cudaMalloc", cudaMalloc(&d_b, b.size() * sizeof(T))) &&
      check("cudaMalloc", cudaMalloc(&d_c, size_t(m) * n * sizeof(float))) &&
      check("copy a", cudaMemcpy(d_a, a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice)) &&
      check("copy b", cudaMemcpy(d_b, b.data(), b.size() * sizeof(T), cudaMemcpyHostToDevice)) &&
      check("poison c", cudaMemset(d_c, 0xff, size_t(m) * n * sizeof(float)))) {
    // The TMA descriptors encode the global tensors (shape, K-major strides) and the swizzled tile.
    Tensor gA = make_tensor(make_gmem_ptr(d_a), make_shape(m, k), make_stride(k, Int<1>{}));
    Tensor gB = make_tensor(make_gmem_ptr(d_b), make_shape(n, k), make_stride(k, Int<1>{}));
    auto tma_a = make_tma_copy(SM90_TMA_LOAD{}, gA, SmemLayout{});
    auto tma_b = make_tma_copy(SM90_TMA_LOAD{}, gB, SmemLayout{});
    auto kernel = gemm_kernel<decltype(tma_a), decltype(tma_b)>;
    const int smem = int(sizeof(SharedStorage));
    if (check("smem attribute", cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem))) {
      kernel<<<dim3(m / kCuteTile, n / kCuteTile), int(size(TiledMma{})), smem>>>(m, n, k, tma_a, tma_b, d_c);
      if (check("launch", cudaGetLastError()) && check("kernel", cudaDeviceSynchronize())) {
        c.resize(size_t(m) * n);
        check("copy c", cudaMemcpy(c.data(), d_c, c.size() * sizeof(float), cudaMemcpyDeviceToHost));
      }
    }
  }
  cudaFree(d_a);
  cudaFree(d_b);
  cudaFree(d_c);
  return err;
}

}  // namespace attnserve::test::sm90
