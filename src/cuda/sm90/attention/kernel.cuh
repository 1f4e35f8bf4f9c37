// Hopper (sm_90a) paged attention for prefill/extend: wgmma with shared-memory descriptors.
//
// One CTA = (m-block of 128 packed rows, kv head, request); packed row pr = q_row * group + head
// as in the portable kernel, so a K/V tile is read once for all query heads of its KV head.
// 256 threads = 2 warpgroups; warpgroup w owns packed rows 64w..64w+63 and every key of a tile.
// All threads load: K/V tiles of 128 keys stream through a 2-stage cp.async pipeline, gathered
// per token through the page table (16-byte chunks per token row: pages of any size rule out
// TMA tiles), into 128-byte swizzled panels (common/wgmma.cuh) that wgmma reads directly:
//   S[64 x 128]  = Q[64 x d] K^T       m64n128k16, A = Q (smem, K-major), B = K (smem, K-major)
//   O[64 x d]   += P[64 x 128] V       m64n{d}k16,  A = P (registers), B = V (smem, MN-major)
// The S accumulator converts to P's A fragments in registers (acc_to_a). Online softmax in base 2.
// Semantics match the portable kernel and the CPU oracle: masked keys contribute nothing; a row
// with no visible key writes 0 and lse = -inf; invalid page ids read as zero keys.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "config.h"
#include "cuda/common/ptx.cuh"
#include "cuda/sm80/attention/params.cuh"
#include "cuda/sm90/common/wgmma.cuh"

