// Kernel parameters of tree_attention and the helpers its kernels share (portable, sm_80+).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace attnserve::cuda::tree {

// Strides are in elements. Request r owns query rows [cu_q[r], cu_q[r + 1]) and keys
// key_slots[r, 0 .. num_keys[r]); mask[row] bit j: the row sees key j.
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
  const T* prefix_out;  // null: no merge
  int64_t po_st, po_sh;
  const float* prefix_lse;
  int64_t pl_st, pl_sh;
  int d_q, d_rope, d_v, group;
  int64_t num_slots;
  float scale, softcap;
};

// The score of a dot product: scaled, then soft-capped when softcap > 0 (as the CPU oracle).
__device__ __forceinline__ float tree_score(const float dot, float scale, float softcap) {
  const float s = scale * dot;
  return softcap > 0.f ? softcap * tanhf(s / softcap) : s;
}

// Merge of the tree state (lse_tree, normalized output) with the prefix state: the weights of both
// outputs; lse_tree becomes the merged LSE. An infinite prefix LSE (either sign) has no keys.
__device__ __forceinline__ void merge_weights(float lse_prefix, float& lse_tree, float& w_prefix, float& w_tree) {
  const float a = isfinite(lse_prefix) ? lse_prefix : -INFINITY;
  const float m = fmaxf(a, lse_tree);
  if (m == -INFINITY) {
    w_prefix = w_tree = 0.f;
    return;  // neither part has a key: out 0, lse -inf
  }
  const float ea = expf(a - m), eb = expf(lse_tree - m), inv = 1.f / (ea + eb);
  w_prefix = ea * inv, w_tree = eb * inv;
  lse_tree = m + logf(ea + eb);
}

// 2^x by the SFU (ex2.approx.ftz: ~2 ulp, denormal results flushed to 0; 2^-inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two packed elements of T <-> two floats (low half first).
template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t w);
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t w) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w));
}
template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t w) {
  return __half22float2(*reinterpret_cast<const __half2*>(&w));
}

}  // namespace attnserve::cuda::tree
