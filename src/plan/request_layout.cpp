#include "plan/request_layout.h"

#include <algorithm>
#include <climits>

#include "attnserve/ops/tree_attention.h"  // kTreeMaxKeys
#include "plan/draft_tree.h"

namespace attnserve::plan_detail {

void RequestLayout::clear_to(ForwardMode m) {
  mode = m;
  live_bs = bs = 0;
  q_len.clear();
  kv_len.clear();
  pool_row.clear();
  draft_begin.clear();
  num_draft = draft_row_stride = 0;
  draft_slots = {};
  live_q_rows = q_rows = 0;
  max_q = max_kv = 0;
  any_prefix = false;
  req_to_token = {};
  tree = false;
  tree_keys = 0;
  tree_mask.clear();
  tree_pos.clear();
  tree_num_keys.clear();
  tree_key_slots.clear();
}

void RequestLayout::push(int32_t q, int32_t kv, int32_t pool, int32_t dbegin) {
  q_len.push_back(q);
  kv_len.push_back(kv);
  pool_row.push_back(pool);
  draft_begin.push_back(dbegin);
  ++bs;
  q_rows += q;
}

namespace {

void check_span(const char* who, const char* name, std::span<const int32_t> s, int64_t expected, ForwardMode m) {
  ATTNSERVE_CHECK(int64_t(s.size()) == expected, who, ": ", name, " has ", s.size(), " entries, expected ", expected,
                  " (", to_string(m), ", batch size ", expected, ")");
}

void check_req_to_token(const char* who, const TensorView& t, Device device) {
  ATTNSERVE_CHECK(!t.empty_view(), who, ": req_to_token is required (the [pool_size, max_context_len] i32 table)");
  ATTNSERVE_CHECK(t.dtype == DType::i32 && t.ndim == 2, who, ": req_to_token must be a 2-D i32 table, got ",
                  dtype_name(t.dtype), " ", t.shape_string());
  ATTNSERVE_CHECK(t.device == device, who, ": req_to_token is on ", to_string(t.device), ", the planner on ",
                  to_string(device));
  ATTNSERVE_CHECK(t.size(1) <= 1 || t.stride(1) == 1, who, ": req_to_token rows must be contiguous (stride ",
                  t.stride(1), ")");
  ATTNSERVE_CHECK(t.data != nullptr || t.numel() == 0, who, ": req_to_token has no data");
}

// Draft decode with topk branches: request r's keys are step-major (key s * topk + b = branch b's
// token of step s, s <= step_id); branch b's row sees keys b, topk + b, ..., step_id * topk + b.
void add_draft_decode_tree(const char* who, const BatchSpec& b, int r, int32_t seq, const SpeculativeConfig& spec,
                           RequestLayout& out) {
  const int K = spec.topk, S = spec.num_steps;
  uint64_t branch_bits = 0;
  for (int s = 0; s <= spec.step_id; ++s) branch_bits |= uint64_t(1) << (s * K);
  for (int s = 0; s <= spec.step_id; ++s)
    for (int br = 0; br < K; ++br) {
      const int32_t slot = b.draft_slots[(int64_t(r) * K + br) * S + s];
      ATTNSERVE_CHECK(slot >= 0, who, ": draft_slots[", r, ", ", br, ", ", s, "] = ", slot, " is negative");
      out.tree_key_slots.push_back(slot);
    }
  for (int br = 0; br < K; ++br) {
    out.tree_mask.push_back(branch_bits << br);
    out.tree_pos.push_back(seq + spec.step_id);
  }
  out.tree_num_keys.push_back(out.tree_keys);
}

// Target verify over request r's tree (tree_parents or tree_mask).
void add_verify_tree(const char* who, const BatchSpec& b, int r, int32_t seq, int n, RequestLayout& out) {
  const std::size_t at = out.tree_mask.size();
  out.tree_mask.resize(at + std::size_t(n));
  out.tree_pos.resize(at + std::size_t(n));
  if (!b.tree_parents.empty())
    tree_from_parents(who, r, b.tree_parents.subspan(std::size_t(r) * n, std::size_t(n)), &out.tree_mask[at],
                      &out.tree_pos[at]);
  else
    tree_from_masks(who, r, b.tree_mask.subspan(std::size_t(r) * n, std::size_t(n)), &out.tree_mask[at],
                    &out.tree_pos[at]);
  for (int t = 0; t < n; ++t) out.tree_pos[at + std::size_t(t)] += seq;
  out.tree_num_keys.push_back(n);
}

}  // namespace

bool is_tree_mode(ForwardMode mode, const SpeculativeConfig& spec) {
  return spec.topk > 1 && (mode == ForwardMode::target_verify || mode == ForwardMode::draft_decode);
}

int tree_keys_of(ForwardMode mode, const SpeculativeConfig& spec) {
  if (!is_tree_mode(mode, spec)) return 0;
  return mode == ForwardMode::target_verify ? spec.draft_token_num : spec.topk * (spec.step_id + 1);
}

void build_layout(const BatchSpec& b, const LayoutRules& rules, RequestLayout& out) {
  const char* who = rules.who;
  const ForwardMode m = b.mode;
  const PlanCapacity& cap = rules.capacity;
  const int bs = b.batch_size();
  out.clear_to(m);

  if (m == ForwardMode::idle) {
    ATTNSERVE_CHECK(bs == 0, who, ": an idle batch has no requests, got seq_lens with ", bs, " entries");
    return;
  }
  ATTNSERVE_CHECK(bs <= cap.max_bs, who, ": batch size ", bs, " exceeds capacity max_bs ", cap.max_bs);
  check_span(who, "req_pool_indices", b.req_pool_indices, bs, m);
  const bool has_ext = m == ForwardMode::extend || m == ForwardMode::draft_extend;
  if (has_ext) check_span(who, "extend_seq_lens", b.extend_seq_lens, bs, m);
  if (m == ForwardMode::extend || (m == ForwardMode::draft_extend && !b.extend_prefix_lens.empty()))
    check_span(who, "extend_prefix_lens", b.extend_prefix_lens, bs, m);
  const SpeculativeConfig& spec = rules.spec;
  if (m == ForwardMode::target_verify)
    ATTNSERVE_CHECK(spec.draft_token_num >= 1, who,
                    ": target_verify needs spec.draft_token_num >= 1 in the planner config");
  const bool tree = is_tree_mode(m, spec);
  if (m == ForwardMode::draft_decode) {
    ATTNSERVE_CHECK(spec.num_steps >= 1 && spec.step_id >= 0 && spec.step_id < spec.num_steps, who,
                    ": draft_decode needs 0 <= spec.step_id < spec.num_steps in the planner config, got step_id ",
                    spec.step_id, ", num_steps ", spec.num_steps);
    if (tree) {  // the draft keys go to the tree part, not into the page table
      check_span(who, "draft_slots", b.draft_slots, int64_t(bs) * spec.topk * spec.num_steps, m);
    } else {
      check_span(who, "draft_slots", b.draft_slots, int64_t(bs) * spec.num_steps, m);
      out.num_draft = spec.step_id + 1;
      out.draft_row_stride = spec.num_steps;
      out.draft_slots = b.draft_slots;
    }
  }
  if (m == ForwardMode::target_verify) {
    const bool given = !b.tree_parents.empty() || !b.tree_mask.empty();
    ATTNSERVE_CHECK(tree || !given, who,
                    ": tree_parents / tree_mask are given, but the planner's spec.topk = ", spec.topk,
                    " (draft trees need spec.topk > 1 in the planner config)");
    if (tree) {
      ATTNSERVE_CHECK(bs == 0 || b.tree_parents.empty() != b.tree_mask.empty(), who,
                      ": target_verify with spec.topk > 1 needs the draft trees: exactly one of tree_parents and "
                      "tree_mask ([bs, draft_token_num])");
      if (!b.tree_parents.empty())
        check_span(who, "tree_parents", b.tree_parents, int64_t(bs) * spec.draft_token_num, m);
      else
        ATTNSERVE_CHECK(int64_t(b.tree_mask.size()) == int64_t(bs) * spec.draft_token_num, who, ": tree_mask has ",
                        b.tree_mask.size(), " entries, expected ", int64_t(bs) * spec.draft_token_num,
                        " (target_verify, batch size ", bs, " x draft_token_num ", spec.draft_token_num, ")");
    }
  }
  if (tree) {
    out.tree = true;
    out.tree_keys = tree_keys_of(m, spec);
  }
  if (bs > 0) check_req_to_token(who, b.req_to_token, rules.device);
  const int64_t pool_size = bs > 0 ? b.req_to_token.size(0) : 0;
  const int64_t table_len = bs > 0 ? b.req_to_token.size(1) : 0;
  const int P = rules.page_size;

  int64_t kv_sum = 0;
  for (int r = 0; r < bs; ++r) {
    const int64_t seq = b.seq_lens[r];
    const int32_t pool = b.req_pool_indices[r];
    ATTNSERVE_CHECK(pool >= 0 && pool < pool_size, who, ": req_pool_indices[", r, "] = ", pool,
                    " is out of range for req_to_token with ", pool_size, " rows");
    int64_t q = 0, kv = 0, from_table = 0, dbegin = INT32_MAX;
    switch (m) {
      case ForwardMode::decode:
        ATTNSERVE_CHECK(seq >= 1, who, ": seq_lens[", r, "] = ", seq, " must be >= 1 (decode: the new token included)");
        q = 1, kv = from_table = seq;
        break;
      case ForwardMode::extend: {
        const int64_t ext = b.extend_seq_lens[r], pre = b.extend_prefix_lens[r];
        ATTNSERVE_CHECK(seq >= 0, who, ": seq_lens[", r, "] = ", seq, " is negative");
        ATTNSERVE_CHECK(ext >= 1, who, ": extend_seq_lens[", r, "] = ", ext, " must be >= 1");
        ATTNSERVE_CHECK(pre >= 0, who, ": extend_prefix_lens[", r, "] = ", pre, " is negative");
        ATTNSERVE_CHECK(pre <= seq, who, ": extend_prefix_lens[", r, "] = ", pre, " exceeds seq_lens[", r, "] = ", seq);
        ATTNSERVE_CHECK(pre + ext == seq, who, ": inconsistent lengths for request ", r, ": extend_prefix_lens ", pre,
                        " + extend_seq_lens ", ext, " != seq_lens ", seq);
        q = ext, kv = from_table = seq;
        out.any_prefix |= pre > 0;
        break;
      }
      case ForwardMode::draft_extend: {
        const int64_t ext = b.extend_seq_lens[r];
        ATTNSERVE_CHECK(seq >= 0, who, ": seq_lens[", r, "] = ", seq, " is negative");
        ATTNSERVE_CHECK(ext >= 1, who, ": extend_seq_lens[", r, "] = ", ext, " must be >= 1 (accepted tokens)");
        ATTNSERVE_CHECK(ext <= seq, who, ": extend_seq_lens[", r, "] = ", ext, " exceeds seq_lens[", r, "] = ", seq,
                        " (draft_extend: seq_lens include the accepted tokens)");
        if (!b.extend_prefix_lens.empty())
          ATTNSERVE_CHECK(int64_t(b.extend_prefix_lens[r]) + ext == seq, who, ": inconsistent lengths for request ", r,
                          ": extend_prefix_lens ", b.extend_prefix_lens[r], " + extend_seq_lens ", ext, " != seq_lens ",
                          seq);
        q = ext, kv = from_table = seq;
        break;
      }
      case ForwardMode::draft_decode: {
        ATTNSERVE_CHECK(seq >= 1, who, ": seq_lens[", r, "] = ", seq, " must be >= 1 (draft_decode)");
        if (tree) {
          q = spec.topk, kv = from_table = seq;
          add_draft_decode_tree(who, b, r, int32_t(seq), spec, out);
          break;
        }
        q = 1, kv = seq + out.num_draft, from_table = seq, dbegin = seq;
        for (int s = 0; s < out.num_draft; ++s) {
          const int64_t slot = b.draft_slots[int64_t(r) * spec.num_steps + s];
          ATTNSERVE_CHECK(slot >= 0, who, ": draft_slots[", r, ", ", s, "] = ", slot, " is negative");
          ATTNSERVE_CHECK(slot % P == (seq + s) % P, who, ": draft_slots[", r, ", ", s, "] = ", slot,
                          " cannot hold position ", seq + s, " with page_size ", P, " (slot % page_size must equal ",
                          "position % page_size)");
        }
        break;
      }
      case ForwardMode::target_verify:
        ATTNSERVE_CHECK(seq >= 0, who, ": seq_lens[", r, "] = ", seq, " is negative");
        q = spec.draft_token_num, kv = from_table = seq + spec.draft_token_num;
        if (tree) {  // the prefix part sees seq keys; the draft tokens' slots are read from the table
          kv = seq;
          add_verify_tree(who, b, r, int32_t(seq), spec.draft_token_num, out);
        }
        break;
      case ForwardMode::idle: break;
    }
    ATTNSERVE_CHECK(kv <= cap.max_context_len, who, ": request ", r, " has ", kv, " keys (", to_string(m),
                    "), more than capacity max_context_len ", cap.max_context_len);
    ATTNSERVE_CHECK(from_table <= table_len, who, ": request ", r, " needs ", from_table,
                    " positions of req_to_token, whose rows hold ", table_len);
    kv_sum += kv;
    out.push(int32_t(q), int32_t(kv), pool, int32_t(dbegin));
    out.max_q = std::max<int>(out.max_q, int(q));
    out.max_kv = std::max<int>(out.max_kv, int(kv));
  }
  ATTNSERVE_CHECK(out.q_rows <= cap.max_num_tokens, who, ": ", out.q_rows, " query rows (", to_string(m),
                  ") exceed capacity max_num_tokens ", cap.max_num_tokens);
  ATTNSERVE_CHECK(kv_sum <= INT32_MAX, who, ": the keys of the batch sum to ", kv_sum, ", beyond int32");
  out.live_bs = bs;
  out.live_q_rows = out.q_rows;
  out.req_to_token = b.req_to_token;
}

int padding_q_len(ForwardMode mode, const SpeculativeConfig& spec) {
  switch (mode) {
    case ForwardMode::decode:
    case ForwardMode::draft_decode: return spec.topk > 1 ? spec.topk : 1;
    case ForwardMode::target_verify: return spec.draft_token_num;
    default: return 0;  // draft_extend: rows are packed accepted tokens; a padding request has none
  }
}

void pad_layout(RequestLayout& L, int bs, const SpeculativeConfig& spec) {
  const int q = padding_q_len(L.mode, spec);
  while (L.bs < bs) {
    L.push(q, 0, 0, INT32_MAX);
    if (L.tree) {  // a padding request sees no draft key either
      L.tree_num_keys.push_back(0);
      L.tree_mask.insert(L.tree_mask.end(), std::size_t(q), 0);
      L.tree_pos.insert(L.tree_pos.end(), std::size_t(q), 0);
    }
  }
}

void padding_layout(RequestLayout& L, ForwardMode mode, int bs, const SpeculativeConfig& spec) {
  L.clear_to(mode);
  L.tree = is_tree_mode(mode, spec);
  L.tree_keys = tree_keys_of(mode, spec);
  if (mode == ForwardMode::draft_decode && !L.tree) {
    L.num_draft = spec.step_id + 1;
    L.draft_row_stride = spec.num_steps;
  }
  pad_layout(L, bs, spec);
}

void check_spec_config(const char* who, const SpeculativeConfig& s) {
  ATTNSERVE_CHECK(s.draft_token_num >= 0, who, ": spec.draft_token_num = ", s.draft_token_num, " is negative");
  ATTNSERVE_CHECK(s.num_steps >= 0, who, ": spec.num_steps = ", s.num_steps, " is negative");
  ATTNSERVE_CHECK(s.step_id >= 0 && (s.num_steps == 0 || s.step_id < s.num_steps), who, ": spec.step_id = ", s.step_id,
                  " must be in [0, num_steps = ", s.num_steps, ")");
  ATTNSERVE_CHECK(s.topk >= 0, who, ": spec.topk = ", s.topk, " is negative (0 and 1: no draft trees)");
  if (s.topk > 1) {
    ATTNSERVE_CHECK(s.draft_token_num <= kTreeMaxKeys, who, ": spec.draft_token_num = ", s.draft_token_num,
                    ": a draft tree (spec.topk > 1) holds at most ", kTreeMaxKeys, " tokens");
    ATTNSERVE_CHECK(s.num_steps == 0 || int64_t(s.topk) * (s.step_id + 1) <= kTreeMaxKeys, who,
                    ": spec.topk = ", s.topk, " branches x ", s.step_id + 1, " draft steps (step_id ", s.step_id,
                    ") exceed the ", kTreeMaxKeys, " draft keys a request may have");
  }
}

void check_capacity(const char* who, const PlanCapacity& c) {
  ATTNSERVE_CHECK(c.max_bs >= 1, who, ": capacity max_bs = ", c.max_bs, " must be >= 1");
  ATTNSERVE_CHECK(c.max_num_tokens >= c.max_bs, who, ": capacity max_num_tokens = ", c.max_num_tokens,
                  " must be >= max_bs = ", c.max_bs, " (a decode batch has max_bs query rows)");
  ATTNSERVE_CHECK(c.max_context_len >= 1, who, ": capacity max_context_len = ", c.max_context_len, " must be >= 1");
}

void check_capture_shape(const char* who, int bs, ForwardMode mode, const SpeculativeConfig& spec,
                         const PlanCapacity& c) {
  ATTNSERVE_CHECK(is_graph_capturable(mode), who, ": mode ", to_string(mode),
                  " cannot be captured (capturable: decode, draft_decode, target_verify, draft_extend)");
  ATTNSERVE_CHECK(bs >= 1 && bs <= c.max_bs, who, ": graph batch size ", bs, " is outside [1, max_bs = ", c.max_bs,
                  "]");
  if (mode == ForwardMode::target_verify || mode == ForwardMode::draft_extend) {
    ATTNSERVE_CHECK(spec.draft_token_num >= 1, who, ": ", to_string(mode),
                    " needs spec.draft_token_num >= 1 in the planner config");
    ATTNSERVE_CHECK(int64_t(bs) * spec.draft_token_num <= c.max_num_tokens, who, ": ", to_string(mode), " graph of ",
                    bs, " requests x ", spec.draft_token_num, " draft tokens exceeds capacity max_num_tokens ",
                    c.max_num_tokens);
  }
  if (mode == ForwardMode::draft_decode) {
    ATTNSERVE_CHECK(spec.num_steps >= 1, who, ": draft_decode needs spec.num_steps >= 1 in the planner config");
    ATTNSERVE_CHECK(int64_t(bs) * padding_q_len(mode, spec) <= c.max_num_tokens, who, ": draft_decode graph of ", bs,
                    " requests x ", spec.topk, " branches exceeds capacity max_num_tokens ", c.max_num_tokens);
  }
}

void check_replay_batch(const char* who, int bs, ForwardMode mode, const BatchSpec& batch,
                        const SpeculativeConfig& spec) {
  ATTNSERVE_CHECK(batch.mode == mode, who, ": the batch's mode ", to_string(batch.mode),
                  " differs from the graph's mode ", to_string(mode));
  ATTNSERVE_CHECK(batch.batch_size() <= bs, who, ": batch of ", batch.batch_size(),
                  " requests does not fit the graph captured for ", bs);
  if (mode == ForwardMode::draft_extend && batch.extend_seq_lens.size() == batch.seq_lens.size())
    for (std::size_t r = 0; r < batch.extend_seq_lens.size(); ++r)
      ATTNSERVE_CHECK(batch.extend_seq_lens[r] <= spec.draft_token_num, who, ": extend_seq_lens[", r,
                      "] = ", batch.extend_seq_lens[r], " accepted tokens exceed spec.draft_token_num ",
                      spec.draft_token_num, " (the graph's rows per request)");
}

}  // namespace attnserve::plan_detail
