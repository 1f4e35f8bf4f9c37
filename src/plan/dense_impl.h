// Internal: DensePlanner's state and the one fill routine eager plans, captures and replays share
// (so a replay writes exactly what a fresh plan writes).
#pragma once
#include <map>
#include <utility>
#include <vector>

#include "attnserve/plan.h"
#include "plan/local_attention.h"
#include "plan/request_layout.h"
#include "plan/staged_arena.h"

namespace attnserve {

struct DensePlanner::Impl {
  DensePlanConfig cfg;
  Device device;
  PlanCapacity cap{};
  bool initialized = false;

  // Staged arrays (offsets into the arena, i32 elements).
  plan_detail::StagedArena arena;
  int64_t o_cache = 0, o_cu_q = 0, o_cu_k = 0, o_arange = 0, o_desc = 0, o_draft = 0;
  int64_t o_local_q = 0, o_local_k = 0, o_local_desc = 0;
  // Draft trees (spec.topk > 1): the tree part's arrays; tree_slots is gathered on the device.
  int64_t o_tree_nk = 0, o_tree_mask = 0, o_tree_pos = 0, o_tree_desc = 0, o_tree_host_slots = 0;
  Buffer tree_slots;  // [max_bs, max_tree_keys] i32
  int max_tree_keys = 0;
  // Gathered on the device.
  Buffer page_table;   // [max_bs, max_pages]
  Buffer local_table;  // [local_capacity, chunk_pages]
  int max_pages = 0, chunk_pages = 0;
  int64_t local_capacity = 0;

  plan_detail::RequestLayout layout;  // scratch
  std::vector<plan_detail::VirtualBatch> vbs;
  DenseMetadata eager;
  std::map<std::pair<int, int>, DenseMetadata> graphs;  // (bs, mode) -> captured metadata

  Impl(const DensePlanConfig& c, Device d);
  void require_init(const char* who) const;
  plan_detail::LayoutRules rules(const char* who) const;
  bool local_enabled() const { return cfg.attention_chunk_size > 0; }
  int64_t graph_virtual_batches(int bs, ForwardMode mode) const;

  TensorView page_table_view(int64_t rows, int64_t width) const;
  TensorView local_table_view(int64_t rows, int64_t width) const;
  // The tree part's views for bs requests and `rows` query rows (mode's key width).
  DraftTreeMetadata tree_views(ForwardMode mode, int64_t bs, int64_t rows) const;
  void fill_tree(const plan_detail::RequestLayout& L, Stream stream);

  // Writes `L` into the buffers. Eager (graph == nullptr): sets every field of `meta` with compact
  // views. Graph: `meta` holds the captured views and bounds; only device contents change.
  void fill(const plan_detail::RequestLayout& L, DenseMetadata& meta, bool graph, Stream stream);
};

}  // namespace attnserve
