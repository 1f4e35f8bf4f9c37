// Hopper (sm_90a) sparse MLA: wgmma with shared-memory descriptors. One CTA per (query row, block
// of 64 heads, split of the top-k list); 384 threads = a producer warpgroup and two consumer
// warpgroups.
//
//   producer (WG 0)   gathers tile t (64 top-k positions) into ring stage t % 2 once the consumers
//                     released tile t - 2: bf16 rows by cp.async (16-byte chunks), FP8-656 tokens
//                     by loads into registers, dequantized (fp8 * scale in f32, as the portable
//                     kernel does) and stored as bf16. Two threads per key share its index.
//                     Invalid slots (< 0, >= num_slots, past topk_length) are zero rows and flagged
//                     invalid in the stage's byte mask.
//   consumer WG w     S_w[64 heads][32 keys] = Q K[32 w .. 32 w + 32)^T   (m64n32k16 SS, 36 k-steps)
//                     masked, scaled to base 2; row maxima exchanged with the other warpgroup
//                     through shared memory, so both hold the tile's common running max; P_w in
//                     bf16 into its 32 columns of the shared P panel; then
//                     O_w[64 heads][256 dims 256 w ..] += P[64][64] V[64 keys][256 w ..]  (m64n128k16 SS x 2)
//                     V = the tile's first 512 columns (MN-major: no transpose needed).
//   epilogue          l = l_0 + l_1 (row sums of both warpgroups' keys, exchanged), then what the
//                     portable kernel writes: out = O / (l + exp(sink - m)), lse, max_logits; rows
//                     without a valid slot: out 0, lse = max_logits = -inf. Split rows store
//                     (O, m, l) unnormalized for the combine (params.cuh's layout).
// Heads past h_q are zero rows of Q and are never stored. Deterministic: fixed orders, no atomics.
//
// Shared memory (config.h): Q 72 KB + 2 x 72 KB ring + P 8 KB + exchange buffers + mbarriers.
// Synchronization: full[s] (producer -> consumers; cp.async arrivals fire when the copies land,
// regular arrivals publish the mask bytes and FP8's stores), empty[s] (all consumer threads ->
// producer), named barrier 1 (maxima written), 2 (P written), 3 (sums written). cp.async and st.shared
// are generic-proxy writes: the consumers run fence.proxy.async after each full wait, the writers of
// st.shared before their arrival.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "config.h"
#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/sm90/sync.cuh"
#include "cuda/common/sm90/wgmma.cuh"
#include "sparse_mla_sm90.h"

namespace attnserve::cuda::sparse_mla90 {

using sparse_mla_op::Params;
using sparse_mla_op::part_index;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

#if defined(ATTNSERVE_SM90_DEVICE)
// 2^x, one MUFU.EX2 (ex2(-inf) = 0).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Descriptor plus a byte offset: the start address sits in the low 14 bits (address / 16 of a
// shared memory below 256 KB), so a constant offset is one 32-bit add, no carry.
__device__ __forceinline__ uint64_t desc_plus(uint64_t d, uint32_t byte_off) {
  return (d & 0xFFFFFFFF00000000ull) | uint64_t(uint32_t(d) + (byte_off >> 4));
}

// Byte offset of 16-byte chunk `ch` (0..71 along the 576 columns) of row `r` of a 9-panel tile.
__device__ __forceinline__ uint32_t tile_chunk(int r, int ch) {
  return uint32_t((ch >> 3) * kPanelBytes) + sm90::sw128_offset(r, ch & 7);
}

// Shared memory rounded up to the 1024-byte swizzle atom (descriptor base offset 0).
__device__ __forceinline__ char* smem_base() {
  extern __shared__ char smem_raw[];
  return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
}

// Dequantizes 16 e4m3 values (one 16-byte chunk) times `scale` into 16 bf16 (two chunks).
__device__ __forceinline__ void dequant16(const uint4 u, float scale, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
  uint32_t o[8];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 f0 = fp8x2_to_float2(uint16_t(w[e] & 0xffffu));
    const float2 f1 = fp8x2_to_float2(uint16_t(w[e] >> 16));
    o[2 * e] = ptx::pack2<__nv_bfloat16>(f0.x * scale, f0.y * scale);
    o[2 * e + 1] = ptx::pack2<__nv_bfloat16>(f1.x * scale, f1.y * scale);
  }
  lo = make_uint4(o[0], o[1], o[2], o[3]);
  hi = make_uint4(o[4], o[5], o[6], o[7]);
}

