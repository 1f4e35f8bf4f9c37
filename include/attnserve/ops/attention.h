// Dense paged attention (MHA/GQA/MQA), MLA absorbed, and merging of partial attention states.
// All index tensors (page_table, cache_seqlens, cu_seqlens_q) live on the same device as q.
#pragma once
#include "attnserve/runtime.h"

namespace attnserve {

// Paged attention with varlen queries (FlashAttention's flash_attn_with_kvcache contract).
// Request r owns query rows [cu_seqlens_q[r], cu_seqlens_q[r+1]) and keys 0..cache_seqlens[r]-1,
// key j living at k_cache[page_table[r, j / page_size], j % page_size].
// Query row i of a request with q_len rows and k_len keys sits at absolute position
// p = k_len - q_len + i (causal aligned bottom-right). It sees key j iff
//   (!causal || j <= p) && (window_left < 0 || j >= p - window_left)
//                       && (window_right < 0 || j <= p + window_right).
// Scores: s = softmax_scale * q.k; with softcap > 0, s = softcap * tanh(s / softcap).
// Rows that see no key: out = 0, lse = -inf.
// FP8 (FlashAttention-3's contract, what sglang passes for an FP8 KV cache): q, k_cache and v_cache
// all fp8_e4m3, each dequantized by its optional per-(request, kv head) descale (query = fp8 *
// q_descale for every query head of the kv head), out bf16 or f16.
// FP8 K/V, bf16/f16 q, CUDA portable kernel: decode / verify (16-row tiles) at d 64 / 128 run both products on
// f16 tensor cores, operands read straight from the e4m3 bytes (default; Tuning::fp8_direct = 0: other shapes'
// widening to q's dtype, exact): q is rounded to f16 once, saturating at +-65504 (FA3 under sglang quantizes q
// to e4m3, max 448), and P is rounded to f16.
struct PagedAttentionArgs {
  TensorView q;               // [total_q, h_q, d]            bf16 | f16 | fp8_e4m3 (f32 on the CPU)
  TensorView k_cache;         // [num_pages, page_size, h_kv, d]  q's dtype | fp8_e4m3 (fp8 q: fp8_e4m3)
  TensorView v_cache;         // [num_pages, page_size, h_kv, d_v] same dtype as k_cache
  TensorView page_table;      // [b, max_pages] i32 page ids
  TensorView cache_seqlens;   // [b] i32 keys per request
  TensorView cu_seqlens_q;    // [b + 1] i32 prefix sums of query rows
  TensorView out;             // [total_q, h_q, d_v] q's dtype; bf16 | f16 when q is fp8_e4m3
  TensorView lse{};           // optional [total_q, h_q] f32, natural log of the softmax denominator
  TensorView q_descale{};     // optional [b, h_kv] f32 (fp8 q: query = fp8 * descale)
  TensorView k_descale{};     // optional [b, h_kv] f32 (fp8 cache: key = fp8 * descale)
  TensorView v_descale{};     // optional [b, h_kv] f32
  int max_seqlen_q = 0;       // upper bound of per-request query rows (required on CUDA)
  float softmax_scale = 0.f;  // required, > 0
  bool causal = true;
  int window_left = -1;  // -1: unbounded
  int window_right = -1;
  float softcap = 0.f;         // 0: off
  bool deterministic = false;  // fixed split sizes (bits independent of the batch)
};
std::size_t paged_attention_workspace_size(const PagedAttentionArgs& a, const DeviceCaps& caps);
void paged_attention(const PagedAttentionArgs& a, Workspace ws = {}, Stream stream = {});

// MLA, absorbed form: one latent KV head; score = q_nope.c_kv + q_rope.k_rope, value = c_kv.
// kv_cache rows are [c_kv (d_v) | k_rope (d_rope)]. Same paging, masking and options as above.
// An FP8-656 cache (u8 rows of 656 bytes, DeepSeek-V3.2's format, cache_formats.h: 512 e4m3 latent
// values, 4 f32 scales, 64 bf16 rope values) needs d_v 512 and d_rope 64; each token is dequantized
// (fp8 * scale) and then used as a bf16 cache row would be.
struct MlaAttentionArgs {
  TensorView q_nope;         // [total_q, h_q, d_v]    bf16 (f32 on the CPU)
  TensorView q_rope;         // [total_q, h_q, d_rope]
  TensorView kv_cache;       // [num_pages, page_size, 1, d_v + d_rope] q's dtype, or [.., 1, 656] u8 (FP8-656)
  TensorView page_table;     // [b, max_pages] i32
  TensorView cache_seqlens;  // [b] i32
  TensorView cu_seqlens_q;   // [b + 1] i32
  TensorView out;            // [total_q, h_q, d_v]
  TensorView lse{};          // optional [total_q, h_q] f32
  int max_seqlen_q = 0;
  float softmax_scale = 0.f;
  bool causal = true;
  int window_left = -1;
  int window_right = -1;
  float softcap = 0.f;
  bool deterministic = false;
};
std::size_t mla_attention_workspace_size(const MlaAttentionArgs& a, const DeviceCaps& caps);
void mla_attention(const MlaAttentionArgs& a, Workspace ws = {}, Stream stream = {});

// Merge two partial attention states over disjoint key sets:
//   s = log(exp(s_a) + exp(s_b)),  v = v_a * exp(s_a - s) + v_b * exp(s_b - s).
// A part with lse -inf contributes nothing; both -inf gives v = 0, s = -inf.
struct MergeStateArgs {
  TensorView v_a;      // [tokens, heads, d] bf16 | f16 | f32
  TensorView s_a;      // [tokens, heads] f32
  TensorView v_b;      // same as v_a
  TensorView s_b;      // same as s_a
  TensorView v_out;    // same as v_a
  TensorView s_out{};  // optional [tokens, heads] f32
};
void merge_state(const MergeStateArgs& a, Stream stream = {});

// Merge n partial states (split-KV): v_parts [n, tokens, heads, d], s_parts [n, tokens, heads].
struct MergeStatesArgs {
  TensorView v_parts;  // [n, tokens, heads, d] f32 | bf16 | f16
  TensorView s_parts;  // [n, tokens, heads] f32
  TensorView v_out;    // [tokens, heads, d]
  TensorView s_out{};  // optional [tokens, heads] f32
};
void merge_states(const MergeStatesArgs& a, Stream stream = {});

}  // namespace attnserve
