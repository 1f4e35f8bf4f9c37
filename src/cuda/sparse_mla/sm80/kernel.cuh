// Sparse MLA kernel (sm80+, mma.sync): one CTA per (query row, block of HB heads, split of the top-k
// list), 8 warps.
//
//   per tile of 32 top-k positions (a ring of `stages` tiles in flight, cp.async):
//     gather   the tile's slots (indices < 0, >= num_slots, or past topk_length: zero rows, masked);
//              FP8-656 tokens land raw and are dequantized into one bf16 tile (fp8 * scale, exact for
//              the power-of-two scales of the quantizer)
//     QK^T     warps = (head tile m) x (key group of 16) x (k-split of 576 / KS); partial scores to
//              shared memory (two mma chains per warp, summed)
//     softmax  warps = (head tile m) x (slice of the 512 value dims); every warp of a head tile reads
//              the same scores, so all of them hold identical running max / sum (online, base 2)
//     P V      P from registers (bf16), V = the tile's first 512 columns via ldmatrix.trans
//   epilogue   out = O / (l + exp(sink - m)), lse = m + log l, max_logits = m (natural units);
//              rows with no valid slot: out 0, lse = max_logits = -inf.
//              Split-K (num_splits > 1, grid y = split): the CTA covers split_tiles tiles of the row and
//              stores (O, m, l) unnormalized to the workspace; sparse_mla_combine.cu merges the splits
//              in a fixed order and applies the sink once.
//
// HB = 64: 4 head tiles x 2 key groups x 1 split; PV 256 dims per warp (128 accumulators / lane)
// HB = 32: 2 x 2 x 2;                                PV 128 dims per warp
// HB = 16: 1 x 2 x 4;                                PV  64 dims per warp
// Heads past h_q in the last block are zero rows of Q in shared memory and are never stored.
// Deterministic: fixed reduction orders, no atomics.
#pragma once
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/check.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/online_softmax.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/sparse_mla/sm80/sparse_mla_sm80.h"

namespace attnserve::cuda::sparse_mla_op {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Dequantizes one raw tile of FP8-656 tokens into bf16 rows (thread: key = tid % 32, 64 latent
// values and 8 rope values per thread; the layout is cache_formats.h Fp8MlaLayout).
__device__ __forceinline__ void dequantize_tile(const uint8_t* sRaw, uint8_t* sTile, int tid) {
  const int key = tid & 31, part = tid >> 5;
  const uint8_t* src = sRaw + key * kFp8TokenBytes;  // [656]
  uint8_t* dst = sTile + key * kRowBytes;            // [576] bf16
  const float scale = *reinterpret_cast<const float*>(src + 512 + 4 * (part >> 1));
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint4 u = *reinterpret_cast<const uint4*>(src + 64 * part + 16 * i);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    uint32_t o[8];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 f0 = fp8x2_to_float2(uint16_t(w[e] & 0xffffu));
      const float2 f1 = fp8x2_to_float2(uint16_t(w[e] >> 16));
      o[2 * e] = ptx::pack2<__nv_bfloat16>(f0.x * scale, f0.y * scale);
      o[2 * e + 1] = ptx::pack2<__nv_bfloat16>(f1.x * scale, f1.y * scale);
    }
    uint4* d = reinterpret_cast<uint4*>(dst + 2 * (64 * part + 16 * i));
    d[0] = make_uint4(o[0], o[1], o[2], o[3]);
    d[1] = make_uint4(o[4], o[5], o[6], o[7]);
  }
  *reinterpret_cast<uint4*>(dst + 2 * (512 + 8 * part)) = *reinterpret_cast<const uint4*>(src + 528 + 16 * part);
}

