// Test kernels for the wgmma primitives (see wgmma_selftest.h). Shared memory holds the operands
// in the attention kernel's SW128 panel layout, written with ordinary stores + the proxy fence.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/common/sm90/wgmma.cuh"
#include "wgmma_selftest.h"

namespace attnserve::test::sm90 {
namespace {

namespace w = attnserve::cuda::sm90;

// Static checks of the descriptor encoding (bits [0,14) addr>>4, [16,30) LBO>>4, [32,46) SBO>>4,
// [62,64) = 1 for the 128-byte swizzle).
static_assert(w::desc_kmajor(0x400) == (0x40ull | (1ull << 16) | (64ull << 32) | (1ull << 62)));
static_assert(w::desc_mnmajor(0x2000, 16384) == (0x200ull | (1024ull << 16) | (64ull << 32) | (1ull << 62)));
// SW128: 16-byte chunk c of row r is stored at chunk c xor (r mod 8); row 9's chunk 2 lands at 2 xor 1 = 3.
static_assert(w::sw128_offset(9, 2) == 9 * 128 + 3 * 16);

// Stores row-major rows x cols (cols multiple of 64) 16-bit values as SW128 panels of rows x 128 B.
__device__ void store_panels(char* s, const uint16_t* g, int rows, int cols) {
  const int chunks = cols / 8;
  for (int idx = threadIdx.x; idx < rows * chunks; idx += blockDim.x) {
    const int r = idx / chunks, ch = idx % chunks;
    const uint4 v = *reinterpret_cast<const uint4*>(g + r * cols + ch * 8);
    *reinterpret_cast<uint4*>(s + (ch >> 3) * rows * 128 + w::sw128_offset(r, ch & 7)) = v;
  }
}

// Dynamic shared memory (the operands exceed the 48 KB static limit), rounded up to the
// 1024-byte swizzle atom; launches add 1024 bytes of slack.
__device__ char* smem_1024() {
  extern __shared__ char dyn_smem[];
  return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(dyn_smem) + 1023) & ~uintptr_t(1023));
}

template <typename T>
__global__ void __launch_bounds__(256) qk_kernel(const uint16_t* a, const uint16_t* b, float* s_out) {
#if defined(ATTNSERVE_SM90_DEVICE)
  char* sA = smem_1024();  // 128 rows x 128 K: 2 panels
  char* sB = sA + 2 * 128 * 128;
  store_panels(sA, a, 128, 128);
  store_panels(sB, b, 128, 128);
  w::fence_proxy_async();
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wg = warp >> 2;
  const uint32_t aa = cuda::ptx::smem_addr(sA) + wg * 64 * 128, ba = cuda::ptx::smem_addr(sB);
  float s[64];
  w::wg_fence();
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const uint32_t koff = (k & 3) * 32;
    w::Wgmma<T, 128>::template ss<0, 0>(s, w::desc_kmajor(aa + (k >> 2) * 128 * 128 + koff),
                                        w::desc_kmajor(ba + (k >> 2) * 128 * 128 + koff), k > 0);
  }
  w::wg_commit();
  w::wg_wait<0>();
  w::fence_regs(s);
  for (int i = 0; i < 64; ++i) s_out[(wg * 64 + w::acc_row(warp & 3, lane, i % 4)) * 128 + w::acc_col(lane, i)] = s[i];
#endif
}

template <typename T, int D>
__device__ void pv_step(float (&s)[64], uint32_t vaddr, float (&o)[D / 2]) {
#if defined(ATTNSERVE_SM90_DEVICE)
  uint32_t pa[8][4];
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) w::acc_to_a<T>(s, kk, pa[kk]);
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) w::fence_regs(pa[kk]);
  w::fence_regs(o);
  w::wg_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk)
    w::Wgmma<T, D>::template rs<1>(o, pa[kk], w::desc_mnmajor(vaddr + kk * 16 * 128, 128 * 128), 1);
  w::wg_commit();
  w::wg_wait<0>();
  w::fence_regs(o);
#endif
}

template <typename T, int D>
__global__ void __launch_bounds__(128) pv_kernel(const float* p, const uint16_t* v, float* o_out) {
#if defined(ATTNSERVE_SM90_DEVICE)
  char* sV = smem_1024();  // 128 keys x D
  store_panels(sV, v, 128, D);
  w::fence_proxy_async();
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float s[64];
  for (int i = 0; i < 64; ++i) s[i] = p[w::acc_row(warp, lane, i % 4) * 128 + w::acc_col(lane, i)];
  float o[D / 2];
  for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
  pv_step<T, D>(s, cuda::ptx::smem_addr(sV), o);
  for (int i = 0; i < D / 2; ++i) o_out[w::acc_row(warp, lane, i % 4) * D + w::acc_col(lane, i)] = o[i];
#endif
}

