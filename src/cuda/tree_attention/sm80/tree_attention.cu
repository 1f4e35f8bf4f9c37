// tree_attention on CUDA (portable, sm_80+). Three kernels, picked by shape:
//   tensor cores (tree_mma.cuh): MHA / GQA heads with d_q = d_v = 64 | 128 and 16-byte rows, the EAGLE
//     verify shapes;
//   staged: any other dims that are multiples of 8 with 16-byte rows (MLA's 576 / 512 with V inside K,
//     d 256, ...): one CTA per (request, kv head, block of kRowsPerCta query rows) stages the request's
//     <= kTreeMaxKeys draft keys of that kv head in shared memory once (key slots read once, 16-byte loads,
//     four in flight per thread), then each warp takes (row, q head) pairs (the next pair's q, prefix state
//     and mask loaded while the current one computes): q in registers (two elements per 32-bit word, word
//     lane + 32 i), one warp sum per masked key, an online softmax, and the merge with the prefix part's
//     state in the epilogue;
//   per-row (the fallback for dims that are not multiples of 8 or unaligned rows): one warp per (query row,
//     head), K/V read from global memory (L1/L2) per key, element lane + 32 i.
// All three merge the prefix part's state (prefix_out / prefix_lse) in their epilogue, so the prefix output
// is read once and the merged output written once. Grids depend on b, h and max_seqlen_q only, so a captured
// graph replays with any lengths. No host sync, no allocation.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/host_util.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/tree_attention/sm80/tree_mma.cuh"
#include "cuda/tree_attention/sm80/tree_params.cuh"
#include "cuda/tree_attention/tree_attention.h"

namespace attnserve::cuda {
namespace {

using namespace tree;

// ---- The per-row kernel (the fallback) ------------------------------------------------------------------

constexpr int kWarps = 4;  // query rows per CTA

// kPer elements per lane: q/k dims d_q + d_rope <= 32 kPer and d_v <= 32 kPer.
template <typename T, int kPer>
__global__ void __launch_bounds__(kWarps * 32) tree_attention_kernel(TreeParams<T> p) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r = blockIdx.z, h = blockIdx.y, hk = h / p.group;
  const int64_t row = int64_t(p.cu_q[r]) + int64_t(blockIdx.x) * kWarps + warp;
  if (row >= p.cu_q[r + 1]) return;
  const int n = p.num_keys[r];
  const uint64_t bits = uint64_t(p.mask[row]);
  const int d_qk = p.d_q + p.d_rope;

  float qv[kPer], acc[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = lane + 32 * i;
    float x = 0.f;
    if (e < p.d_q) x = to_f32(p.q[row * p.q_st + h * p.q_sh + e]);
    else if (e < d_qk) x = to_f32(p.q_rope[row * p.qr_st + h * p.qr_sh + (e - p.d_q)]);
    qv[i] = x;
    acc[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int j = 0; j < n; ++j) {
    if (!((bits >> j) & 1u)) continue;  // uniform over the warp
    const int64_t slot = p.key_slots[int64_t(r) * p.ks_st + j];
    if (slot < 0 || slot >= p.num_slots) continue;  // out-of-range slot: skipped (the CPU raises)
    const T* kr = p.k + slot * p.k_ss + hk * p.k_sh;
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane + 32 * i;
      if (e < d_qk) dot += qv[i] * to_f32(kr[e]);
    }
    const float s = tree_score(ptx::warp_sum(dot), p.scale, p.softcap);
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), w = expf(s - m_new);
    l = l * corr + w;
    m = m_new;
    const T* vr = p.v + slot * p.v_ss + hk * p.v_sh;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane + 32 * i;
      acc[i] = acc[i] * corr + (e < p.d_v ? w * to_f32(vr[e]) : 0.f);
    }
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;
  float lse = l > 0.f ? m + logf(l) : -INFINITY;
  float w_prefix = 0.f, w_tree = 1.f;
  if (p.prefix_out) merge_weights(p.prefix_lse[row * p.pl_st + h * p.pl_sh], lse, w_prefix, w_tree);
  const T* po = p.prefix_out ? p.prefix_out + row * p.po_st + h * p.po_sh : nullptr;
  T* o = p.out + row * p.o_st + h * p.o_sh;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = lane + 32 * i;
    if (e < p.d_v) o[e] = from_f32<T>(acc[i] * inv * w_tree + (po ? w_prefix * to_f32(po[e]) : 0.f));
  }
  if (p.lse && lane == 0) p.lse[row * p.l_st + h * p.l_sh] = lse;
}

