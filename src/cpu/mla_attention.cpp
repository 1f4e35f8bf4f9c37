// CPU oracle of MLA in absorbed form: one latent KV head whose key is [c_kv | k_rope] and whose value
// is c_kv, so it is paged attention with two score parts over slices of the same cache rows; an FP8-656
// cache is dequantized token by token (decode_fp8_mla_token) and then the same math.
#include "cpu/attention_core.h"
#include "cpu/cpu_ops.h"

namespace attnserve::cpu {

void mla_attention(const MlaAttentionArgs& a, bool fp64) {
  const int64_t d_v = a.q_nope.size(2), d_rope = a.q_rope.size(2);
  PagedAttentionProblem p;
  if (a.kv_cache.dtype == DType::u8) {
    // FP8-656: keys and values are decoded per token (attention_core.h); the key / value views only
    // carry the shapes: [pages, page_size, 1, 512] (latent bytes) and [.., 64] (rope bytes, unused).
    const TensorView c_kv = a.kv_cache.slice(3, 0, d_v);
    p.parts[0] = {a.q_nope, c_kv};
    p.parts[1] = {a.q_rope, a.kv_cache.slice(3, 0, d_rope)};
    p.v = c_kv;
    p.fp8_mla_kv = a.kv_cache;
  } else {
    const TensorView c_kv = a.kv_cache.slice(3, 0, d_v);               // [pages, page_size, 1, d_v]
    const TensorView k_rope = a.kv_cache.slice(3, d_v, d_v + d_rope);  // [pages, page_size, 1, d_rope]
    p.parts[0] = {a.q_nope, c_kv};
    p.parts[1] = {a.q_rope, k_rope};
    p.v = c_kv;
  }
  p.num_parts = 2;
  p.page_table = a.page_table;
  p.cache_seqlens = a.cache_seqlens;
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.out = a.out;
  p.lse = a.lse;
  p.softmax_scale = a.softmax_scale;
  p.causal = a.causal;
  p.window_left = a.window_left;
  p.window_right = a.window_right;
  p.softcap = a.softcap;
  run_paged_attention(p, fp64);
}

}  // namespace attnserve::cpu
