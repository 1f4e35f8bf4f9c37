// What an engine knows about a batch before a forward pass: the forward mode, per-request lengths
// (host), the rows of the request -> token-slot table, and the speculative-decoding inputs.
// The planners (plan.h) turn a BatchSpec into the metadata the attention kernels read.
#pragma once
#include <cstdint>
#include <span>

#include "attnserve/tensor.h"

namespace attnserve {

// Per request r, with q_len query rows (new tokens) and kv_len keys (cached + new), query row t
// (0-based) sits at absolute position kv_len - q_len + t and sees keys 0 .. kv_len - q_len + t
// (causal, aligned bottom-right). Per mode:
enum class ForwardMode : uint8_t {
  idle,           // no requests (data-parallel padding): empty metadata
  decode,         // q_len = 1, kv_len = seq_lens[r] (the new token included)
  extend,         // prefill / chunked prefill: q_len = extend_seq_lens[r], kv_len = seq_lens[r]
                  //   = extend_prefix_lens[r] + extend_seq_lens[r]
  draft_decode,   // EAGLE draft step i (planner config spec.step_id): q_len = 1,
                  //   kv_len = seq_lens[r] + i + 1; keys seq_lens[r] .. seq_lens[r] + i are the draft
                  //   tokens of steps 0..i, whose slots come from draft_slots (not from req_to_token).
                  //   Draft trees (spec.topk > 1): q_len = topk, one row per branch b; branch b sees
                  //   the prefix (seq_lens[r] keys) and its own draft tokens of steps 0..i
  target_verify,  // q_len = draft_token_num, kv_len = seq_lens[r] + draft_token_num
                  //   (the draft tokens' slots are in req_to_token). Draft trees (spec.topk > 1):
                  //   draft token t sees the prefix (seq_lens[r] keys) and its tree ancestors and
                  //   itself (tree_parents or tree_mask), at position seq_lens[r] + depth(t)
  draft_extend,   // the draft model over the accepted tokens: q_len = extend_seq_lens[r] (accepted
                  //   length, 1 .. draft_token_num), kv_len = seq_lens[r] (accepted tokens included)
};

const char* to_string(ForwardMode m);
// Modes a CUDA graph can be captured for (their query shape is fixed by the batch size).
bool is_graph_capturable(ForwardMode m);

// Host-side description of one batch. All spans are host memory, read during planning only.
struct BatchSpec {
  ForwardMode mode = ForwardMode::decode;
  std::span<const int32_t> seq_lens;            // [bs] per mode, see ForwardMode
  std::span<const int32_t> req_pool_indices;    // [bs] row of req_to_token of each request
  std::span<const int32_t> extend_seq_lens;     // [bs] extend, draft_extend: new tokens (query rows)
  std::span<const int32_t> extend_prefix_lens;  // [bs] extend: cached prefix (optional for draft_extend:
                                                //   if given it must equal seq_lens - extend_seq_lens)
  std::span<const int32_t> draft_slots;         // [bs, spec.num_steps] draft_decode, request-major:
                                                //   draft_slots[r * num_steps + s] is the slot of the
                                                //   draft token of step s of request r. Draft trees
                                                //   (spec.topk > 1): [bs, topk, num_steps], the slot of
                                                //   branch b's token of step s at (r, b, s)
  // target_verify with spec.topk > 1: the draft tree of each request, one of the two forms
  // (docs/backends.md "Draft trees"). Draft token t of request r is row r * draft_token_num + t.
  std::span<const int32_t> tree_parents;  // [bs, draft_token_num] parent draft token (same request), -1: root
  std::span<const int64_t> tree_mask;     // [bs, draft_token_num] bit j of (r, t): t sees draft token j
                                          //   (its ancestors and itself), as FlashInfer's packed custom mask
  TensorView req_to_token;                // [pool_size, max_context_len] i32 token slots, on the
                                          //   planner's device (the engine's ReqToTokenPool)

  int batch_size() const { return int(seq_lens.size()); }
};

}  // namespace attnserve