namespace attnserve::cuda::attn90 {

using attn::Params;

template <int D>
struct Traits {
  static constexpr int kPanels = D / 64;                   // 64-column SW128 panels of a row
  static constexpr int kChunks = D / 8;                    // 16-byte chunks of a row
  static constexpr int kQPanelBytes = kRows * 128;         // one panel of the Q tile
  static constexpr int kKvPanelBytes = kTileKeys * 128;    // one panel of a K or V tile
  static constexpr int kQBytes = kPanels * kQPanelBytes;
  static constexpr int kKvBytes = kPanels * kKvPanelBytes;
  static constexpr int kLoadStep = kThreads / kChunks;     // tile rows covered per load pass
  static constexpr int kRowsPerThread = kTileKeys / kLoadStep;
  static constexpr int kQRowsPerThread = kRows / kLoadStep;
  static constexpr int kSAcc = kTileKeys / 2;              // f32 S accumulators per thread (m64n128)
  static constexpr int kOAcc = D / 2;                      // f32 O accumulators per thread (m64nD)
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(kThreads % kChunks == 0 && kTileKeys % kLoadStep == 0, "load mapping");
};

// Byte offset of chunk `ch` (0..D/8) of tile row `row` in a panelled SW128 tile.
template <int PANEL_BYTES>
__device__ __forceinline__ uint32_t tile_offset(int row, int ch) {
  return uint32_t((ch >> 3) * PANEL_BYTES) + sm90::sw128_offset(row, ch & 7);
}

// Key range [lo, hi] seen by query row q_row (of q_len) over k_len keys (attention.h contract).
__device__ __forceinline__ void row_bounds(const Params& p, int q_row, int q_len, int k_len, int& lo, int& hi) {
  const int pos = k_len - q_len + q_row;
  hi = k_len - 1;
  if (p.causal) hi = min(hi, pos);
  if (p.window_right >= 0) hi = min(hi, pos + p.window_right);
  lo = 0;
  if (p.window_left >= 0) lo = max(lo, pos - p.window_left);
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1) attention_sm90_kernel(const Params p) {
#if defined(ATTNSERVE_SM90_DEVICE)
  using Tr = Traits<D>;
  extern __shared__ char smem_raw[];
  // Swizzle atoms need 1024-byte alignment (descriptor base offset 0); the launch adds the slack.
  char* smem = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wg = warp >> 2, wwarp = warp & 3;
  // Causal: the last m-blocks see the most keys; launch them first so the tail is short ones.
  const int mb = int(gridDim.x) - 1 - int(blockIdx.x);
  const int hk = blockIdx.y, r = blockIdx.z;

  const int q_start = p.cu_seqlens_q[r];
  const int q_len = p.cu_seqlens_q[r + 1] - q_start;
  const int k_len = p.cache_seqlens[r];
  const int rows_total = q_len * p.group;
  const int row0 = mb * kRows;
  if (row0 >= rows_total) return;  // uniform over the CTA

  // ---- keys the CTA visits: the union of its rows' ranges; tiles start at multiples of 128.
  int blo, bhi, unused;
  row_bounds(p, row0 / p.group, q_len, k_len, blo, unused);
  row_bounds(p, (min(row0 + kRows, rows_total) - 1) / p.group, q_len, k_len, unused, bhi);
  const int k_begin = max(blo, 0) & ~(kTileKeys - 1);
  const int k_end = bhi + 1;
  const int n_tiles = k_end > k_begin ? (k_end - k_begin + kTileKeys - 1) / kTileKeys : 0;

  char* sQ = smem;                 // [panels][128 rows][128 B]
  char* sKV = smem + Tr::kQBytes;  // [stages][K, V][panels][128 keys][128 B]

  // ---- Q: packed rows -> SW128 panels; rows past the request are zero-filled.
  const int lch = tid % Tr::kChunks, lrow0 = tid / Tr::kChunks;
#pragma unroll
  for (int i = 0; i < Tr::kQRowsPerThread; ++i) {
    const int row = lrow0 + i * Tr::kLoadStep;
    const int pr = row0 + row;
    const bool valid = pr < rows_total;
    const char* src = p.q;
    if (valid) {
      const int qr = pr / p.group, h = hk * p.group + (pr - qr * p.group);
      src = p.q + ((int64_t(q_start + qr) * p.q_st + int64_t(h) * p.q_sh) * 2 + lch * 16);
    }
    ptx::cp_async_16(ptx::smem_addr(sQ + tile_offset<Tr::kQPanelBytes>(row, lch)), src, valid ? 16 : 0);
  }

  // ---- K/V tiles: thread loads chunk lch of tile rows lrow0 + i * kLoadStep. Page ids for tile
  // t + 1 are read into registers one iteration ahead, so their latency hides under tile t's math.
  const int* pt = p.page_table + int64_t(r) * p.pt_st;
  const char* gK = p.k + int64_t(hk) * p.k_sh + lch * 16;
  const char* gV = p.v + int64_t(hk) * p.v_sh + lch * 16;
  int pages[Tr::kRowsPerThread];  // page id per loaded row, -1: zero-fill
  auto read_pages = [&](int tile) {
    const int j0 = k_begin + tile * kTileKeys + lrow0;
#pragma unroll
    for (int i = 0; i < Tr::kRowsPerThread; ++i) {
      const int j = j0 + i * Tr::kLoadStep;
      const int pi = p.page_shift >= 0 ? (j >> p.page_shift) : j / p.page_size;
      pages[i] = (j < k_end && pi < p.max_pages) ? __ldg(pt + pi) : -1;
    }
  };
  auto issue = [&](int tile) {
    char* dK = sKV + (tile % kStages) * 2 * Tr::kKvBytes;
    char* dV = dK + Tr::kKvBytes;
    const int j0 = k_begin + tile * kTileKeys + lrow0;
#pragma unroll
    for (int i = 0; i < Tr::kRowsPerThread; ++i) {
      const int row = lrow0 + i * Tr::kLoadStep;
      const int j = j0 + i * Tr::kLoadStep;
      const int in_page = p.page_shift >= 0 ? (j & ((1 << p.page_shift) - 1)) : j % p.page_size;
      const int page = pages[i];
      const bool ok = page >= 0 && page < p.num_pages;
      const int64_t slot = ok ? int64_t(page) * p.page_size + in_page : 0;
      const uint32_t off = tile_offset<Tr::kKvPanelBytes>(row, lch);
      ptx::cp_async_16(ptx::smem_addr(dK + off), gK + slot * p.k_stok, ok ? 16 : 0);
      ptx::cp_async_16(ptx::smem_addr(dV + off), gV + slot * p.v_stok, ok ? 16 : 0);
    }
  };

  // ---- this thread's two rows (accumulator rows lane/4 and lane/4 + 8 of its warp's 16).
  const int rl0 = wg * 64 + wwarp * 16 + (lane >> 2), rl1 = rl0 + 8;
  int lo0, hi0, lo1, hi1;
  {
    const int pr0 = row0 + rl0, pr1 = row0 + rl1;
    if (pr0 < rows_total) row_bounds(p, pr0 / p.group, q_len, k_len, lo0, hi0); else { lo0 = 0; hi0 = -1; }
    if (pr1 < rows_total) row_bounds(p, pr1 / p.group, q_len, k_len, lo1, hi1); else { lo1 = 0; hi1 = -1; }
  }
  const int lo_max = max(lo0, lo1), hi_min = min(hi0, hi1);
  const float s_log2 = p.scale_log2;
  const float s_cap_in = p.softcap > 0.f ? p.scale_log2 / (p.softcap * 1.4426950408889634f) : 0.f;
  const float s_cap_out = p.softcap * 1.4426950408889634f;

  float o[Tr::kOAcc];
#pragma unroll
  for (int i = 0; i < Tr::kOAcc; ++i) o[i] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

  // ---- prologue: group 0 = Q + tile 0; page ids of tile 1 in registers.
  if (n_tiles > 0) {
    read_pages(0);
    issue(0);
  }
  ptx::cp_async_commit();
  if (n_tiles > 1) read_pages(1);

  const uint32_t sQa = ptx::smem_addr(sQ) + uint32_t(wg * 64 * 128);  // this warpgroup's 64 rows
  for (int t = 0; t < n_tiles; ++t) {
    if (t + 1 < n_tiles) issue(t + 1);
    ptx::cp_async_commit();
    if (t + 2 < n_tiles) read_pages(t + 2);
    ptx::cp_async_wait<1>();         // this thread's copies of Q and tile t have landed
    sm90::fence_proxy_async();       // ... and are visible to wgmma's async proxy
    __syncthreads();                 // ... for every thread's copies

    const uint32_t sKa = ptx::smem_addr(sKV + (t % kStages) * 2 * Tr::kKvBytes);
    const uint32_t sVa = sKa + Tr::kKvBytes;

    // S = Q K^T: d/16 k-steps; step k lives in panel k/4 at byte 32 * (k % 4) of each row.
    float s[Tr::kSAcc];
    sm90::wg_fence();
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      const uint32_t koff = uint32_t((k & 3) * 32);
      const uint64_t da = sm90::desc_kmajor(sQa + uint32_t((k >> 2) * Tr::kQPanelBytes) + koff);
      const uint64_t db = sm90::desc_kmajor(sKa + uint32_t((k >> 2) * Tr::kKvPanelBytes) + koff);
      sm90::Wgmma<T, kTileKeys>::template ss<0, 0>(s, da, db, k > 0 ? 1 : 0);
    }
    sm90::wg_commit();
    sm90::wg_wait<0>();
    sm90::fence_regs(s);

    // Scores in base 2, masked; online softmax over the thread's two rows (a quad shares a row).
    const int kbase = k_begin + t * kTileKeys;
    const bool need_mask = kbase < lo_max || kbase + kTileKeys - 1 > hi_min;
#pragma unroll
    for (int i = 0; i < Tr::kSAcc; ++i) {
      float x = s[i];
      x = p.softcap > 0.f ? s_cap_out * tanhf(x * s_cap_in) : x * s_log2;
      if (need_mask) {
        const int j = kbase + sm90::acc_col(lane, i);
        const bool vis = (i & 2) == 0 ? (j >= lo0 && j <= hi0) : (j >= lo1 && j <= hi1);
        x = vis ? x : -INFINITY;
      }
      s[i] = x;
    }
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int i = 0; i < Tr::kSAcc; i += 4) {
      mx0 = fmaxf(mx0, fmaxf(s[i], s[i + 1]));
      mx1 = fmaxf(mx1, fmaxf(s[i + 2], s[i + 3]));
    }
    mx0 = ptx::quad_max(mx0);
    mx1 = ptx::quad_max(mx1);
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    const float b0 = mn0 == -INFINITY ? 0.f : mn0, b1 = mn1 == -INFINITY ? 0.f : mn1;
    const float al0 = exp2f(m0 - b0), al1 = exp2f(m1 - b1);
    m0 = mn0;
    m1 = mn1;
    float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
    for (int i = 0; i < Tr::kSAcc; i += 4) {
      s[i] = exp2f(s[i] - b0);
      s[i + 1] = exp2f(s[i + 1] - b0);
      s[i + 2] = exp2f(s[i + 2] - b1);
      s[i + 3] = exp2f(s[i + 3] - b1);
      ps0 += s[i] + s[i + 1];
      ps1 += s[i + 2] + s[i + 3];
    }
    l0 = l0 * al0 + ps0;
    l1 = l1 * al1 + ps1;
#pragma unroll
    for (int i = 0; i < Tr::kOAcc; i += 4) {
      o[i] *= al0;
      o[i + 1] *= al0;
      o[i + 2] *= al1;
      o[i + 3] *= al1;
    }

