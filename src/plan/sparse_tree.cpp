// SparsePlanner with draft trees (spec.topk > 1; plan.h SparseDraftTreeMetadata): every query row
// gets its own page-table row holding its causal set in position order (the prefix, then its path
// root .. itself), so the indexer's top-k and sparse MLA see exactly the row's ancestors. Target
// verify: page_table_1 rows are gathered through each row's path (req_to_token at seq + path[d]);
// the indexer's real_page_table keeps the request's order (seq + D keys, as linear verify), and
// topk_transform moves the path logits into place (run_tree_logits). Draft decode: each branch row is
// a chain draft-decode row (prefix + its own draft slots). Per-row arrays are computed on the host
// (at most 64 rows per request) and staged with the plan's other arrays.
#include <algorithm>
#include <bit>
#include <climits>

#include "plan/plan_device.h"
#include "plan/sparse_impl.h"

namespace attnserve {

using namespace plan_detail;

int SparsePlanner::Impl::tree_rows_per_request(ForwardMode m) const {
  return m == ForwardMode::target_verify ? cfg.spec.draft_token_num : cfg.spec.topk;
}

void SparsePlanner::Impl::check_tree(const BatchSpec& b, const char* who, const RequestLayout& L) const {
  const SpeculativeConfig& spec = cfg.spec;
  const bool verify = L.mode == ForwardMode::target_verify;
  const int P = cfg.page_size, K = spec.topk, S = spec.num_steps;
  const int extra = verify ? spec.draft_token_num : spec.step_id + 1;  // keys past the prefix a row may see
  int64_t total = 0;
  for (int r = 0; r < L.live_bs; ++r) {
    const int64_t seq = L.kv_len[std::size_t(r)];
    ATTNSERVE_CHECK(seq + extra <= cap.max_context_len, who, ": request ", r, " has ", seq + extra, " keys (",
                    to_string(L.mode), ", draft tree), more than capacity max_context_len ", cap.max_context_len);
    if (!verify) {  // the indexer reads a branch's draft keys through real pages: slots page aligned
      for (int br = 0; br < K; ++br)
        for (int s = 0; s <= spec.step_id; ++s) {
          const int64_t slot = b.draft_slots[(int64_t(r) * K + br) * S + s];
          ATTNSERVE_CHECK(slot % P == (seq + s) % P, who, ": draft_slots[", r, ", ", br, ", ", s, "] = ", slot,
                          " cannot hold position ", seq + s, " with page_size ", P,
                          " (slot % page_size must equal position % page_size)");
        }
    }
    for (int t = 0; t < L.q_len[std::size_t(r)]; ++t) {
      const int64_t row = int64_t(r) * L.q_len[std::size_t(r)] + t;
      total += std::min<int64_t>(L.tree_pos[std::size_t(row)] + 1, cfg.topk);
    }
  }
  ATTNSERVE_CHECK(total <= INT32_MAX, who, ": nsa_cu_seqlens_k would reach ", total, ", beyond int32");
}

void SparsePlanner::Impl::tree_views(SparseMetadata& meta, ForwardMode mode, int bs, int64_t rows, int64_t w1,
                                     int64_t wp) const {
  const bool verify = mode == ForwardMode::target_verify;
  const int D = cfg.spec.draft_token_num;
  meta.cache_seqlens_int32 = arena.view(o_cache, {bs});
  meta.cu_seqlens_k = arena.view(o_cu_k, {bs + 1});
  meta.cu_seqlens_q = arena.view(o_arange, {rows + 1});  // one page-table row per query row
  meta.max_seq_len_q = 1;
  meta.page_table_1 = table_view(page_table_1, rows, w1);
  meta.real_page_table = (cfg.page_size > 1 || verify) ? table_view(real_page_table, rows, wp) : meta.page_table_1;
  meta.nsa_seqlens_expanded = arena.view(o_tree_exp, {rows});
  meta.nsa_cache_seqlens_int32 = arena.view(o_tree_nsa, {rows});
  meta.nsa_cu_seqlens_k = arena.view(o_tree_cu, {rows + 1});
  meta.nsa_cu_seqlens_q = arena.view(o_arange, {rows + 1});
  meta.nsa_max_seqlen_q = 1;
  meta.tree.enabled = true;
  meta.tree.path_width = verify ? D : 0;
  meta.tree.path = verify ? arena.view(o_tree_path, {rows, D}) : TensorView{};
  meta.tree.topk_lengths = arena.view(o_tree_len, {rows});
  meta.tree.positions = arena.view(o_tree_pos, {rows});
}

void SparsePlanner::Impl::fill_tree(const RequestLayout& L, SparseMetadata& meta, bool graph, Stream stream) {
  const ForwardMode m = L.mode;
  const bool verify = m == ForwardMode::target_verify;
  const SpeculativeConfig& spec = cfg.spec;
  const int bs = L.bs, P = cfg.page_size, D = spec.draft_token_num, K = cfg.topk;
  const int per = tree_rows_per_request(m);
  const int64_t rows = int64_t(bs) * per;
  const int extra = verify ? D : spec.step_id + 1;

  arena.begin();
  int32_t* cache = arena.host(o_cache);
  int32_t* cu_k = arena.host(o_cu_k);
  int32_t* desc = arena.host(o_desc);  // verify: the request's row for the real page table (repeat D)
  int32_t* tdesc = arena.host(o_tree_desc);
  int32_t* path = verify ? arena.host(o_tree_path) : nullptr;
  int32_t* len = arena.host(o_tree_len);
  int32_t* exp = arena.host(o_tree_exp);
  int32_t* nsa = arena.host(o_tree_nsa);
  int32_t* cu = arena.host(o_tree_cu);
  int32_t* pos = arena.host(o_tree_pos);
  cu_k[0] = 0;
  cu[0] = 0;
  int max_len = 0, max_keys = 0;
  for (int r = 0; r < bs; ++r) {
    const bool live = r < L.live_bs;
    const int32_t seq = live ? L.kv_len[std::size_t(r)] : 0;
    const int32_t keys = live ? seq + extra : 0;  // the request's keys (verify: prefix + the whole tree)
    cache[r] = keys;
    cu_k[r + 1] = cu_k[r] + keys;
    max_keys = std::max(max_keys, keys);
    int32_t* d = desc + int64_t(r) * kGatherDescInts;
    d[0] = L.pool_row[std::size_t(r)], d[1] = 0, d[2] = keys, d[3] = INT32_MAX, d[4] = -1;
    for (int t = 0; t < per; ++t) {
      const int64_t o = int64_t(r) * per + t;
      const int32_t depth = live ? L.tree_pos[std::size_t(o)] - seq : -1;  // draft decode: step_id
      if (verify) {  // the ancestors, ordered by depth: the row's path
        int32_t* p = path + o * D;
        std::fill(p, p + D, -1);
        if (live)
          for (uint64_t bits = L.tree_mask[std::size_t(o)]; bits; bits &= bits - 1) {
            const int j = std::countr_zero(bits);
            p[L.tree_pos[std::size_t(int64_t(r) * per + j)] - seq] = j;
          }
      }
      const int32_t n = live ? seq + depth + 1 : 0;
      int32_t* td = tdesc + o * kGatherDescInts;
      td[0] = L.pool_row[std::size_t(r)], td[1] = 0, td[2] = n, td[3] = seq, td[4] = live ? int32_t(o) : -1;
      len[o] = n;
      exp[o] = verify ? keys : n;
      nsa[o] = std::min(n, K);
      cu[o + 1] = cu[o] + nsa[o];
      pos[o] = live ? L.tree_pos[std::size_t(o)] : 0;
      max_len = std::max(max_len, n);
    }
  }
  arena.mark(o_cache, bs);
  arena.mark(o_cu_k, bs + 1);
  arena.mark(o_desc, int64_t(bs) * kGatherDescInts);
  arena.mark(o_tree_desc, rows * kGatherDescInts);
  if (verify) arena.mark(o_tree_path, rows * D);
  arena.mark(o_tree_len, rows);
  arena.mark(o_tree_exp, rows);
  arena.mark(o_tree_nsa, rows);
  arena.mark(o_tree_cu, rows + 1);
  arena.mark(o_tree_pos, rows);
  if (!verify && L.live_bs > 0) {  // [live_bs * topk, num_steps]: row o's draft slots at row o
    std::copy(L.draft_slots.begin(), L.draft_slots.end(), arena.host(o_draft));
    arena.mark(o_draft, int64_t(L.live_bs) * spec.topk * spec.num_steps);
  }
  arena.upload(stream);

  // ---- Page tables: page_table_1 per query row (its causal set), the real table for the indexer.
  const int width_1 = max_len;
  const int width_p = int((int64_t(verify ? max_keys : max_len) + P - 1) / P);
  GatherPageTableArgs g;
  g.req_to_token = L.req_to_token.empty_view() ? nullptr : L.req_to_token.ptr<int32_t>();
  g.r2t_row_stride = L.req_to_token.empty_view() ? 0 : L.req_to_token.stride(0);
  g.descs = arena.device_ptr(o_tree_desc);
  g.num_descs = int(rows);
  g.repeat = 1;
  if (verify) {
    g.path = arena.device_ptr(o_tree_path);
    g.path_stride = D;
    g.num_draft = D;
  } else {
    g.draft_slots = arena.device_ptr(o_draft);
    g.draft_row_stride = spec.num_steps;
    g.num_draft = spec.step_id + 1;
  }
  g.out = static_cast<int32_t*>(page_table_1.data());
  g.out_row_stride = graph ? cap.max_context_len : width_1;
  g.width = width_1;
  g.page_size = 1;
  run_gather_page_table(g, device, stream);
  if (verify || P > 1) {
    GatherPageTableArgs gp = g;
    if (verify) {  // the request's keys in req_to_token's order, one copy per draft token
      gp = GatherPageTableArgs{};
      gp.req_to_token = g.req_to_token;
      gp.r2t_row_stride = g.r2t_row_stride;
      gp.descs = arena.device_ptr(o_desc);
      gp.num_descs = bs;
      gp.repeat = per;
    }
    gp.draft_owns_page = !verify;  // a branch's partial page is its own (a copy of the prefix's tail)
    gp.out = static_cast<int32_t*>(real_page_table.data());
    gp.out_row_stride = graph ? max_pages : width_p;
    gp.width = width_p;
    gp.page_size = P;
    run_gather_page_table(gp, device, stream);
  }

  std::vector<int32_t>& list = meta.nsa_extend_seq_lens_list;
  list.assign(std::size_t(rows), 1);
  if (graph) return;

  std::vector<int32_t> keep = std::move(list);
  meta = SparseMetadata{};
  meta.nsa_extend_seq_lens_list = std::move(keep);
  meta.mode = m;
  meta.batch_size = bs;
  meta.num_rows = int(rows);
  meta.page_size = P;
  meta.topk = K;
  meta.max_seq_len_k = max_keys;
  tree_views(meta, m, bs, rows, width_1, width_p);
}

}  // namespace attnserve