// ---- The staged kernel -------------------------------------------------------------------------------

constexpr int kStagedWarps = 8, kRowsPerCta = 16;

template <typename T>
__device__ __forceinline__ uint32_t word_at(const T* base, int64_t elem) {  // elem even, 4-byte aligned
  return *reinterpret_cast<const uint32_t*>(base + elem);
}

template <typename T, int kWords>
struct PairInputs {
  uint32_t q[kWords], prefix[kWords];
  float lse_prefix;
  uint64_t bits;
};

template <typename T, int kWords>
__device__ __forceinline__ void load_pair(const TreeParams<T>& p, int64_t row, int h, int lane, int kw, int vw,
                                          uint64_t valid, PairInputs<T, kWords>& in) {
  const T* po = p.prefix_out ? p.prefix_out + row * p.po_st + h * p.po_sh : nullptr;
#pragma unroll
  for (int i = 0; i < kWords; ++i) {
    const int w = lane + 32 * i;
    uint32_t x = 0u;
    if (2 * w < p.d_q) x = word_at(p.q, row * p.q_st + h * p.q_sh + 2 * w);
    else if (w < kw) x = word_at(p.q_rope, row * p.qr_st + h * p.qr_sh + (2 * w - p.d_q));
    in.q[i] = x;
    in.prefix[i] = (po && w < vw) ? word_at(po, 2 * w) : 0u;
  }
  in.lse_prefix = po ? p.prefix_lse[row * p.pl_st + h * p.pl_sh] : -INFINITY;
  in.bits = uint64_t(p.mask[row]) & valid;
}

// Stages `rows_n` rows of `words` 32-bit words (a multiple of 4) per key from global memory (row j at
// src + s_slot[j] * row_stride elements) into dst [rows_n, words], zeros for invalid slots.
template <typename T>
__device__ __forceinline__ void stage_rows(uint32_t* dst, const T* src, int64_t slot_stride, const int32_t* s_slot,
                                           int rows_n, int words) {
  const int chunks = words / 4, total = rows_n * chunks;
  for (int base = threadIdx.x; base < total; base += 4 * blockDim.x) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int idx = base + u * int(blockDim.x);
      v[u] = make_uint4(0u, 0u, 0u, 0u);
      if (idx < total) {
        const int j = idx / chunks, c = idx - j * chunks;
        const int32_t slot = s_slot[j];
        if (slot >= 0) v[u] = *reinterpret_cast<const uint4*>(src + int64_t(slot) * slot_stride + 8 * c);
      }
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int idx = base + u * int(blockDim.x);
      if (idx < total) reinterpret_cast<uint4*>(dst)[idx] = v[u];
    }
  }
}

