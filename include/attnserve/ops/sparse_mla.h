// DeepSeek sparse attention (DSA) over an MLA cache: each query row attends to its own top-k slots.
#pragma once
#include "attnserve/runtime.h"

namespace attnserve {

// Row r, head h: keys are the slots indices[r, 0 .. n_r), n_r = topk_length[r] if given else topk.
// A slot < 0 or >= num_slots is skipped. Duplicate valid slots count as many times as they appear.
// d_qk = 576 (512 latent + 64 rope), d_v = 512 (the latent). score = softmax_scale * q.k.
// With attn_sink[h] (a logit in the same scaled units as s_j):
//   out = sum_j exp(s_j) v_j / (sum_j exp(s_j) + exp(sink_h)); lse and max_logits exclude the sink.
// Rows with no valid slot: out = 0, lse = -inf, max_logits = -inf.
struct SparseMlaArgs {
  TensorView q;                // [rows, h_q, 576] bf16 (f32 on the CPU)
  TensorView kv;               // [num_slots, 576] bf16, or [num_slots, 656] u8 (FP8-656, cache_formats.h)
  TensorView indices;          // [rows, topk] i32 slots
  TensorView out;              // [rows, h_q, 512] q's dtype
  TensorView topk_length{};    // optional [rows] i32
  TensorView attn_sink{};      // optional [h_q] f32
  TensorView lse{};            // optional [rows, h_q] f32 (natural log)
  TensorView max_logits{};     // optional [rows, h_q] f32 (scaled scores)
  float softmax_scale = 0.f;   // required: DeepSeek-V3.2 uses 192^-0.5 * mscale^2, not 576^-0.5
  bool deterministic = false;  // CUDA: never split a row's top-k list (bits independent of the batch size)
};
// CUDA: when rows x head blocks leave the GPU underfilled, each row's top-k list is split across CTAs
// and the workspace holds their partial states; the split count depends only on shapes, deterministic
// and the device (CUDA-graph safe), never on index values or topk_length.
std::size_t sparse_mla_workspace_size(const SparseMlaArgs& a, const DeviceCaps& caps);
void sparse_mla(const SparseMlaArgs& a, Workspace ws = {}, Stream stream = {});

}  // namespace attnserve