// Half of one FP8-656 token in registers (a producer thread's share), then dequantized into the
// bf16 tile. An invalid slot (sid < 0) is zeros.
struct Fp8Half {
  uint4 lat[16], rope[4];
  float2 scale;
  __device__ __forceinline__ void fetch(const Params& p, int sid, int half) {
    if (sid >= 0) {
      const uint8_t* src = p.kv + int64_t(sid) * p.kv_row_bytes;
      const uint4* l = reinterpret_cast<const uint4*>(src) + 16 * half;
      const uint4* r = reinterpret_cast<const uint4*>(src + 528) + 4 * half;
#pragma unroll
      for (int i = 0; i < 16; ++i) lat[i] = __ldg(l + i);
#pragma unroll
      for (int i = 0; i < 4; ++i) rope[i] = __ldg(r + i);
      scale = __ldg(reinterpret_cast<const float2*>(src + 512) + half);
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) lat[i] = make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int i = 0; i < 4; ++i) rope[i] = make_uint4(0, 0, 0, 0);
      scale = make_float2(0.f, 0.f);
    }
  }
  // Into the key's row of a 9-panel bf16 tile (generic base pointer of the stage).
  __device__ __forceinline__ void store(char* tile, int key, int half) const {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      uint4 lo, hi;
      dequant16(lat[i], i < 8 ? scale.x : scale.y, lo, hi);
      const int ch = 32 * half + 2 * i;  // bf16 chunk of dims 8 ch ..
      *reinterpret_cast<uint4*>(tile + tile_chunk(key, ch)) = lo;
      *reinterpret_cast<uint4*>(tile + tile_chunk(key, ch + 1)) = hi;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) *reinterpret_cast<uint4*>(tile + tile_chunk(key, 64 + 4 * half + i)) = rope[i];
  }
};
#endif

