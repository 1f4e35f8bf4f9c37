// tree_attention on tensor cores (mma.sync m16n8k16, bf16 | f16 in, f32 accumulate): the path for MHA / GQA
// heads with d_q = d_v = 64 or 128 (the EAGLE verify shapes).
//
// One CTA per (request r, kv head hk, block of kMmaRows packed query rows). Packed row pr = i * group + g is
// query row i of the request with q head hk * group + g, so every packed row of a CTA sees the same staged
// keys. Per CTA (4 warps, 16 packed rows each):
//   shared  sK [keys, D], sV [keys, D]: the request's <= 64 draft keys of head hk (cp.async, zero rows from
//           num_keys up to the next 16-key step), staged once for all the CTA's rows;
//           sO [kMmaRows, D]: the prefix part's output, each warp its own 16 rows (cp.async, a group of its
//           own that lands while the warp computes), which the merged output overwrites before leaving with
//           coalesced 16-byte stores.
//   regs    Q as A fragments straight from global memory with 16-byte loads: inside every 32-column group
//           the d order is permuted, the same way for the K fragments (a dot product allows any common
//           order); S = Q K^T over all keys at once (one key tile: no online rescale); the tree mask on
//           the score fragment; softmax in registers, in log2 units (ex2.approx); O = P V (V fragments by
//           ldmatrix.trans); the LSE merge with the prefix state in the epilogue.
// Costs found by profiling (bench/NOTES.md, session 6): the kernel is issue-bound before it is memory-bound, so
// per-address integer divisions by the GQA group, per-score divisions and branches are kept out of it.
// Bytes: q + prefix out + out once, draft K/V once per CTA (from L2 after the first of a request's blocks).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "attnserve/ops/tree_attention.h"  // kTreeMaxKeys
#include "cuda/common/check.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/tree_attention/sm80/tree_params.cuh"