template <typename T, int kWords>
__global__ void __launch_bounds__(kStagedWarps * 32)
    tree_attention_staged_kernel(TreeParams<T> p, int max_keys, bool v_in_k) {
  extern __shared__ __align__(16) uint32_t smem_staged[];
  __shared__ int32_t s_slot[kTreeMaxKeys];
  __shared__ uint32_t valid_words[2];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r = blockIdx.z, hk = blockIdx.y;
  const int q_end = p.cu_q[r + 1];
  const int row0 = p.cu_q[r] + blockIdx.x * kRowsPerCta;
  if (row0 >= q_end) return;  // uniform over the CTA
  const int rows = min(kRowsPerCta, q_end - row0);
  const int n = p.num_keys[r];
  const int kw = (p.d_q + p.d_rope) / 2, vw = p.d_v / 2;
  uint32_t* sk = smem_staged;
  uint32_t* sv = v_in_k ? smem_staged : smem_staged + max_keys * kw;
  const int vs_stride = v_in_k ? kw : vw;
  if (warp < 2) {
    const int j = warp * 32 + lane;
    int64_t slot = -1;
    if (j < n) slot = p.key_slots[int64_t(r) * p.ks_st + j];
    const bool ok = j < n && slot >= 0 && slot < p.num_slots;
    s_slot[j] = ok ? int32_t(slot) : -1;
    const uint32_t bits = __ballot_sync(0xffffffffu, ok);
    if (lane == 0) valid_words[warp] = bits;
  }
  __syncthreads();
  stage_rows(sk, p.k + hk * p.k_sh, p.k_ss, s_slot, n, kw);
  if (!v_in_k) stage_rows(sv, p.v + hk * p.v_sh, p.v_ss, s_slot, n, vw);
  __syncthreads();
  const uint64_t valid = uint64_t(valid_words[0]) | (uint64_t(valid_words[1]) << 32);

  const int pairs = rows * p.group;
  PairInputs<T, kWords> cur{}, next{};
  if (warp < pairs) load_pair(p, row0 + warp / p.group, hk * p.group + warp % p.group, lane, kw, vw, valid, cur);
  for (int pair = warp; pair < pairs; pair += kStagedWarps) {
    const int64_t row = row0 + pair / p.group;
    const int h = hk * p.group + pair % p.group;
    const int after = pair + kStagedWarps;
    if (after < pairs)  // in flight while this pair computes
      load_pair(p, row0 + after / p.group, hk * p.group + after % p.group, lane, kw, vw, valid, next);
    float2 qv[kWords], acc[kWords];
#pragma unroll
    for (int i = 0; i < kWords; ++i) qv[i] = unpack2<T>(cur.q[i]), acc[i] = make_float2(0.f, 0.f);
    float m = -INFINITY, l = 0.f;
    for (uint64_t bits = cur.bits; bits; bits &= bits - 1) {
      const int j = __ffsll((long long)bits) - 1;
      const uint32_t* kr = sk + j * kw;
      float dot = 0.f;
#pragma unroll
      for (int i = 0; i < kWords; ++i) {
        const int w = lane + 32 * i;
        if (w < kw) {
          const float2 k2 = unpack2<T>(kr[w]);
          dot = fmaf(qv[i].x, k2.x, fmaf(qv[i].y, k2.y, dot));
        }
      }
      const float s = tree_score(ptx::warp_sum(dot), p.scale, p.softcap);
      const float m_new = fmaxf(m, s);
      const float corr = expf(m - m_new), pw = expf(s - m_new);
      l = l * corr + pw;
      m = m_new;
      const uint32_t* vr = sv + j * vs_stride;
#pragma unroll
      for (int i = 0; i < kWords; ++i) {
        const int w = lane + 32 * i;
        const float2 v2 = w < vw ? unpack2<T>(vr[w]) : make_float2(0.f, 0.f);
        acc[i].x = fmaf(acc[i].x, corr, pw * v2.x);
        acc[i].y = fmaf(acc[i].y, corr, pw * v2.y);
      }
    }
    float lse = l > 0.f ? m + logf(l) : -INFINITY;
    float w_prefix = 0.f, w_tree = 1.f;
    if (p.prefix_out) merge_weights(cur.lse_prefix, lse, w_prefix, w_tree);
    const float scale_tree = (l > 0.f ? 1.f / l : 0.f) * w_tree;
    T* o = p.out + row * p.o_st + h * p.o_sh;
#pragma unroll
    for (int i = 0; i < kWords; ++i) {
      const int w = lane + 32 * i;
      if (w >= vw) continue;
      const float2 pv = unpack2<T>(cur.prefix[i]);
      const float x = fmaf(w_prefix, pv.x, acc[i].x * scale_tree), y = fmaf(w_prefix, pv.y, acc[i].y * scale_tree);
      *reinterpret_cast<uint32_t*>(o + 2 * w) = ptx::pack2<T>(x, y);
    }
    if (p.lse && lane == 0) p.lse[row * p.l_st + h * p.l_sh] = lse;
    cur = next;
  }
}

