// DensePlanner's CUDA-graph state (seed 001 init_cuda_graph_state / capture / replay): captured
// metadata points into the buffers init() allocated; replay rewrites their contents in place with
// the same fill an eager plan runs, the batch padded to the captured size.
#include <algorithm>

#include "plan/dense_impl.h"

namespace attnserve {

using namespace plan_detail;

namespace {
// The query rows a captured graph of `mode` has per request (its q tensor is bs times this).
int graph_q_bound(ForwardMode mode, const SpeculativeConfig& spec) {
  return mode == ForwardMode::draft_extend ? spec.draft_token_num : padding_q_len(mode, spec);
}
}  // namespace

const DenseMetadata& DensePlanner::capture(int bs, ForwardMode mode, Stream stream) {
  Impl& s = *impl_;
  constexpr const char* who = "DensePlanner::capture";
  s.require_init(who);
  check_capture_shape(who, bs, mode, s.cfg.spec, s.cap);

  DenseMetadata& meta = s.graphs[{bs, int(mode)}];
  const int q_bound = graph_q_bound(mode, s.cfg.spec);
  meta = DenseMetadata{};
  meta.mode = mode;
  meta.batch_size = bs;
  meta.num_q_rows = bs * q_bound;
  meta.page_size = s.cfg.page_size;
  meta.cache_seqlens_int32 = s.arena.view(s.o_cache, {bs});
  meta.cu_seqlens_k = s.arena.view(s.o_cu_k, {bs + 1});
  const bool arange_q =
      (mode == ForwardMode::decode || mode == ForwardMode::draft_decode) && !is_tree_mode(mode, s.cfg.spec);
  meta.cu_seqlens_q = s.arena.view(arange_q ? s.o_arange : s.o_cu_q, {bs + 1});
  meta.max_seq_len_q = q_bound;
  meta.max_seq_len_k = s.cap.max_context_len;
  meta.page_table = s.page_table_view(bs, s.max_pages);
  if (s.cfg.sliding_window_size >= 0) meta.window_left = s.cfg.sliding_window_size, meta.window_right = 0;
  if (s.local_enabled()) {
    const int C = s.cfg.attention_chunk_size;
    const int64_t vb = s.graph_virtual_batches(bs, mode);
    LocalAttentionMetadata& la = meta.local_attn_metadata;
    meta.has_local_attn = true;
    la.local_query_start_loc = s.arena.view(s.o_local_q, {vb + 1});
    la.local_seqused_k = s.arena.view(s.o_local_k, {vb});
    la.local_block_table = s.local_table_view(vb, s.chunk_pages);
    la.local_max_query_len = q_bound;  // a padding request is one virtual batch of all its rows
    la.local_max_seq_len = C;
    la.num_virtual_batches = int(vb);
    la.effective_chunk_size = C;
  }
  meta.tree = s.tree_views(mode, bs, meta.num_q_rows);
  meta.captured = true;

  // Until the first replay: every request is padding (no keys).
  padding_layout(s.layout, mode, bs, s.cfg.spec);
  s.fill(s.layout, meta, /*graph=*/true, stream);
  return meta;
}

void DensePlanner::validate_replay(int bs, ForwardMode mode, const BatchSpec& batch) const {
  const Impl& s = *impl_;
  constexpr const char* who = "DensePlanner::replay";
  s.require_init(who);
  ATTNSERVE_CHECK(s.graphs.count({bs, int(mode)}), who, ": no graph captured for batch size ", bs, " and mode ",
                  to_string(mode), " (call capture first)");
  check_replay_batch(who, bs, mode, batch, s.cfg.spec);
  RequestLayout scratch;
  build_layout(batch, s.rules(who), scratch);
}

const DenseMetadata& DensePlanner::replay(int bs, ForwardMode mode, const BatchSpec& batch, Stream stream) {
  Impl& s = *impl_;
  constexpr const char* who = "DensePlanner::replay";
  s.require_init(who);
  auto it = s.graphs.find({bs, int(mode)});
  ATTNSERVE_CHECK(it != s.graphs.end(), who, ": no graph captured for batch size ", bs, " and mode ", to_string(mode),
                  " (call capture first)");
  check_replay_batch(who, bs, mode, batch, s.cfg.spec);
  build_layout(batch, s.rules(who), s.layout);  // throws before any state changes
  pad_layout(s.layout, bs, s.cfg.spec);
  s.fill(s.layout, it->second, /*graph=*/true, stream);
  return it->second;
}

}  // namespace attnserve