namespace attnserve::cuda::tree {

constexpr int kMmaWarps = 4;
constexpr int kMmaRows = 16 * kMmaWarps;  // packed (row, head) rows per CTA
static_assert(kMmaRows == kTreeMaxKeys, "the slot and row tables are filled one entry per thread of two warps");

// Positions of the 16-byte chunks (8 elements) in shared rows, chosen for conflict-free fragment reads.
// K: a quarter-warp reads chunks 4 kk + t (t < 4) of two adjacent keys (even, odd): odd rows xor 4.
__device__ __forceinline__ int k_chunk_pos(int j, int c) { return c ^ ((j & 1) << 2); }
// V (ldmatrix) and the output tile: eight consecutive rows read one chunk: xor row & 7.
__device__ __forceinline__ int row_chunk_pos(int j, int c) { return c ^ (j & 7); }

// Shared bytes: sK and sV for keys_cap keys (max_keys rounded up to 16), then sO.
template <typename T, int D>
constexpr std::size_t mma_smem_bytes(int keys_cap) {
  return std::size_t(2 * keys_cap + kMmaRows) * D * sizeof(T);
}

// D: head dim (64 | 128). keys_cap: rows of sK / sV (the launch's shared-memory layout).
template <typename T, int D>
__global__ void __launch_bounds__(kMmaWarps * 32, 4) tree_attention_mma_kernel(TreeParams<T> p, int keys_cap) {
  constexpr int kChunks = D / 8;                // 16-byte chunks per row
  constexpr int kGroups = D / 32;               // 32-column groups of Q / K: two k-steps each
  constexpr int kKeyTiles = kTreeMaxKeys / 8;   // n-tiles of S
  constexpr int kKeySteps = kTreeMaxKeys / 16;  // k-steps of P V
  constexpr int kOutTiles = D / 8;              // n-tiles of O
  constexpr int kLaneRows = 32 / kChunks;       // rows one warp-wide 16-byte access covers (2 | 4)
  constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ int32_t s_slot[kTreeMaxKeys];               // -1: no key (past num_keys, or a slot outside the cache)
  __shared__ uint32_t s_valid[2];                        // bit j: key j exists
  __shared__ int32_t s_row[kMmaRows], s_head[kMmaRows];  // packed row -> (query row, q head); row -1: none
  uint8_t* sK = smem;                                    // [keys_cap, D] T
  uint8_t* sV = smem + std::size_t(keys_cap) * D * sizeof(T);  // [keys_cap, D] T
  uint8_t* sO = sV + std::size_t(keys_cap) * D * sizeof(T);    // [kMmaRows, D] T

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, t = lane & 3;
  const int r = blockIdx.z, hk = blockIdx.y, group = p.group;
  const int row0 = p.cu_q[r];
  const int packed = (p.cu_q[r + 1] - row0) * group;  // packed rows of (r, hk)
  const int pr_base = blockIdx.x * kMmaRows;
  if (pr_base >= packed) return;               // uniform over the CTA
  const int n = min(p.num_keys[r], keys_cap);  // (num_keys <= max_keys by contract; the clamp guards smem)

  // ---- Loads that need nothing: the slots and the row table (two warps), this thread's Q, masks, prefix LSEs.
  if (tid < kTreeMaxKeys) {
    int32_t slot = -1;
    if (tid < n) {
      const int64_t s = p.key_slots[int64_t(r) * p.ks_st + tid];
      if (s >= 0 && s < p.num_slots) slot = int32_t(s);  // outside the cache: skipped (the CPU raises)
    }
    s_slot[tid] = slot;
    const uint32_t bits = __ballot_sync(ptx::kFullMask, slot >= 0);
    if (lane == 0) s_valid[warp] = bits;
    const int pr = pr_base + tid;  // kMmaRows == kTreeMaxKeys: one packed row per thread
    s_row[tid] = pr < packed ? row0 + pr / group : -1;
    s_head[tid] = hk * group + pr % group;
  }
  // This thread's two packed rows: fragment rows lane / 4 (i = 0) and lane / 4 + 8 (i = 1) of the warp's 16.
  const int lr0 = warp * 16 + (lane >> 2);
  int prow[2], phead[2];
  uint32_t qa[2 * kGroups][4];  // A fragments of Q, k-step 2 g + {0, 1}: columns 32 g + 8 t + {0,1 | 2,3 | 4,5 | 6,7}
  uint64_t bits[2];
  float lse_prefix[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int pr = pr_base + lr0 + 8 * i;
    prow[i] = pr < packed ? row0 + pr / group : -1;
    phead[i] = hk * group + pr % group;
    const bool live = prow[i] >= 0;
    const T* q = p.q + (live ? int64_t(prow[i]) * p.q_st + int64_t(phead[i]) * p.q_sh : 0);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const uint4 w = live ? *reinterpret_cast<const uint4*>(q + 32 * g + 8 * t) : make_uint4(0u, 0u, 0u, 0u);
      qa[2 * g][i] = w.x, qa[2 * g][2 + i] = w.y, qa[2 * g + 1][i] = w.z, qa[2 * g + 1][2 + i] = w.w;
    }
    bits[i] = live ? uint64_t(p.mask[prow[i]]) >> (2 * t) : 0u;  // bit 8 nt + e: key 8 nt + 2 t + e
    lse_prefix[i] =
        live && p.prefix_out ? p.prefix_lse[int64_t(prow[i]) * p.pl_st + int64_t(phead[i]) * p.pl_sh] : -INFINITY;
  }
  __syncthreads();  // s_slot, s_valid, s_row, s_head

  // ---- Stage the draft keys' K and V (zeros from n up to the 16-key step): group 1. Then this warp's 16 rows
  // of the prefix output (group 2, needed only by the epilogue, so it lands while the warp computes).
  const int keys_pad = (n + 15) & ~15;
  {
    constexpr int kStep = kMmaWarps * 32 / kChunks;  // keys one pass over the CTA's threads covers (8 | 16)
    const int c = tid % kChunks;
    const T* k_head = p.k + int64_t(hk) * p.k_sh + 8 * c;
    const T* v_head = p.v + int64_t(hk) * p.v_sh + 8 * c;
#pragma unroll
    for (int j0 = 0; j0 < kTreeMaxKeys; j0 += kStep) {
      if (j0 >= keys_pad) break;  // uniform; keys_pad is a multiple of 16, kStep divides it
      const int j = j0 + tid / kChunks;
      const int32_t slot = s_slot[j];
      const int64_t at = int64_t(max(slot, 0));  // a readable row when there is no key (0 bytes copied)
      ptx::cp_async_16(ptx::smem_addr(sK + (j * kChunks + k_chunk_pos(j, c)) * 16), k_head + at * p.k_ss,
                       slot >= 0 ? 16 : 0);
      ptx::cp_async_16(ptx::smem_addr(sV + (j * kChunks + row_chunk_pos(j, c)) * 16), v_head + at * p.v_ss,
                       slot >= 0 ? 16 : 0);
    }
  }
  ptx::cp_async_commit();
  const int c_lane = lane % kChunks;  // the chunk this lane moves in the warp's row accesses
  if (p.prefix_out) {
#pragma unroll
    for (int it = 0; it < 16 / kLaneRows; ++it) {
      const int lr = warp * 16 + it * kLaneRows + lane / kChunks, row = s_row[lr];
      const T* src = p.prefix_out + int64_t(max(row, 0)) * p.po_st + int64_t(s_head[lr]) * p.po_sh + 8 * c_lane;
      ptx::cp_async_16(ptx::smem_addr(sO + (lr * kChunks + row_chunk_pos(lr, c_lane)) * 16), src, row >= 0 ? 16 : 0);
    }
  }
  ptx::cp_async_commit();
  ptx::cp_async_wait<1>();  // the keys (the prefix tile may still be in flight)
  __syncthreads();
  const uint64_t valid = uint64_t(s_valid[0]) | (uint64_t(s_valid[1]) << 32);
  bits[0] &= valid >> (2 * t), bits[1] &= valid >> (2 * t);