template <bool kFp8>
__global__ void __launch_bounds__(kThreads, 1) sparse_mla90_kernel(const Params p) {
#if defined(ATTNSERVE_SM90_DEVICE)
  constexpr SmemLayout L{};
  char* smem = smem_base();
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const int64_t row = blockIdx.x / p.head_blocks;
  const int h0 = int(blockIdx.x % p.head_blocks) * kHeadBlock;
  const int split = int(blockIdx.y);

  int n = p.topk;
  if (p.topk_length) {
    const int v = p.topk_length[row * p.topk_length_stride];
    n = v < 0 ? 0 : (v > p.topk ? p.topk : v);
  }
  // This CTA's tiles: [tile0, tile0 + num_tiles) of the row; none when topk_length ends before them.
  const int row_tiles = (n + kTileKeys - 1) / kTileKeys;
  const int tile0 = split * p.split_tiles;
  const int num_tiles = max(0, min(row_tiles - tile0, p.split_tiles));

  const uint32_t sbase = ptx::smem_addr(smem);
  const uint32_t sQ = sbase + uint32_t(L.q), sRing = sbase + uint32_t(L.ring), sP = sbase + uint32_t(L.p);
  float* sMax = reinterpret_cast<float*>(smem + L.max);  // [2][64]
  float* sSum = reinterpret_cast<float*>(smem + L.sum);  // [2][64]
  uint8_t* sValid = reinterpret_cast<uint8_t*>(smem + L.valid);
  const uint32_t bars = sbase + uint32_t(L.bars);
  auto full = [&](int s) { return bars + uint32_t(8 * s); };
  auto empty = [&](int s) { return bars + uint32_t(8 * (kStages + s)); };
  const uint32_t qbar = bars + uint32_t(8 * 2 * kStages);
  auto stage = [&](int s) { return sRing + uint32_t(s) * uint32_t(kTileBytes); };
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      // bf16: 128 cp.async arrivals + 64 mask-byte arrivals; FP8: 128 arrivals after the stores.
      sm90::mbar_init(full(s), kFp8 ? 128 : 192);
      sm90::mbar_init(empty(s), 256);  // every consumer thread, after its wgmmas read the stage
    }
    sm90::mbar_init(qbar, 128);
  }
  __syncthreads();

  if (wg == 0) {
    // ---------------- producer
    sm90::setmaxnreg_dec<kProducerRegs>();
    if (num_tiles == 0) return;
    const int key = tid >> 1, half = tid & 1;
    // Q block (zero rows past h_q): thread = (head, half of the chunks).
    for (int ch = half; ch < kDimQk / 8; ch += 2) {
      const int head = h0 + key;
      const bool ok = head < p.h_q;
      const uint16_t* src = ok ? p.q + row * p.q_row_stride + int64_t(head) * p.q_head_stride + ch * 8 : p.q;
      ptx::cp_async_16(sQ + tile_chunk(key, ch), src, ok ? 16 : 0);
    }
    sm90::cp_async_mbar_arrive(qbar);
    const int32_t* idx_row = p.indices + row * p.idx_row_stride;
    auto slot_of = [&](int t) {  // the key's slot in local tile t, -1 when invalid
      const int pos = (tile0 + t) * kTileKeys + key;
      int sid = -1;
      if (t < num_tiles && pos < n) {
        const int v = idx_row[int64_t(pos) * p.idx_col_stride];
        if (v >= 0 && v < p.num_slots) sid = v;
      }
      return sid;
    };
    if constexpr (!kFp8) {
      int sid = slot_of(0);
      for (int t = 0; t < num_tiles; ++t) {
        const int s = t % kStages;
        const int next = slot_of(t + 1);  // in flight during the wait and the copies
        if (t >= kStages) sm90::mbar_wait(empty(s), ((t / kStages) - 1) & 1);
        const uint32_t dst = stage(s);
        const uint8_t* src = p.kv + int64_t(sid < 0 ? 0 : sid) * p.kv_row_bytes;
#pragma unroll 4
        for (int ch = half; ch < kDimQk / 8; ch += 2)
          ptx::cp_async_16(dst + tile_chunk(key, ch), src + ch * 16, sid >= 0 ? 16 : 0);
        sm90::cp_async_mbar_arrive(full(s));
        if (half == 0) {
          sValid[s * kTileKeys + key] = sid >= 0;
          sm90::mbar_arrive(full(s));  // release: the mask byte is visible with the phase
        }
        sid = next;
      }
    } else {
      // Half h of a token: latent dims [256 h, 256 h + 256) (16 chunks of e4m3, scales 2h and 2h + 1)
      // and rope dims [32 h, 32 h + 32) (4 chunks of bf16). The raw bytes of tile t + 1 are loaded
      // into registers right after tile t is stored, so their latency runs under the wait for the
      // stage (the consumers' math on the previous tile), not after it.
      Fp8Half raw;
      int sid = slot_of(0);
      raw.fetch(p, sid, half);
      int sid_next = slot_of(1);
      for (int t = 0; t < num_tiles; ++t) {
        const int s = t % kStages;
        const int sid_after = slot_of(t + 2);
        if (t >= kStages) sm90::mbar_wait(empty(s), ((t / kStages) - 1) & 1);
        raw.store(smem + L.ring + std::size_t(s) * kTileBytes, key, half);
        if (half == 0) sValid[s * kTileKeys + key] = sid >= 0;
        sm90::fence_proxy_async();  // the stores, seen by wgmma's async proxy
        sm90::mbar_arrive(full(s));
        sid = sid_next;
        sid_next = sid_after;
        if (t + 1 < num_tiles) raw.fetch(p, sid, half);
      }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }

  // ---------------- consumers
  sm90::setmaxnreg_inc<kConsumerRegs>();
  const int w = wg - 1, wwarp = warp & 3;
  const int r0 = 16 * wwarp + (lane >> 2), r1 = r0 + 8;  // the thread's two heads (CTA-local)
  float o[2][64];                                        // dims 256 w + 128 j + acc_col(lane, i)
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int i = 0; i < 64; ++i) o[j][i] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;  // base-2 scaled units
  const float scale = p.scale_log2;

  if (num_tiles > 0) {
    sm90::mbar_wait(qbar, 0);
    const uint64_t dq = sm90::desc_kmajor(sQ), dp = sm90::desc_kmajor(sP);
    for (int t = 0; t < num_tiles; ++t) {
      const int s = t % kStages;
      sm90::mbar_wait(full(s), (t / kStages) & 1);
      sm90::fence_proxy_async();  // the producer's bytes, seen through the async proxy
      const uint32_t sK = stage(s);

      // S = Q K_w^T: k-step k lives in panel k / 4 at byte 32 (k % 4); K rows 32 w .. start 4 KB in.
      float sacc[16];
      {
        const uint64_t dk = sm90::desc_kmajor(sK + uint32_t(32 * w * 128));
        sm90::wg_fence();
#pragma unroll
        for (int k = 0; k < kDimQk / 16; ++k) {
          const uint32_t off = uint32_t((k >> 2) * kPanelBytes + (k & 3) * 32);
          sm90::Wgmma<__nv_bfloat16, 32>::ss<0, 0>(sacc, desc_plus(dq, off), desc_plus(dk, off), k > 0 ? 1 : 0);
        }
        sm90::wg_commit();
        sm90::wg_wait<0>();
        sm90::fence_regs(sacc);
      }

      // Mask, scale, the tile's row maxima over both warpgroups' keys.
      const uint8_t* valid = sValid + s * kTileKeys + 32 * w + 2 * (lane & 3);
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const int c = 8 * (i / 4) + (i & 1);
        sacc[i] = valid[c] ? sacc[i] * scale : -INFINITY;
        if (i & 2) mx1 = fmaxf(mx1, sacc[i]);
        else mx0 = fmaxf(mx0, sacc[i]);
      }
      mx0 = ptx::quad_max(mx0);
      mx1 = ptx::quad_max(mx1);
      if ((lane & 3) == 0) {
        sMax[64 * w + r0] = mx0;
        sMax[64 * w + r1] = mx1;
      }
      sm90::named_sync(1, 256);
      mx0 = fmaxf(mx0, sMax[64 * (1 - w) + r0]);
      mx1 = fmaxf(mx1, sMax[64 * (1 - w) + r1]);
      const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
      const float ms0 = mn0 == -INFINITY ? 0.f : mn0, ms1 = mn1 == -INFINITY ? 0.f : mn1;
      const float al0 = ex2(m0 - ms0), al1 = ex2(m1 - ms1);  // m = -inf (nothing seen yet): 0
      m0 = mn0;
      m1 = mn1;
      float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        sacc[i] = ex2(sacc[i] - ((i & 2) ? ms1 : ms0));
        if (i & 2) ps1 += sacc[i];
        else ps0 += sacc[i];
      }
      l0 = fmaf(l0, al0, ps0);
      l1 = fmaf(l1, al1, ps1);
      // P_w into columns 32 w .. of the P panel (K-major A operand of P V).
      {
        char* pp = smem + L.p;
#pragma unroll
        for (int i = 0; i < 16; i += 2) {
          const int c = 32 * w + 8 * (i / 4) + 2 * (lane & 3);  // even column
          const int r = (i & 2) ? r1 : r0;
          *reinterpret_cast<uint32_t*>(pp + sm90::sw128_offset(r, c >> 3) + 2 * (c & 7)) =
              ptx::pack2<__nv_bfloat16>(sacc[i], sacc[i + 1]);
        }
      }
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int i = 0; i < 64; i += 4) {
          o[j][i] *= al0;
          o[j][i + 1] *= al0;
          o[j][i + 2] *= al1;
          o[j][i + 3] *= al1;
        }
      sm90::fence_proxy_async();  // P's stores, seen by the async proxy
      sm90::named_sync(2, 256);

      // O_w += P V: 16 keys per k-step (2 KB of V rows, 32 bytes of P); N 128 = two 64-wide panels.
      sm90::fence_regs(o[0]);
      sm90::fence_regs(o[1]);
      sm90::wg_fence();
