// Internal: a batch reduced to per-request (q_len, kv_len, pool row, draft override), validated.
// Both planners build their metadata from this; graphs append padding requests (kv_len 0).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "attnserve/plan.h"

namespace attnserve::plan_detail {

struct LayoutRules {
  const char* who = "";  // names the call in error messages, e.g. "DensePlanner::plan"
  int page_size = 1;
  SpeculativeConfig spec{};
  PlanCapacity capacity{};
  Device device{};
};

struct RequestLayout {
  ForwardMode mode = ForwardMode::idle;
  int live_bs = 0;                                            // requests of the batch
  int bs = 0;                                                 // live_bs + padding requests
  std::vector<int32_t> q_len, kv_len, pool_row, draft_begin;  // [bs]
  int num_draft = 0;                                          // draft_decode: step_id + 1 draft keys per request
  int draft_row_stride = 0;                                   // draft_decode: num_steps
  std::span<const int32_t> draft_slots;
  int64_t live_q_rows = 0;    // sum of q_len over live requests
  int64_t q_rows = 0;         // sum of q_len over all requests
  int max_q = 0, max_kv = 0;  // over live requests
  bool any_prefix = false;    // extend: some request has cached keys (cu_seqlens_q != cu_seqlens_k)
  TensorView req_to_token;
  // Draft trees (spec.topk > 1, target_verify / draft_decode): the tree part's inputs.
  bool tree = false;
  int tree_keys = 0;                    // draft keys per request (the tree part's width)
  std::vector<uint64_t> tree_mask;      // [q_rows] bit j: the row sees draft key j of its request
  std::vector<int32_t> tree_pos;        // [q_rows] absolute positions
  std::vector<int32_t> tree_num_keys;   // [bs]
  std::vector<int32_t> tree_key_slots;  // draft_decode: [live_bs, tree_keys] (verify: from req_to_token)

  void clear_to(ForwardMode m);  // keeps the vectors' storage
  void push(int32_t q, int32_t kv, int32_t pool, int32_t dbegin);
};

// Validates every field `batch.mode` needs against `rules` and fills `out` (throws before returning
// on the first problem; `out` is scratch). Padding is not added.
void build_layout(const BatchSpec& batch, const LayoutRules& rules, RequestLayout& out);

// Whether a batch of `mode` attends in two parts over draft trees, and its draft keys per request.
bool is_tree_mode(ForwardMode mode, const SpeculativeConfig& spec);
int tree_keys_of(ForwardMode mode, const SpeculativeConfig& spec);

// Query rows of a padding request in a graph of `mode`: its captured shape with no keys.
int padding_q_len(ForwardMode mode, const SpeculativeConfig& spec);
// Appends padding requests up to `bs`.
void pad_layout(RequestLayout& layout, int bs, const SpeculativeConfig& spec);
// A layout of `bs` padding requests (what capture() writes before the first replay).
void padding_layout(RequestLayout& layout, ForwardMode mode, int bs, const SpeculativeConfig& spec);

// Validates a planner's configuration and capacity (shared parts).
void check_spec_config(const char* who, const SpeculativeConfig& spec);
void check_capacity(const char* who, const PlanCapacity& c);
// The graph checks shared by both planners: mode capturable, bs within capacity, spec fields set.
void check_capture_shape(const char* who, int bs, ForwardMode mode, const SpeculativeConfig& spec,
                         const PlanCapacity& c);
// replay(): batch.mode == mode, live batch <= bs, draft_extend accepted lengths <= draft_token_num.
void check_replay_batch(const char* who, int bs, ForwardMode mode, const BatchSpec& batch,
                        const SpeculativeConfig& spec);

}  // namespace attnserve::plan_detail
