// Internal: SparsePlanner's state and the fill routine shared by eager plans, captures and replays.
#pragma once
#include <map>
#include <utility>

#include "attnserve/plan.h"
#include "plan/request_layout.h"
#include "plan/staged_arena.h"

namespace attnserve {

struct SparsePlanner::Impl {
  SparsePlanConfig cfg;
  Device device;
  PlanCapacity cap{};
  bool initialized = false;

  plan_detail::StagedArena arena;
  int64_t o_cache = 0, o_cu_k = 0, o_cu_q = 0, o_arange = 0, o_desc = 0, o_draft = 0, o_expand = 0;
  // Draft trees (spec.topk > 1; sparse_tree.cpp): per query row, host-computed and staged.
  int64_t o_tree_desc = 0;  // [max_rows, kGatherDescInts] one gather row per query row (page_table_1)
  int64_t o_tree_path = 0;  // [max_rows, draft_token_num] verify paths
  int64_t o_tree_len = 0, o_tree_exp = 0, o_tree_nsa = 0, o_tree_cu = 0, o_tree_pos = 0;  // [max_rows] (cu: + 1)
  Buffer page_table_1;     // [table_rows, max_context_len] token slots
  Buffer real_page_table;  // [table_rows, max_pages] (page_size > 1, or draft trees with target_verify)
  Buffer rows;             // expanded [T] | nsa_cache_seqlens [T] | nsa_cu_seqlens_k [T + 1], kernel-written
  int64_t max_rows = 0;    // T = max_num_tokens
  int64_t table_rows = 0;  // max_bs, or bs * draft_token_num rows in target_verify
  int max_pages = 0;

  plan_detail::RequestLayout layout;  // scratch
  SparseMetadata eager;
  std::map<std::pair<int, int>, SparseMetadata> graphs;

  Impl(const SparsePlanConfig& c, Device d);
  void require_init(const char* who) const;
  plan_detail::LayoutRules rules(const char* who) const;
  // build_layout plus the sparse-only checks (nsa_cu_seqlens_k fits int32).
  void build(const BatchSpec& batch, const char* who, plan_detail::RequestLayout& out) const;

  int32_t* rows_ptr(int which) const { return static_cast<int32_t*>(rows.data()) + which * max_rows; }
  TensorView rows_view(int which, int64_t n) const {
    return TensorView::contiguous(rows_ptr(which), DType::i32, {n}, device);
  }
  TensorView table_view(const Buffer& b, int64_t r, int64_t w) const {
    return TensorView::contiguous(b.data(), DType::i32, {r, w}, device);
  }

  // Writes `L` into the buffers; eager (graph false) also sets every field of `meta` with compact
  // views, a graph keeps the captured views and bounds. `graph_rows`: the graph's row count.
  void fill(const plan_detail::RequestLayout& L, SparseMetadata& meta, bool graph, int64_t graph_rows, Stream stream);

  // Draft trees (sparse_tree.cpp): the sparse-only checks of a tree batch, the fill, and the views.
  bool tree_mode(ForwardMode m) const { return plan_detail::is_tree_mode(m, cfg.spec); }
  int tree_rows_per_request(ForwardMode m) const;
  void check_tree(const BatchSpec& batch, const char* who, const plan_detail::RequestLayout& L) const;
  void fill_tree(const plan_detail::RequestLayout& L, SparseMetadata& meta, bool graph, Stream stream);
  // Every view of tree metadata: `rows` query rows of `bs` requests, page tables `w1` / `wp` wide.
  void tree_views(SparseMetadata& meta, ForwardMode mode, int bs, int64_t rows, int64_t w1, int64_t wp) const;
};

}  // namespace attnserve