#pragma unroll
      for (int kk = 0; kk < kTileKeys / 16; ++kk)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const uint64_t dv =
              sm90::desc_mnmajor(sK + uint32_t((4 * w + 2 * j) * kPanelBytes + kk * 16 * 128), uint32_t(kPanelBytes));
          sm90::Wgmma<__nv_bfloat16, 128>::ss<0, 1>(o[j], desc_plus(dp, uint32_t(32 * kk)), dv, 1);
        }
      sm90::wg_commit();
      sm90::wg_wait<0>();
      sm90::fence_regs(o[0]);
      sm90::fence_regs(o[1]);
      sm90::mbar_arrive(empty(s));
    }
    // Row sums: this warpgroup's keys (quad), then the other's.
    l0 = ptx::quad_sum(l0);
    l1 = ptx::quad_sum(l1);
    if ((lane & 3) == 0) {
      sSum[64 * w + r0] = l0;
      sSum[64 * w + r1] = l1;
    }
    sm90::named_sync(3, 256);
    l0 += sSum[64 * (1 - w) + r0];
    l1 += sSum[64 * (1 - w) + r1];
  }

  // ---------------- epilogue
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int head = h0 + (r ? r1 : r0);
    if (head >= p.h_q) continue;
    const float m = r ? m1 : m0, l = r ? l1 : l0;
    const bool empty_row = m == -INFINITY;
    if (p.num_splits > 1) {  // partial state; an empty split writes only m = -inf (its O is never read)
      const int64_t part = part_index(split, row, head, p.rows, p.h_q);
      if (w == 0 && (lane & 3) == 0) p.part_ml[part] = make_float2(m, l);
      if (!empty_row) {
        float* dst = p.part_o + part * kDimV + 256 * w;
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int i = 0; i < 64; i += 4) {
            const int c = 128 * j + sm90::acc_col(lane, i);
            *reinterpret_cast<float2*>(dst + c) = make_float2(o[j][i + 2 * r], o[j][i + 2 * r + 1]);
          }
      }
      continue;
    }
    float inv = 0.f;
    if (!empty_row) {
      float denom = l;
      if (p.sink) denom += exp2f(p.sink[int64_t(head) * p.sink_stride] * kLog2e - m);
      inv = 1.f / denom;
    }
    uint16_t* dst = p.out + row * p.out_row_stride + int64_t(head) * p.out_head_stride + 256 * w;
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int i = 0; i < 64; i += 4) {
        const int c = 128 * j + sm90::acc_col(lane, i);
        *reinterpret_cast<uint32_t*>(dst + c) =
            ptx::pack2<__nv_bfloat16>(o[j][i + 2 * r] * inv, o[j][i + 2 * r + 1] * inv);
      }
    if (w == 0 && (lane & 3) == 0) {
      if (p.lse)
        p.lse[row * p.lse_row_stride + int64_t(head) * p.lse_head_stride] =
            empty_row ? -INFINITY : (m + log2f(l)) * kLn2;
      if (p.max_logits)
        p.max_logits[row * p.ml_row_stride + int64_t(head) * p.ml_head_stride] = empty_row ? -INFINITY : m * kLn2;
    }
  }
#endif
}

template <bool kFp8>
void launch(const Params& p, cudaStream_t stream) {
  auto* kernel = sparse_mla90_kernel<kFp8>;
  static const bool configured = [&] {
    ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes())));
    return true;
  }();
  (void)configured;
  const dim3 grid(unsigned(p.rows * p.head_blocks), unsigned(p.num_splits));
  kernel<<<grid, kThreads, smem_bytes(), stream>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace attnserve::cuda::sparse_mla90