// HB 16 is capped at 128 registers so two CTAs share an SM (the split-K configuration picks a ring
// that fits two; ptxas reports 123-128 without the cap, so the cap costs no spills).
template <int HB, bool kFp8>
__global__ void __launch_bounds__(kThreads, HB == 16 ? 2 : 1) sparse_mla_kernel(const Params p) {
  constexpr int MT = HB / 16;                      // head tiles of 16
  constexpr int KG = 2;                            // QK key groups (16 keys each)
  constexpr int KS = 8 / (MT * KG);                // QK k-splits
  constexpr int kKsteps = 36 / KS;                 // k-steps of 16 per split
  constexpr int kPvWarps = 8 / MT;                 // PV warps per head tile
  constexpr int DVW = kDimV / kPvWarps;            // value dims per PV warp
  constexpr int NT = DVW / 8;                      // PV n-tiles per warp
  constexpr int kChunksBf16 = kDimQk * 2 / 16;     // 72 per row
  constexpr int kChunksFp8 = kFp8TokenBytes / 16;  // 41 per token
  static_assert(KS * MT * KG == 8 && 36 % KS == 0 && NT % 2 == 0, "warp layout");
  static_assert(KS == k_splits_of(HB), "k-splits");

  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tig = lane & 3;
  const int64_t row = blockIdx.x / p.head_blocks;
  const int h0 = int(blockIdx.x % p.head_blocks) * HB;
  const int split = int(blockIdx.y);
  const int stages = p.stages;
  const SmemLayout L = smem_layout(HB, kFp8, stages);
  uint8_t* sQ = smem + L.q_off;                                      // [HB][kRowBytes]
  uint8_t* sRing = smem + L.ring_off;                                // [stages][stage_bytes]
  uint8_t* sTile = smem + L.tile_off;                                // FP8: [32][kRowBytes]
  float* sScore = reinterpret_cast<float*>(smem + L.score_off);      // [KS][HB][kScoreStride]
  uint32_t* sMask = reinterpret_cast<uint32_t*>(smem + L.mask_off);  // [kMaxStages]

  int n = p.topk;
  if (p.topk_length) {
    const int v = p.topk_length[row * p.topk_length_stride];
    n = v < 0 ? 0 : (v > p.topk ? p.topk : v);
  }
  // This CTA's tiles: [tile0, tile0 + num_tiles) of the row; empty when topk_length ends before them.
  const int row_tiles = (n + kTileKeys - 1) / kTileKeys;
  const int tile0 = split * p.split_tiles;
  const int num_tiles = max(0, min(row_tiles - tile0, p.split_tiles));
  const int32_t* idx_row = p.indices + row * p.idx_row_stride;

  // Q block (zero rows past h_q), committed with the first tile.
  for (int c = tid; c < HB * kChunksBf16; c += kThreads) {
    const int h = c / kChunksBf16, ch = c % kChunksBf16, head = h0 + h;
    const bool ok = head < p.h_q;
    const uint16_t* src = ok ? p.q + row * p.q_row_stride + int64_t(head) * p.q_head_stride + ch * 8 : p.q;
    ptx::cp_async_16(ptx::smem_addr(sQ + h * kRowBytes + ch * 16), src, ok ? 16 : 0);
  }

  // Slot id of key `lane` of local tile t (-1: past the length, negative or out of range). Every warp
  // loads the tile's 32 ids itself.
  auto load_sid = [&](int t) {
    const int pos = (tile0 + t) * kTileKeys + lane;
    int sid = -1;
    if (t < num_tiles && pos < n) {
      const int64_t v = idx_row[int64_t(pos) * p.idx_col_stride];
      if (v >= 0 && v < p.num_slots) sid = int(v);
    }
    return sid;
  };
  // Gathers local tile t (its ids in `sid`) into ring slot `slot`.
  auto issue = [&](int sid, int slot) {
    if (warp == 0) {
      const unsigned m = __ballot_sync(ptx::kFullMask, sid >= 0);
      if (lane == 0) sMask[slot] = m;
    }
    uint8_t* dst_tile = sRing + std::size_t(slot) * L.stage_bytes;
    if constexpr (!kFp8) {
      static_assert(kTileKeys * kChunksBf16 % kThreads == 0, "uniform trip count");
      for (int c = tid; c < kTileKeys * kChunksBf16; c += kThreads) {
        const int key = c / kChunksBf16, ch = c % kChunksBf16;
        const int s = __shfl_sync(ptx::kFullMask, sid, key);
        const uint8_t* src = s >= 0 ? p.kv + int64_t(s) * p.kv_row_bytes + ch * 16 : p.kv;
        ptx::cp_async_16(ptx::smem_addr(dst_tile + key * kRowBytes + ch * 16), src, s >= 0 ? 16 : 0);
      }
    } else {
      constexpr int kTotal = kTileKeys * kChunksFp8;         // 1312
      for (int base = 0; base < kTotal; base += kThreads) {  // uniform trip count (shuffles)
        const int c = base + tid;
        const int key = min(c / kChunksFp8, kTileKeys - 1), ch = c - key * kChunksFp8;
        const int s = __shfl_sync(ptx::kFullMask, sid, key);
        if (c < kTotal) {
          const uint8_t* src = s >= 0 ? p.kv + int64_t(s) * p.kv_row_bytes + ch * 16 : p.kv;
          ptx::cp_async_16(ptx::smem_addr(dst_tile + key * kFp8TokenBytes + ch * 16), src, s >= 0 ? 16 : 0);
        }
      }
    }
  };

  for (int s = 0; s < stages - 1; ++s) {
    if (s < num_tiles) issue(load_sid(s), s);
    ptx::cp_async_commit();
  }
  // The ids of the next tile to gather are loaded one iteration ahead: the load's latency then hides
  // behind a tile of math instead of stalling the gather (the dense kernels' page-id lesson, NOTES.md).
  int next_sid = load_sid(stages - 1);

  // Roles.
  const int qk_m = warp / (KG * KS), qk_kg = (warp / KS) % KG, qk_ks = warp % KS;
  const int pv_m = warp / kPvWarps, pv_dv = warp % kPvWarps;

  float m_run[2] = {-INFINITY, -INFINITY};  // rows g, g + 8 of head tile pv_m (base-2 scaled scores)
  float l_run[2] = {0.f, 0.f};              // this lane's partial sums
  float o[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

  for (int t = 0; t < num_tiles; ++t) {
    ptx::cp_async_wait_dyn(stages - 2);  // tile t (and Q) landed
    __syncthreads();
    const int slot = t % stages;
    const uint8_t* sK;
    if constexpr (kFp8) {
      dequantize_tile(sRing + std::size_t(slot) * L.stage_bytes, sTile, tid);
      __syncthreads();
      sK = sTile;
    } else {
      sK = sRing + std::size_t(slot) * L.stage_bytes;
    }
    {  // refill the slot of tile t - 1 (everyone finished it at the end of the previous iteration)
      const int tn = t + stages - 1;
      if (tn < num_tiles) {
        issue(next_sid, tn % stages);
        next_sid = load_sid(tn + 1);
      }
      ptx::cp_async_commit();
    }

    // ---- QK^T: S[16 heads of qk_m][16 keys of qk_kg], dims of split qk_ks.
    {
      float acc[2][2][4];
#pragma unroll
      for (int c = 0; c < 2; ++c)
#pragma unroll
        for (int j = 0; j < 2; ++j) acc[c][j][0] = acc[c][j][1] = acc[c][j][2] = acc[c][j][3] = 0.f;
      const uint32_t qa =
          ptx::smem_addr(sQ) + (16 * qk_m + (lane & 7) + 8 * ((lane >> 3) & 1)) * kRowBytes + 16 * (lane >> 4);
      const uint32_t kb =
          ptx::smem_addr(sK) + (16 * qk_kg + (lane & 7) + 8 * (lane >> 4)) * kRowBytes + 16 * ((lane >> 3) & 1);
#pragma unroll
      for (int kk = 0; kk < kKsteps; ++kk) {
        const uint32_t col_bytes = 32u * uint32_t(qk_ks * kKsteps + kk);
        uint32_t a[4], b[4];
        ptx::ldmatrix_x4(qa + col_bytes, a[0], a[1], a[2], a[3]);
        ptx::ldmatrix_x4(kb + col_bytes, b[0], b[1], b[2], b[3]);
        ptx::mma_16816<__nv_bfloat16>(acc[kk & 1][0], a, b[0], b[1]);
        ptx::mma_16816<__nv_bfloat16>(acc[kk & 1][1], a, b[2], b[3]);
      }
      float* s_out = sScore + (qk_ks * HB + 16 * qk_m + g) * kScoreStride + 16 * qk_kg + 2 * tig;
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        *reinterpret_cast<float2*>(s_out + 8 * j) =
            make_float2(acc[0][j][0] + acc[1][j][0], acc[0][j][1] + acc[1][j][1]);
        *reinterpret_cast<float2*>(s_out + 8 * kScoreStride + 8 * j) =
            make_float2(acc[0][j][2] + acc[1][j][2], acc[0][j][3] + acc[1][j][3]);
      }
    }
    __syncthreads();

    // ---- online softmax over the tile (rows g, g + 8 of head tile pv_m).
    const uint32_t mask = sMask[slot];
    float sv[2][2][4];  // [row r][k-step kk][cols 16kk + 2tig + {0,1}, 16kk + 8 + 2tig + {0,1}]
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int kk = 0; kk < 2; ++kk)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int col = 16 * kk + 8 * half + 2 * tig;
          const float* src = sScore + (16 * pv_m + g + 8 * r) * kScoreStride + col;
          float2 v = *reinterpret_cast<const float2*>(src);
#pragma unroll
          for (int ks = 1; ks < KS; ++ks) {
            const float2 x = *reinterpret_cast<const float2*>(src + ks * HB * kScoreStride);
            v.x += x.x;
            v.y += x.y;
          }
          sv[r][kk][2 * half] = (mask >> col) & 1u ? v.x * p.scale_log2 : -INFINITY;
          sv[r][kk][2 * half + 1] = (mask >> (col + 1)) & 1u ? v.y * p.scale_log2 : -INFINITY;
        }
    uint32_t pa[2][4];
    online_softmax_step<__nv_bfloat16, NT>(sv, m_run, l_run, o, pa);

    // ---- O[16 heads][DVW dims] += P[16][32] V[32][DVW].
    {
      const uint32_t vb =
          ptx::smem_addr(sK) + ((lane & 7) + 8 * ((lane >> 3) & 1)) * kRowBytes + 2 * (pv_dv * DVW + 8 * (lane >> 4));
#pragma unroll
      for (int kk = 0; kk < 2; ++kk)
#pragma unroll
        for (int j = 0; j < NT / 2; ++j) {
          uint32_t b[4];
          ptx::ldmatrix_x4_trans(vb + uint32_t(kk * 16 * kRowBytes + j * 32), b[0], b[1], b[2], b[3]);
          ptx::mma_16816<__nv_bfloat16>(o[2 * j], pa[kk], b[0], b[1]);
          ptx::mma_16816<__nv_bfloat16>(o[2 * j + 1], pa[kk], b[2], b[3]);
        }
    }
    __syncthreads();  // the slot, the scores and (FP8) the tile are free
  }
  ptx::cp_async_wait<0>();

  // ---- epilogue
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(ptx::kFullMask, l, 1);
    l += __shfl_xor_sync(ptx::kFullMask, l, 2);
    const int head = h0 + 16 * pv_m + g + 8 * r;
    if (head >= p.h_q) continue;
    const bool empty = m_run[r] == -INFINITY;
    if (p.num_splits > 1) {  // partial state; an empty split writes only m = -inf (its O is never read)
      const int64_t part = part_index(split, row, head, p.rows, p.h_q);
      if (pv_dv == 0 && tig == 0) p.part_ml[part] = make_float2(m_run[r], l);
      if (!empty) {
        float* dst = p.part_o + part * kDimV + pv_dv * DVW + 2 * tig;
#pragma unroll
        for (int j = 0; j < NT; ++j)
          *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(o[j][2 * r], o[j][2 * r + 1]);
      }
      continue;
    }
    float inv = 0.f;
    if (!empty) {
      float denom = l;
      if (p.sink) denom += exp2f(p.sink[int64_t(head) * p.sink_stride] * kLog2e - m_run[r]);
      inv = 1.f / denom;
    }
    uint32_t* dst = reinterpret_cast<uint32_t*>(p.out + row * p.out_row_stride + int64_t(head) * p.out_head_stride +
                                                pv_dv * DVW + 2 * tig);