// Whether the staged kernel takes these arguments: q / out / prefix rows read as 32-bit words (even dims and
// strides, 4-byte bases) and K/V rows staged with 16-byte loads (dims multiples of 8, strides and bases
// 16-byte aligned).
template <typename T>
bool staged_ok(const TreeParams<T>& p) {
  auto even = [](int64_t x) { return x % 2 == 0; };
  auto m8 = [](int64_t x) { return x % 8 == 0; };
  auto aligned = [](const void* ptr, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; };
  bool ok = even(p.d_q) && even(p.d_rope) && even(p.q_st) && even(p.q_sh) && even(p.o_st) && even(p.o_sh) &&
            aligned(p.q, 4) && aligned(p.out, 4) && m8(p.d_q + p.d_rope) && m8(p.d_v) && m8(p.k_ss) && m8(p.k_sh) &&
            m8(p.v_ss) && m8(p.v_sh) && aligned(p.k, 16) && aligned(p.v, 16);
  if (p.q_rope) ok = ok && even(p.qr_st) && even(p.qr_sh) && aligned(p.q_rope, 4);
  if (p.prefix_out) ok = ok && even(p.po_st) && even(p.po_sh) && aligned(p.prefix_out, 4);
  return ok;
}

template <typename T, int kWords>
void launch_staged(const TreeParams<T>& p, int64_t b, int h_kv, int max_seqlen_q, int max_keys, cudaStream_t stream) {
  const bool v_in_k = p.v == p.k && p.v_ss == p.k_ss && p.v_sh == p.k_sh;
  const int kw = (p.d_q + p.d_rope) / 2, vw = p.d_v / 2;
  const std::size_t smem = std::size_t(max_keys) * std::size_t(kw + (v_in_k ? 0 : vw)) * sizeof(uint32_t);
  auto kernel = tree_attention_staged_kernel<T, kWords>;
  if (smem > 48 * 1024)
    ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const dim3 grid(unsigned((max_seqlen_q + kRowsPerCta - 1) / kRowsPerCta), unsigned(h_kv), unsigned(b));
  kernel<<<grid, kStagedWarps * 32, smem, stream>>>(p, max_keys, v_in_k);
}

// ---- Dispatch ----------------------------------------------------------------------------------------

