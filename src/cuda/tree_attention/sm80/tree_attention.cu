// tree_attention on CUDA (portable, sm_80+): one warp per (query row, head). The problems are tiny (at
// most kTreeMaxKeys keys per request, a few dozen rows), so no tensor cores and no shared memory: each
// lane holds kPer elements of q and of the output accumulator (element lane + 32 i), a key's score is a
// warp sum, and an online softmax runs over the keys the row's mask selects (the K/V rows of a request
// are re-read by its rows from L1/L2). Grid (row blocks of kWarps, h_q, b): fixed by b and max_seqlen_q,
// so a captured graph replays with any lengths. No host sync, no allocation.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/host_util.cuh"
#include "cuda/common/numeric.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/tree_attention/tree_attention.h"

namespace attnserve::cuda {
namespace {

constexpr int kWarps = 4;  // query rows per CTA

template <typename T>
struct TreeParams {
  const T* q;
  int64_t q_st, q_sh;
  const T* q_rope;  // null: d_rope = 0
  int64_t qr_st, qr_sh;
  const T* k;
  int64_t k_ss, k_sh;  // elements between slots / heads
  const T* v;
  int64_t v_ss, v_sh;
  const int32_t* key_slots;
  int64_t ks_st;
  const int32_t* num_keys;
  const int32_t* cu_q;
  const int64_t* mask;
  T* out;
  int64_t o_st, o_sh;
  float* lse;  // null: not written
  int64_t l_st, l_sh;
  int d_q, d_rope, d_v, group;
  int64_t num_slots;
  float scale, softcap;
};

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
    float s = p.scale * ptx::warp_sum(dot);
    if (p.softcap > 0.f) s = p.softcap * tanhf(s / p.softcap);
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
  T* o = p.out + row * p.o_st + h * p.o_sh;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = lane + 32 * i;
    if (e < p.d_v) o[e] = from_f32<T>(acc[i] * inv);
  }
  if (p.lse && lane == 0) p.lse[row * p.l_st + h * p.l_sh] = l > 0.f ? m + logf(l) : -INFINITY;
}

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
  p.d_q = int(a.q.size(2)), p.d_rope = a.q_rope.empty_view() ? 0 : int(a.q_rope.size(2));
  p.d_v = int(a.v_cache.size(2));
  p.group = int(a.q.size(1) / a.k_cache.size(1));
  p.num_slots = a.k_cache.size(0);
  p.scale = a.softmax_scale, p.softcap = a.softcap;

  const int64_t b = a.key_slots.size(0), h_q = a.q.size(1);
  if (b == 0 || a.q.size(0) == 0 || a.max_seqlen_q == 0) return;
  ATTNSERVE_CHECK(b < 65536 && h_q < 65536, "tree_attention: b = ", b, " and h_q = ", h_q, " must be < 65536 on CUDA");
  const dim3 grid(unsigned((a.max_seqlen_q + kWarps - 1) / kWarps), unsigned(h_q), unsigned(b));
  const int width = std::max(p.d_q + p.d_rope, p.d_v);
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