  // ---- S = Q K^T: s[nt] holds keys 8 nt + 2 t + {0, 1} of rows i = 0 ([0], [1]) and i = 1 ([2], [3]).
  float s[kKeyTiles][4];
#pragma unroll
  for (int nt = 0; nt < kKeyTiles; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
  const int key_tiles = (n + 7) >> 3;
#pragma unroll
  for (int nt = 0; nt < kKeyTiles; ++nt) {
    if (nt >= key_tiles) break;
    const int j = nt * 8 + (lane >> 2);
    const uint8_t* k_row = sK + j * kChunks * 16;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const uint4 kb = *reinterpret_cast<const uint4*>(k_row + k_chunk_pos(j, 4 * g + t) * 16);
      ptx::mma_16816<T>(s[nt], qa[2 * g], kb.x, kb.y);
      ptx::mma_16816<T>(s[nt], qa[2 * g + 1], kb.z, kb.w);
    }
  }

  // ---- Scores in log2 units, the mask, softmax over each row's keys (a row lives in one quad of lanes).
  if (p.softcap > 0.f) {  // uniform: one branch around the loop
    const float inv_cap = 1.f / p.softcap;
#pragma unroll
    for (int nt = 0; nt < kKeyTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = p.softcap * kLog2e * tanhf(s[nt][e] * p.scale * inv_cap);
  } else {
    const float scale_log2 = p.scale * kLog2e;
#pragma unroll
    for (int nt = 0; nt < kKeyTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] *= scale_log2;
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
  for (int nt = 0; nt < kKeyTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = e >> 1;
      const float x = (bits[i] >> (8 * nt + (e & 1))) & 1u ? s[nt][e] : -INFINITY;
      s[nt][e] = x;
      m[i] = fmaxf(m[i], x);
    }
#pragma unroll
  for (int i = 0; i < 2; ++i) m[i] = ptx::quad_max(m[i]);
  const float m_use[2] = {m[0] == -INFINITY ? 0.f : m[0], m[1] == -INFINITY ? 0.f : m[1]};  // all masked: w = 0
#pragma unroll
  for (int nt = 0; nt < kKeyTiles; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float w = fast_exp2(s[nt][e] - m_use[e >> 1]);  // exp2(-inf) = 0: masked keys
      s[nt][e] = w;
      l[e >> 1] += w;
    }
#pragma unroll
  for (int i = 0; i < 2; ++i) l[i] = ptx::quad_sum(l[i]);

  // ---- O = P V: P (T) from the score fragments of key tiles 2 ks, 2 ks + 1 is the A fragment of k-step ks.
  float o[kOutTiles][4];
#pragma unroll
  for (int nt = 0; nt < kOutTiles; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;
  const int key_steps = keys_pad >> 4;
  const int mat = lane >> 3;  // ldmatrix: lanes 8 mat .. 8 mat + 7 address the rows of matrix mat
#pragma unroll
  for (int ks = 0; ks < kKeySteps; ++ks) {
    if (ks >= key_steps) break;
    const uint32_t a[4] = {ptx::pack2<T>(s[2 * ks][0], s[2 * ks][1]), ptx::pack2<T>(s[2 * ks][2], s[2 * ks][3]),
                           ptx::pack2<T>(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                           ptx::pack2<T>(s[2 * ks + 1][2], s[2 * ks + 1][3])};
    const int j = ks * 16 + (mat & 1) * 8 + (lane & 7);  // matrices: keys +0 / +8 x chunks 2 np / 2 np + 1
#pragma unroll
    for (int np = 0; np < kOutTiles / 2; ++np) {
      uint32_t b0, b1, b2, b3;
      const int c = 2 * np + (mat >> 1);
      ptx::ldmatrix_x4_trans(ptx::smem_addr(sV + (j * kChunks + row_chunk_pos(j, c)) * 16), b0, b1, b2, b3);
      ptx::mma_16816<T>(o[2 * np], a, b0, b1);
      ptx::mma_16816<T>(o[2 * np + 1], a, b2, b3);
    }
  }

  // ---- Epilogue: the merge with the prefix state into sO (in place of the prefix tile), then the store.
  float scale_tree[2], w_prefix[2] = {0.f, 0.f}, lse[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    lse[i] = l[i] > 0.f ? (m[i] + log2f(l[i])) * kLn2 : -INFINITY;
    float w_tree = 1.f;
    if (p.prefix_out) merge_weights(lse_prefix[i], lse[i], w_prefix[i], w_tree);
    scale_tree[i] = (l[i] > 0.f ? 1.f / l[i] : 0.f) * w_tree;
  }
  ptx::cp_async_wait<0>();  // this lane's part of the prefix tile
  __syncwarp();             // ... and the other lanes' (the warp's 16 rows of sO are its own)
#pragma unroll
  for (int nt = 0; nt < kOutTiles; ++nt)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int lr = lr0 + 8 * i;  // columns 8 nt + 2 t + {0, 1}: word t of chunk nt
      uint32_t* w = reinterpret_cast<uint32_t*>(sO + (lr * kChunks + row_chunk_pos(lr, nt)) * 16) + t;
      const float2 pv = p.prefix_out ? unpack2<T>(*w) : make_float2(0.f, 0.f);
      *w = ptx::pack2<T>(fmaf(w_prefix[i], pv.x, o[nt][2 * i] * scale_tree[i]),
                         fmaf(w_prefix[i], pv.y, o[nt][2 * i + 1] * scale_tree[i]));
    }
  __syncwarp();
#pragma unroll
  for (int it = 0; it < 16 / kLaneRows; ++it) {
    const int lr = warp * 16 + it * kLaneRows + lane / kChunks, row = s_row[lr];
    if (row < 0) continue;
    *reinterpret_cast<uint4*>(p.out + int64_t(row) * p.o_st + int64_t(s_head[lr]) * p.o_sh + 8 * c_lane) =
        *reinterpret_cast<const uint4*>(sO + (lr * kChunks + row_chunk_pos(lr, c_lane)) * 16);
  }
  if (p.lse && t == 0)
#pragma unroll
    for (int i = 0; i < 2; ++i)
      if (prow[i] >= 0) p.lse[int64_t(prow[i]) * p.l_st + int64_t(phead[i]) * p.l_sh] = lse[i];
}

// Whether the tensor-core kernel takes these arguments: MHA heads (no q_rope) with d_q = d_v = 64 | 128,
// and 16-byte rows everywhere (dims, strides and bases), as its vector loads and cp.async need.
template <typename T>
bool mma_ok(const TreeParams<T>& p) {
  auto m8 = [](int64_t x) { return x % 8 == 0; };
  auto a16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  bool ok = !p.q_rope && p.d_rope == 0 && p.d_q == p.d_v && (p.d_q == 64 || p.d_q == 128) && m8(p.q_st) && m8(p.q_sh) &&
            m8(p.k_ss) && m8(p.k_sh) && m8(p.v_ss) && m8(p.v_sh) && m8(p.o_st) && m8(p.o_sh) && a16(p.q) && a16(p.k) &&
            a16(p.v) && a16(p.out);
  if (p.prefix_out) ok = ok && m8(p.po_st) && m8(p.po_sh) && a16(p.prefix_out);
  return ok;
}

// Grid: (packed-row blocks of the longest request, h_kv, b), from max_seqlen_q: graph-capturable.
template <typename T, int D>
void launch_mma(const TreeParams<T>& p, int64_t b, int h_kv, int max_seqlen_q, int max_keys, cudaStream_t stream) {
  const int keys_cap = (max_keys + 15) & ~15;
  const std::size_t smem = mma_smem_bytes<T, D>(keys_cap);
  auto kernel = tree_attention_mma_kernel<T, D>;
  // Always: at 128 dims and 64 keys the dynamic part alone is the 48 KB default (static memory comes on top).
  ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const int64_t blocks = (int64_t(max_seqlen_q) * p.group + kMmaRows - 1) / kMmaRows;
  const dim3 grid{unsigned(blocks), unsigned(h_kv), unsigned(b)};
  kernel<<<grid, kMmaWarps * 32, smem, stream>>>(p, keys_cap);
}

}  // namespace attnserve::cuda::tree
