// Attention under an explicit bit mask over a few keys per request: the draft-tree part of EAGLE
// tree verify and of draft decode with topk > 1. The backends attend to a request's cached prefix
// with paged_attention (no mask, with LSE), to its draft tokens with tree_attention (with LSE), and
// merge the two states with merge_state (docs/backends.md, "Draft trees").
#pragma once
#include "attnserve/runtime.h"

namespace attnserve {

// Keys a request may have in tree_attention (one 64-bit mask word per query row).
inline constexpr int kTreeMaxKeys = 64;

// Request r owns query rows [cu_seqlens_q[r], cu_seqlens_q[r + 1]) and keys key_slots[r, 0 .. num_keys[r])
// (token slots of k_cache / v_cache, page size 1). Query row i of request r sees key j (j < num_keys[r])
// iff bit j of mask[i] is set. Scores: s = softmax_scale * (q.k + q_rope.k_rope); with softcap > 0,
// s = softcap * tanh(s / softcap). Rows that see no key: out = 0, lse = -inf.
// MLA (absorbed): k_cache = the latent cache [num_slots, 1, 576], v_cache = its first 512 columns (a
// strided view of the same memory), q = q_nope [.., 512] with q_rope [.., 64] (or q packed, 576).
struct TreeAttentionArgs {
  TensorView q;             // [total_q, h_q, d_q]           bf16 | f16 (f32 on the CPU)
  TensorView k_cache;       // [num_slots, h_kv, d_q + d_rope] q's dtype; rows may be strided
  TensorView v_cache;       // [num_slots, h_kv, d_v]        q's dtype
  TensorView key_slots;     // [b, max_keys] i32, max_keys <= kTreeMaxKeys
  TensorView num_keys;      // [b] i32, each in [0, max_keys]
  TensorView cu_seqlens_q;  // [b + 1] i32
  TensorView mask;          // [total_q] i64 bit masks (bit j: the row sees key j of its request)
  TensorView out;           // [total_q, h_q, d_v] q's dtype
  TensorView lse{};         // optional [total_q, h_q] f32, natural log of the softmax denominator
  TensorView q_rope{};      // optional [total_q, h_q, d_rope] q's dtype (MLA split form)
  // Optional, together: the prefix part's state (its output and LSE). When given, the tree part's
  // state is merged with it by LSE (as merge_state) and the merged result is written to `out`, and to
  // `lse` when given. prefix_out may be `out` itself (merged in place). An infinite prefix LSE (either
  // sign) is a state without keys.
  TensorView prefix_out{};  // [total_q, h_q, d_v] q's dtype
  TensorView prefix_lse{};  // [total_q, h_q] f32
  int max_seqlen_q = 0;     // upper bound of per-request query rows (the CUDA grid; required on CUDA)
  float softmax_scale = 0.f;
  float softcap = 0.f;
};
// Never allocates or syncs; graph-capturable on CUDA (the grid depends on b and max_seqlen_q only).
// Slots outside k_cache: an Error on the CPU, the key is skipped on CUDA.
void tree_attention(const TreeAttentionArgs& a, Stream stream = {});

}  // namespace attnserve