#pragma unroll
    for (int j = 0; j < NT; ++j) dst[4 * j] = ptx::pack2<__nv_bfloat16>(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
    if (pv_dv == 0 && tig == 0) {
      if (p.lse)
        p.lse[row * p.lse_row_stride + int64_t(head) * p.lse_head_stride] =
            empty ? -INFINITY : (m_run[r] + log2f(l)) * kLn2;
      if (p.max_logits)
        p.max_logits[row * p.ml_row_stride + int64_t(head) * p.ml_head_stride] = empty ? -INFINITY : m_run[r] * kLn2;
    }
  }
}

// Host launch for one cache kind (each of sparse_mla_{bf16,fp8}.cu instantiates one, in parallel).
template <int HB, bool kFp8>
void launch_block(const Params& p, std::size_t smem_bytes, cudaStream_t stream) {
  auto* kernel = sparse_mla_kernel<HB, kFp8>;
  ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes)));
  // All of L1 as shared memory: two split-K CTAs of HB 16 (2 x 106 KB) share an SM only in the largest
  // carveout; the driver would otherwise pick the smallest that holds one CTA.
  ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                            int(cudaSharedmemCarveoutMaxShared)));
  const dim3 grid(unsigned(p.rows * p.head_blocks), unsigned(p.num_splits));  // y: split of the top-k list
  kernel<<<grid, kThreads, smem_bytes, stream>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

template <bool kFp8>
void launch_cache(const Params& p, int head_block, std::size_t smem_bytes, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool done =
      HeadBlocks::dispatch(head_block, [&](auto hb) { launch_block<decltype(hb)::value, kFp8>(p, smem_bytes, s); });
  ATTNSERVE_CHECK(done, "sparse_mla (sm80): no kernel for a head block of ", head_block);
}

}  // namespace attnserve::cuda::sparse_mla_op