template <typename T>
void launch(const TreeAttentionArgs& a, cudaStream_t stream) {
  TreeParams<T> p{};
  p.q = static_cast<const T*>(a.q.data), p.q_st = a.q.stride(0), p.q_sh = a.q.stride(1);
  if (!a.q_rope.empty_view())
    p.q_rope = static_cast<const T*>(a.q_rope.data), p.qr_st = a.q_rope.stride(0), p.qr_sh = a.q_rope.stride(1);
  p.k = static_cast<const T*>(a.k_cache.data), p.k_ss = a.k_cache.stride(0), p.k_sh = a.k_cache.stride(1);
  p.v = static_cast<const T*>(a.v_cache.data), p.v_ss = a.v_cache.stride(0), p.v_sh = a.v_cache.stride(1);
  p.key_slots = a.key_slots.ptr<int32_t>(), p.ks_st = a.key_slots.stride(0);
  p.num_keys = a.num_keys.ptr<int32_t>();
  p.cu_q = a.cu_seqlens_q.ptr<int32_t>();
  p.mask = static_cast<const int64_t*>(a.mask.data);
  p.out = static_cast<T*>(a.out.data), p.o_st = a.out.stride(0), p.o_sh = a.out.stride(1);
  if (!a.lse.empty_view()) p.lse = a.lse.ptr<float>(), p.l_st = a.lse.stride(0), p.l_sh = a.lse.stride(1);
  if (!a.prefix_out.empty_view()) {
    p.prefix_out = static_cast<const T*>(a.prefix_out.data), p.po_st = a.prefix_out.stride(0);
    p.po_sh = a.prefix_out.stride(1);
    p.prefix_lse = a.prefix_lse.ptr<float>(), p.pl_st = a.prefix_lse.stride(0), p.pl_sh = a.prefix_lse.stride(1);
  }
  p.d_q = int(a.q.size(2)), p.d_rope = a.q_rope.empty_view() ? 0 : int(a.q_rope.size(2));
  p.d_v = int(a.v_cache.size(2));
  p.group = int(a.q.size(1) / a.k_cache.size(1));
  p.num_slots = a.k_cache.size(0);
  p.scale = a.softmax_scale, p.softcap = a.softcap;

  const int64_t b = a.key_slots.size(0), h_q = a.q.size(1);
  if (b == 0 || a.q.size(0) == 0 || a.max_seqlen_q == 0) return;
  ATTNSERVE_CHECK(b < 65536 && h_q < 65536, "tree_attention: b = ", b, " and h_q = ", h_q, " must be < 65536 on CUDA");
  const int width = std::max(p.d_q + p.d_rope, p.d_v);
  const int h_kv = int(a.k_cache.size(1)), max_keys = int(a.key_slots.size(1));
  if (mma_ok(p)) {
    if (p.d_q == 64) launch_mma<T, 64>(p, b, h_kv, a.max_seqlen_q, max_keys, stream);
    else launch_mma<T, 128>(p, b, h_kv, a.max_seqlen_q, max_keys, stream);
    ATTNSERVE_CUDA_CHECK_LAUNCH();
    return;
  }
  if (staged_ok(p) && width <= 576) {
    if (width <= 64) launch_staged<T, 1>(p, b, h_kv, a.max_seqlen_q, max_keys, stream);
    else if (width <= 128) launch_staged<T, 2>(p, b, h_kv, a.max_seqlen_q, max_keys, stream);
    else if (width <= 256) launch_staged<T, 4>(p, b, h_kv, a.max_seqlen_q, max_keys, stream);
    else launch_staged<T, 9>(p, b, h_kv, a.max_seqlen_q, max_keys, stream);
    ATTNSERVE_CUDA_CHECK_LAUNCH();
    return;
  }
  const dim3 grid(unsigned((a.max_seqlen_q + kWarps - 1) / kWarps), unsigned(h_q), unsigned(b));
  if (width <= 64) tree_attention_kernel<T, 2><<<grid, kWarps * 32, 0, stream>>>(p);
  else if (width <= 128) tree_attention_kernel<T, 4><<<grid, kWarps * 32, 0, stream>>>(p);
  else if (width <= 256) tree_attention_kernel<T, 8><<<grid, kWarps * 32, 0, stream>>>(p);
  else if (width <= 576) tree_attention_kernel<T, 18><<<grid, kWarps * 32, 0, stream>>>(p);
  else ATTNSERVE_FAIL("tree_attention: head dims up to 576 on CUDA, got ", width);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void tree_attention(const TreeAttentionArgs& a, Stream stream) {
  const DeviceGuard guard(a.q.device);
  switch (a.q.dtype) {
    case DType::bf16: launch<__nv_bfloat16>(a, to_cuda(stream)); break;
    case DType::f16: launch<__half>(a, to_cuda(stream)); break;
    default: ATTNSERVE_FAIL("tree_attention: q dtype ", dtype_name(a.q.dtype), " is not supported on CUDA");
  }
}

}  // namespace attnserve::cuda