template <typename T>
__global__ void __launch_bounds__(128)
    qk_pv_kernel(const uint16_t* a, const uint16_t* b, const uint16_t* v, float* o_out) {
#if defined(ATTNSERVE_SM90_DEVICE)
  char* sA = smem_1024();         // 64 rows x 128 K
  char* sB = sA + 2 * 64 * 128;   // 128 keys x 128 K
  char* sV = sB + 2 * 128 * 128;  // 128 keys x 128 d
  store_panels(sA, a, 64, 128);
  store_panels(sB, b, 128, 128);
  store_panels(sV, v, 128, 128);
  w::fence_proxy_async();
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t aa = cuda::ptx::smem_addr(sA), ba = cuda::ptx::smem_addr(sB);
  float s[64];
  w::wg_fence();
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const uint32_t koff = (k & 3) * 32;
    w::Wgmma<T, 128>::template ss<0, 0>(s, w::desc_kmajor(aa + (k >> 2) * 64 * 128 + koff),
                                        w::desc_kmajor(ba + (k >> 2) * 128 * 128 + koff), k > 0);
  }
  w::wg_commit();
  w::wg_wait<0>();
  w::fence_regs(s);
  float o[64];
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  pv_step<T, 128>(s, cuda::ptx::smem_addr(sV), o);
  for (int i = 0; i < 64; ++i) o_out[w::acc_row(warp, lane, i % 4) * 128 + w::acc_col(lane, i)] = o[i];
#endif
}

template <typename X>
struct Dev {
  X* p = nullptr;
  explicit Dev(size_t n) { cudaMalloc(&p, n * sizeof(X)); }
  ~Dev() { cudaFree(p); }
};

std::string finish(float* dev_out, std::vector<float>& host_out, size_t n) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) return cudaGetErrorString(e);
  host_out.resize(n);
  e = cudaMemcpy(host_out.data(), dev_out, n * 4, cudaMemcpyDeviceToHost);
  return e == cudaSuccess ? std::string() : std::string(cudaGetErrorString(e));
}

template <typename Kernel, typename... Args>
void launch(Kernel k, int threads, int smem, Args... args) {
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem + 1024);
  k<<<1, threads, smem + 1024>>>(args...);
}

template <typename X>
void put(Dev<X>& d, const std::vector<X>& h) {
  cudaMemcpy(d.p, h.data(), h.size() * sizeof(X), cudaMemcpyHostToDevice);
}

}  // namespace

std::string run_qk_ss(bool f16, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, std::vector<float>& s) {
  Dev<uint16_t> da(a.size()), db(b.size());
  Dev<float> ds(128 * 128);
  put(da, a);
  put(db, b);
  cudaMemset(ds.p, 0xff, 128 * 128 * 4);
  const uint16_t *ap = da.p, *bp = db.p;
  const int smem = 2 * 2 * 128 * 128;
  if (f16) launch(qk_kernel<__half>, 256, smem, ap, bp, ds.p);
  else launch(qk_kernel<__nv_bfloat16>, 256, smem, ap, bp, ds.p);
  return finish(ds.p, s, 128 * 128);
}

std::string run_pv_rs(bool f16, int d, const std::vector<float>& p, const std::vector<uint16_t>& v,
                      std::vector<float>& o) {
  Dev<float> dp(p.size()), dout(size_t(64) * d);
  Dev<uint16_t> dv(v.size());
  put(dp, p);
  put(dv, v);
  cudaMemset(dout.p, 0xff, size_t(64) * d * 4);
  const int smem = (d / 64) * 128 * 128;
  const float* pp = dp.p;
  const uint16_t* vp = dv.p;
  if (d == 128) {
    if (f16) launch(pv_kernel<__half, 128>, 128, smem, pp, vp, dout.p);
    else launch(pv_kernel<__nv_bfloat16, 128>, 128, smem, pp, vp, dout.p);
  } else {
    if (f16) launch(pv_kernel<__half, 64>, 128, smem, pp, vp, dout.p);
    else launch(pv_kernel<__nv_bfloat16, 64>, 128, smem, pp, vp, dout.p);
  }
  return finish(dout.p, o, size_t(64) * d);
}

std::string run_qk_pv(bool f16, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                      const std::vector<uint16_t>& v, std::vector<float>& o) {
  Dev<uint16_t> da(a.size()), db(b.size()), dv(v.size());
  Dev<float> dout(64 * 128);
  put(da, a);
  put(db, b);
  put(dv, v);
  cudaMemset(dout.p, 0xff, 64 * 128 * 4);
  const int smem = 2 * 64 * 128 + 2 * 2 * 128 * 128;
  const uint16_t *ap = da.p, *bp = db.p, *vp = dv.p;
  if (f16) launch(qk_pv_kernel<__half>, 128, smem, ap, bp, vp, dout.p);
  else launch(qk_pv_kernel<__nv_bfloat16>, 128, smem, ap, bp, vp, dout.p);
  return finish(dout.p, o, 64 * 128);
}

}  // namespace attnserve::test::sm90