    // O += P V: P's A fragments built before the fence (wgmma must see finished registers).
    uint32_t pa[kTileKeys / 16][4];
#pragma unroll
    for (int kk = 0; kk < kTileKeys / 16; ++kk) sm90::acc_to_a<T>(s, kk, pa[kk]);
#pragma unroll
    for (int kk = 0; kk < kTileKeys / 16; ++kk) sm90::fence_regs(pa[kk]);
    sm90::fence_regs(o);
    sm90::wg_fence();
#pragma unroll
    for (int kk = 0; kk < kTileKeys / 16; ++kk) {
      // 16 keys = two 8-key groups of 1024 bytes; N = d spans the panels (LBO = panel bytes).
      const uint64_t db = sm90::desc_mnmajor(sVa + uint32_t(kk * 16 * 128), Tr::kKvPanelBytes);
      sm90::Wgmma<T, D>::template rs<1>(o, pa[kk], db, 1);
    }
    sm90::wg_commit();
    sm90::wg_wait<0>();
    sm90::fence_regs(o);
    __syncthreads();  // every warpgroup is done with stage t % 2 before iteration t + 1 refills it
  }
  ptx::cp_async_wait<0>();

  // ---- epilogue: normalize and write the thread's two rows straight from the accumulators.
  l0 = ptx::quad_sum(l0);
  l1 = ptx::quad_sum(l1);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int pr = row0 + (half ? rl1 : rl0);
    if (pr >= rows_total) continue;
    const float L = half ? l1 : l0, M = half ? m1 : m0;
    const float sc = L > 0.f ? 1.f / L : 0.f;
    const int qr = pr / p.group, h = hk * p.group + (pr - qr * p.group);
    const int64_t tok = q_start + qr;
    char* orow = p.out + (tok * p.o_st + int64_t(h) * p.o_sh) * 2;
#pragma unroll
    for (int i = 0; i < Tr::kOAcc; i += 4) {
      const int c = sm90::acc_col(lane, i);
      const uint32_t w = ptx::pack2<T>(o[i + 2 * half] * sc, o[i + 2 * half + 1] * sc);
      *reinterpret_cast<uint32_t*>(orow + c * 2) = w;
    }
    if (p.lse && (lane & 3) == 0)
      p.lse[tok * p.lse_st + int64_t(h) * p.lse_sh] = L > 0.f ? (M + log2f(L)) * 0.6931471805599453f : -INFINITY;
  }
#endif
}

template <typename T, int D>
void launch(const Params& p, int m_blocks, int batch, cudaStream_t stream) {
  auto kernel = attention_sm90_kernel<T, D>;
  static const bool configured = [&] {
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes(D)));
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned(m_blocks), unsigned(p.h_kv), unsigned(batch));
  kernel<<<grid, kThreads, smem_bytes(D), stream>>>(p);
}

}  // namespace attnserve::cuda::attn90
