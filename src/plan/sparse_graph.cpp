// SparsePlanner's CUDA-graph state (nsa_backend.py init_cuda_graph_state / capture / replay), with
// one definition per mode shared with the eager path (SEED_NOTES 7-9): replay runs the eager fill
// into the captured views; rows past the live ones are rewritten with zero lengths.
#include <algorithm>

#include "plan/sparse_impl.h"

namespace attnserve {

using namespace plan_detail;

const SparseMetadata& SparsePlanner::capture(int bs, ForwardMode mode, Stream stream) {
  Impl& s = *impl_;
  constexpr const char* who = "SparsePlanner::capture";
  s.require_init(who);
  check_capture_shape(who, bs, mode, s.cfg.spec, s.cap);

  SparseMetadata& meta = s.graphs[{bs, int(mode)}];
  if (s.tree_mode(mode)) {  // draft trees: one page-table row per query row (sparse_tree.cpp)
    const int64_t rows = int64_t(bs) * s.tree_rows_per_request(mode);
    std::vector<int32_t> list = std::move(meta.nsa_extend_seq_lens_list);
    meta = SparseMetadata{};
    meta.nsa_extend_seq_lens_list = std::move(list);
    meta.nsa_extend_seq_lens_list.reserve(std::size_t(rows));
    meta.mode = mode;
    meta.batch_size = bs;
    meta.num_rows = int(rows);
    meta.page_size = s.cfg.page_size;
    meta.topk = s.cfg.topk;
    meta.max_seq_len_k = s.cap.max_context_len;
    s.tree_views(meta, mode, bs, rows, s.cap.max_context_len, s.max_pages);
    meta.captured = true;
    padding_layout(s.layout, mode, bs, s.cfg.spec);
    s.fill_tree(s.layout, meta, /*graph=*/true, stream);
    return meta;
  }
  const int D = s.cfg.spec.draft_token_num;
  const bool verify = mode == ForwardMode::target_verify;
  const int64_t table_rows = verify ? int64_t(bs) * D : bs;
  const int64_t rows = (verify || mode == ForwardMode::draft_extend) ? int64_t(bs) * D : bs;
  std::vector<int32_t> list = std::move(meta.nsa_extend_seq_lens_list);
  meta = SparseMetadata{};
  meta.nsa_extend_seq_lens_list = std::move(list);
  meta.nsa_extend_seq_lens_list.reserve(std::size_t(std::max<int64_t>(rows, bs)));
  meta.mode = mode;
  meta.batch_size = bs;
  meta.num_rows = int(rows);
  meta.page_size = s.cfg.page_size;
  meta.topk = s.cfg.topk;
  meta.cache_seqlens_int32 = s.arena.view(s.o_cache, {bs});
  meta.cu_seqlens_k = s.arena.view(s.o_cu_k, {bs + 1});
  meta.cu_seqlens_q =
      mode == ForwardMode::draft_extend ? s.arena.view(s.o_cu_q, {bs + 1}) : s.arena.view(s.o_arange, {table_rows + 1});
  meta.max_seq_len_q = mode == ForwardMode::draft_extend ? D : 1;
  meta.max_seq_len_k = s.cap.max_context_len;
  meta.page_table_1 = s.table_view(s.page_table_1, table_rows, s.cap.max_context_len);
  meta.real_page_table =
      s.cfg.page_size > 1 ? s.table_view(s.real_page_table, table_rows, s.max_pages) : meta.page_table_1;
  meta.nsa_seqlens_expanded = s.rows_view(0, rows);
  meta.nsa_cache_seqlens_int32 = s.rows_view(1, rows);
  meta.nsa_cu_seqlens_k = s.rows_view(2, rows + 1);
  meta.nsa_cu_seqlens_q = s.arena.view(s.o_arange, {rows + 1});
  meta.nsa_max_seqlen_q = 1;
  meta.captured = true;

  padding_layout(s.layout, mode, bs, s.cfg.spec);  // until the first replay: no keys anywhere
  s.fill(s.layout, meta, /*graph=*/true, rows, stream);
  return meta;
}

void SparsePlanner::validate_replay(int bs, ForwardMode mode, const BatchSpec& batch) const {
  const Impl& s = *impl_;
  constexpr const char* who = "SparsePlanner::replay";
  s.require_init(who);
  ATTNSERVE_CHECK(s.graphs.count({bs, int(mode)}), who, ": no graph captured for batch size ", bs, " and mode ",
                  to_string(mode), " (call capture first)");
  check_replay_batch(who, bs, mode, batch, s.cfg.spec);
  RequestLayout scratch;
  s.build(batch, who, scratch);
}

const SparseMetadata& SparsePlanner::replay(int bs, ForwardMode mode, const BatchSpec& batch, Stream stream) {
  Impl& s = *impl_;
  constexpr const char* who = "SparsePlanner::replay";
  s.require_init(who);
  auto it = s.graphs.find({bs, int(mode)});
  ATTNSERVE_CHECK(it != s.graphs.end(), who, ": no graph captured for batch size ", bs, " and mode ", to_string(mode),
                  " (call capture first)");
  check_replay_batch(who, bs, mode, batch, s.cfg.spec);
  s.build(batch, who, s.layout);  // throws before any state changes
  pad_layout(s.layout, bs, s.cfg.spec);
  if (s.tree_mode(mode)) s.fill_tree(s.layout, it->second, /*graph=*/true, stream);
  else s.fill(s.layout, it->second, /*graph=*/true, it->second.num_rows, stream);
  return it->second;
}

}  // namespace attnserve
