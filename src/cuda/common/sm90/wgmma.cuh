// Hopper warpgroup MMA (wgmma, sm_90a): shared-memory matrix descriptors for the 128-byte swizzled
// layout, the mma_async wrappers (generated: wgmma_ops.inc), fences, and the fragment maps the
// attention kernel relies on. tests/gpu/sm90/wgmma_selftest.cu runs each of them on tiny GEMMs.
//
// Shared-memory tile layout ("SW128 panel"): a matrix of R rows x 64 16-bit elements occupies
// R * 128 bytes, row r at r * 128, and its 16-byte chunk c (elements 8c..8c+7) stored at chunk
// position c ^ (r % 8). Eight rows form one 1024-byte swizzle atom, so panel bases must be
// 1024-byte aligned (descriptor base_offset 0). Wider matrices (head dim 128) are two panels.
//
// The same bytes serve both operand majors (CUTLASS canonical layouts, mma_sm90_desc.hpp):
//  - K-major (rows = M or N, the 64 elements along K): Q as A and K as B of S = Q K^T.
//    LBO unused (1), SBO = 1024 (next 8 rows). A k16 step inside the panel adds 32 bytes to the
//    start address: the hardware applies the XOR to the final address bits, as the swizzle did.
//  - MN-major (rows = K, the 64 elements along N): V [keys][d] as B of O = P V (trans-b = 1).
//    LBO = bytes between 64-column panels along N, SBO = 1024 (next 8 keys along K); a k16 step
//    (16 keys) adds 2048 bytes.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"

namespace attnserve::cuda::sm90 {

// Byte offset of 16-byte chunk `c` (0..7) of row `r` inside an SW128 panel.
__host__ __device__ constexpr uint32_t sw128_offset(int r, int c) { return uint32_t(r * 128 + ((c ^ (r & 7)) << 4)); }

// Descriptor of an SW128 operand starting at shared address `saddr` (bytes, 16-aligned; the atom
// holding it 1024-aligned). lbo/sbo in bytes. Bits: [0,14) addr>>4, [16,30) LBO>>4,
// [32,46) SBO>>4, [49,52) base offset (0), [62,64) layout (1 = 128-byte swizzle).
__host__ __device__ constexpr uint64_t make_desc_sw128(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((saddr & 0x3FFFFu) >> 4) | (uint64_t((lbo >> 4) & 0x3FFFu) << 16) |
         (uint64_t((sbo >> 4) & 0x3FFFu) << 32) | (uint64_t(1) << 62);
}
// K-major operand (Q, K): rows of the tile at 128-byte pitch, 8-row groups 1024 bytes apart.
__host__ __device__ constexpr uint64_t desc_kmajor(uint32_t saddr) { return make_desc_sw128(saddr, 16, 1024); }
// MN-major operand (V as B): `panel_bytes` between consecutive 64-wide N panels.
__host__ __device__ constexpr uint64_t desc_mnmajor(uint32_t saddr, uint32_t panel_bytes) {
  return make_desc_sw128(saddr, panel_bytes, 1024);
}

template <typename T, int N>
struct Wgmma;  // specializations in wgmma_ops.inc: ss<TA, TB>(d, desc_a, desc_b, scale_d), rs<TB>(d, a, desc_b,
               // scale_d)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTNSERVE_SM90_DEVICE 1
#include "wgmma_fp8_ops.inc"  // WgmmaFp8<N>: e4m3 x e4m3 -> f32, m64nNk32
#include "wgmma_ops.inc"

// Orders this thread's earlier register and shared-memory accesses before the warpgroup's next
// wgmma reads them (required before the first wgmma and whenever A/D registers were touched).
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Generic-proxy shared-memory writes (st.shared, cp.async) made visible to the async proxy that
// wgmma reads through; each writing thread runs it, then a barrier.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
#endif

// Pins accumulator registers in place around an async wgmma region: volatile asm statements keep
// their order, so no read of `d` moves above the wait and no write moves below the issue.
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// Accumulator fragment of m64nN (f32), per thread of the warpgroup: element i = 4 * nb + e sits at
//   row = 16 * warp_in_group + lane / 4 + 8 * (e / 2),  col = 8 * nb + 2 * (lane % 4) + (e % 2).
__host__ __device__ constexpr int acc_row(int warp, int lane, int e) { return 16 * warp + lane / 4 + 8 * (e / 2); }
__host__ __device__ constexpr int acc_col(int lane, int i) { return 8 * (i / 4) + 2 * (lane % 4) + (i % 2); }

// A-register fragment (m64k16) for k-step kk from an f32 accumulator whose columns are the K
// dimension: the accumulator's columns 16kk..16kk+15 are exactly the A fragment's
//   a0 = (row g, k 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
// with g = lane / 4, t = lane % 4 (the mma.sync m16n8k16 A layout, per warp of 16 rows).
template <typename T, int NACC>
__device__ __forceinline__ void acc_to_a(const float (&s)[NACC], int kk, uint32_t (&a)[4]) {
  a[0] = ptx::pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
  a[1] = ptx::pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
  a[2] = ptx::pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
  a[3] = ptx::pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
}

}  // namespace attnserve::cuda::sm90
