// SparsePlanner: the DeepSeek NSA backend's metadata (nsa_backend.py init_forward_metadata), eager
// path. Row lengths are expanded per query row (kv_len - q_len + 1 + t) on the device from
// per-request values, so the host cost is O(batch size) for any number of rows.
#include <algorithm>
#include <climits>
#include <numeric>

#include "plan/plan_device.h"
#include "plan/sparse_impl.h"

namespace attnserve {

using namespace plan_detail;

SparsePlanner::Impl::Impl(const SparsePlanConfig& c, Device d) : cfg(c), device(d) {
  constexpr const char* who = "SparsePlanner";
  ATTNSERVE_CHECK(c.page_size >= 1, who, ": page_size = ", c.page_size, " must be >= 1");
  ATTNSERVE_CHECK(c.topk >= 1, who, ": topk = ", c.topk, " must be >= 1");
  check_spec_config(who, c.spec);
}

void SparsePlanner::Impl::require_init(const char* who) const {
  ATTNSERVE_CHECK(initialized, who, ": call init(capacity) first");
}

LayoutRules SparsePlanner::Impl::rules(const char* who) const {
  return LayoutRules{who, cfg.page_size, cfg.spec, cap, device};
}

void SparsePlanner::Impl::build(const BatchSpec& batch, const char* who, RequestLayout& L) const {
  build_layout(batch, rules(who), L);
  if (tree_mode(L.mode)) {
    check_tree(batch, who, L);
    if (L.mode == ForwardMode::draft_decode) L.draft_slots = batch.draft_slots;  // [bs * topk, num_steps]
    return;
  }
  int64_t total = 0;
  for (int r = 0; r < L.bs; ++r) total += clipped_ramp_sum(int64_t(L.kv_len[r]) - L.q_len[r] + 1, L.q_len[r], cfg.topk);
  ATTNSERVE_CHECK(total <= INT32_MAX, who, ": nsa_cu_seqlens_k would reach ", total, ", beyond int32");
}

SparsePlanner::SparsePlanner(const SparsePlanConfig& config, Device device)
    : impl_(std::make_unique<Impl>(config, device)) {}
SparsePlanner::~SparsePlanner() = default;
SparsePlanner::SparsePlanner(SparsePlanner&&) noexcept = default;
SparsePlanner& SparsePlanner::operator=(SparsePlanner&&) noexcept = default;

const SparsePlanConfig& SparsePlanner::config() const { return impl_->cfg; }
const PlanCapacity& SparsePlanner::capacity() const { return impl_->cap; }
Device SparsePlanner::device() const { return impl_->device; }
std::size_t SparsePlanner::device_bytes() const {
  const Impl& s = *impl_;
  return s.arena.device_bytes() + s.page_table_1.bytes() + s.real_page_table.bytes() + s.rows.bytes();
}

void SparsePlanner::init(const PlanCapacity& c, Stream stream) {
  Impl& s = *impl_;
  constexpr const char* who = "SparsePlanner::init";
  ATTNSERVE_CHECK(!s.initialized, who, ": already initialized (buffers are allocated once)");
  check_capacity(who, c);
  const int P = s.cfg.page_size, D = s.cfg.spec.draft_token_num;
  s.cap = c;
  s.max_rows = c.max_num_tokens;
  s.max_pages = int((int64_t(c.max_context_len) + P - 1) / P);
  const int K = std::max(1, s.cfg.spec.topk);  // draft trees: one row per branch in draft decode
  const bool trees = s.cfg.spec.topk > 1;
  s.table_rows = std::max<int64_t>(c.max_bs, D > 0 ? std::min<int64_t>(s.max_rows, int64_t(c.max_bs) * D) : 0);
  if (trees) s.table_rows = std::max<int64_t>(s.table_rows, std::min<int64_t>(s.max_rows, int64_t(c.max_bs) * K));
  s.o_cache = s.arena.reserve(c.max_bs);
  s.o_cu_k = s.arena.reserve(c.max_bs + 1);
  s.o_cu_q = s.arena.reserve(c.max_bs + 1);
  s.o_arange = s.arena.reserve(s.max_rows + 1);
  s.o_desc = s.arena.reserve(int64_t(c.max_bs) * kGatherDescInts);
  s.o_draft = s.arena.reserve(int64_t(c.max_bs) * K * s.cfg.spec.num_steps);
  s.o_expand = s.arena.reserve(int64_t(c.max_bs) * kExpandReqInts);
  if (trees) {
    s.o_tree_desc = s.arena.reserve(s.max_rows * kGatherDescInts);
    s.o_tree_path = s.arena.reserve(s.max_rows * std::max(1, D));
    s.o_tree_len = s.arena.reserve(s.max_rows);
    s.o_tree_exp = s.arena.reserve(s.max_rows);
    s.o_tree_nsa = s.arena.reserve(s.max_rows);
    s.o_tree_cu = s.arena.reserve(s.max_rows + 1);
    s.o_tree_pos = s.arena.reserve(s.max_rows);
  }
  s.arena.allocate(s.device, stream);
  s.page_table_1 = Buffer(std::size_t(s.table_rows) * c.max_context_len * sizeof(int32_t), s.device);
  memset_async(s.table_view(s.page_table_1, s.table_rows, c.max_context_len), 0, stream);
  if (P > 1 || (trees && D > 0)) {  // tree verify: page_table_1 lists paths, the real table the request's order
    s.real_page_table = Buffer(std::size_t(s.table_rows) * s.max_pages * sizeof(int32_t), s.device);
    memset_async(s.table_view(s.real_page_table, s.table_rows, s.max_pages), 0, stream);
  }
  s.rows = Buffer(std::size_t(3 * s.max_rows + 1) * sizeof(int32_t), s.device);
  memset_async(TensorView::contiguous(s.rows.data(), DType::i32, {3 * s.max_rows + 1}, s.device), 0, stream);
  // cu_seqlens_q of decode and verify, nsa_cu_seqlens_q: 0, 1, ..., T, written once.
  std::vector<int32_t> arange(std::size_t(s.max_rows) + 1);
  std::iota(arange.begin(), arange.end(), 0);
  s.arena.write_constant(s.o_arange, arange.data(), int64_t(arange.size()));
  s.arena.upload(stream);
  s.layout.q_len.reserve(std::size_t(c.max_bs));
  s.layout.kv_len.reserve(std::size_t(c.max_bs));
  s.layout.pool_row.reserve(std::size_t(c.max_bs));
  s.layout.draft_begin.reserve(std::size_t(c.max_bs));
  s.eager.nsa_extend_seq_lens_list.reserve(std::size_t(std::max<int64_t>(s.max_rows, c.max_bs)));
  s.initialized = true;
}

void SparsePlanner::validate(const BatchSpec& batch) const {
  impl_->require_init("SparsePlanner::validate");
  RequestLayout scratch;
  impl_->build(batch, "SparsePlanner::validate", scratch);
}

const SparseMetadata& SparsePlanner::plan(const BatchSpec& batch, Stream stream) {
  Impl& s = *impl_;
  s.require_init("SparsePlanner::plan");
  s.build(batch, "SparsePlanner::plan", s.layout);  // throws before any state changes
  if (s.tree_mode(s.layout.mode)) s.fill_tree(s.layout, s.eager, /*graph=*/false, stream);
  else s.fill(s.layout, s.eager, /*graph=*/false, 0, stream);
  return s.eager;
}

void SparsePlanner::Impl::fill(const RequestLayout& L, SparseMetadata& meta, bool graph, int64_t graph_rows,
                               Stream stream) {
  const int bs = L.bs, P = cfg.page_size, K = cfg.topk;
  const ForwardMode m = L.mode;
  const bool verify = m == ForwardMode::target_verify;
  const int repeat = verify ? cfg.spec.draft_token_num : 1;  // page-table rows per request
  const int64_t rows = L.q_rows;

  arena.begin();
  // ---- Per-request arrays on the host.
  int32_t* cache = arena.host(o_cache);
  int32_t* cu_k = arena.host(o_cu_k);
  int32_t* desc = arena.host(o_desc);
  int32_t* expand = arena.host(o_expand);
  cu_k[0] = 0;
  int64_t row_start = 0, nsa_total = 0;
  for (int r = 0; r < bs; ++r) {
    const int32_t q = L.q_len[r], kv = L.kv_len[r];
    cache[r] = kv;
    cu_k[r + 1] = cu_k[r] + kv;
    int32_t* d = desc + int64_t(r) * kGatherDescInts;
    const bool drafts = r < L.live_bs && L.num_draft > 0;
    d[0] = L.pool_row[r], d[1] = 0, d[2] = kv, d[3] = L.draft_begin[r], d[4] = drafts ? r : -1;
    int32_t* e = expand + int64_t(r) * kExpandReqInts;
    e[0] = int32_t(row_start), e[1] = q, e[2] = kv, e[3] = int32_t(nsa_total);
    row_start += q;
    nsa_total += clipped_ramp_sum(int64_t(kv) - q + 1, q, K);
  }
  arena.mark(o_cache, bs);
  arena.mark(o_cu_k, bs + 1);
  arena.mark(o_desc, int64_t(bs) * kGatherDescInts);
  arena.mark(o_expand, int64_t(bs) * kExpandReqInts);

  enum class CuQ { arange_bs, arange_rows, written, alias_k } cu_q_kind = CuQ::written;
  if (m == ForwardMode::decode || m == ForwardMode::draft_decode) cu_q_kind = CuQ::arange_bs;
  else if (verify) cu_q_kind = CuQ::arange_rows;
  else if (m == ForwardMode::extend && !L.any_prefix && !graph) cu_q_kind = CuQ::alias_k;
  if (cu_q_kind == CuQ::written) {
    int32_t* cu_q = arena.host(o_cu_q);
    cu_q[0] = 0;
    for (int r = 0; r < bs; ++r) cu_q[r + 1] = cu_q[r] + L.q_len[r];
    arena.mark(o_cu_q, bs + 1);
  }
  if (L.num_draft > 0 && L.live_bs > 0) {
    std::copy(L.draft_slots.begin(), L.draft_slots.end(), arena.host(o_draft));
    arena.mark(o_draft, int64_t(L.live_bs) * L.draft_row_stride);
  }
  arena.upload(stream);

  // ---- Device: page tables (token slots, then pages) and the per-row lengths.
  const int width_1 = L.max_kv;
  const int width_p = int((int64_t(L.max_kv) + P - 1) / P);
  GatherPageTableArgs g;
  g.req_to_token = L.req_to_token.empty_view() ? nullptr : L.req_to_token.ptr<int32_t>();
  g.r2t_row_stride = L.req_to_token.empty_view() ? 0 : L.req_to_token.stride(0);
  g.descs = arena.device_ptr(o_desc);
  g.num_descs = bs;
  g.repeat = repeat;
  g.draft_slots = arena.device_ptr(o_draft);
  g.draft_row_stride = L.draft_row_stride;
  g.num_draft = L.num_draft;
  g.out = static_cast<int32_t*>(page_table_1.data());
  g.out_row_stride = graph ? cap.max_context_len : width_1;
  g.width = width_1;
  g.page_size = 1;
  run_gather_page_table(g, device, stream);
  if (P > 1) {
    GatherPageTableArgs gp = g;
    gp.out = static_cast<int32_t*>(real_page_table.data());
    gp.out_row_stride = graph ? max_pages : width_p;
    gp.width = width_p;
    gp.page_size = P;
    run_gather_page_table(gp, device, stream);
  }
  ExpandRowsArgs ex;
  ex.reqs = arena.device_ptr(o_expand);
  ex.bs = bs;
  ex.topk = K;
  ex.live_rows = int(rows);
  ex.total_rows = int(graph ? graph_rows : rows);
  ex.nsa_total = int32_t(nsa_total);
  ex.expanded = rows_ptr(0);
  ex.nsa_seqlens = rows_ptr(1);
  ex.nsa_cu_seqlens_k = rows_ptr(2);
  run_expand_rows(ex, device, stream);

  // ---- Host list: query rows per page-table row.
  std::vector<int32_t>& list = meta.nsa_extend_seq_lens_list;
  list.clear();
  if (verify) list.assign(std::size_t(rows), 1);
  else if (m == ForwardMode::extend || m == ForwardMode::draft_extend) list.assign(L.q_len.begin(), L.q_len.end());
  else list.assign(std::size_t(bs), 1);
  if (graph) return;

  // ---- Eager metadata: compact views, live host values.
  std::vector<int32_t> keep = std::move(list);
  meta = SparseMetadata{};
  meta.nsa_extend_seq_lens_list = std::move(keep);
  const int64_t R = int64_t(bs) * repeat;
  meta.mode = m;
  meta.batch_size = bs;
  meta.num_rows = int(rows);
  meta.page_size = P;
  meta.topk = K;
  meta.cache_seqlens_int32 = arena.view(o_cache, {bs});
  meta.cu_seqlens_k = arena.view(o_cu_k, {bs + 1});
  meta.cu_seqlens_q = cu_q_kind == CuQ::arange_bs     ? arena.view(o_arange, {bs + 1})
                      : cu_q_kind == CuQ::arange_rows ? arena.view(o_arange, {rows + 1})
                      : cu_q_kind == CuQ::alias_k     ? meta.cu_seqlens_k
                                                      : arena.view(o_cu_q, {bs + 1});
  meta.max_seq_len_q = cu_q_kind == CuQ::alias_k ? L.max_kv : (cu_q_kind == CuQ::written ? L.max_q : 1);
  if (m == ForwardMode::idle) meta.max_seq_len_q = 1;  // the seed's decode/idle branch says 1 (SEED_NOTES 18)
  meta.max_seq_len_k = L.max_kv;
  meta.page_table_1 = table_view(page_table_1, R, width_1);
  meta.real_page_table = P > 1 ? table_view(real_page_table, R, width_p) : meta.page_table_1;
  meta.nsa_seqlens_expanded = rows_view(0, rows);
  meta.nsa_cache_seqlens_int32 = rows_view(1, rows);
  meta.nsa_cu_seqlens_k = rows_view(2, rows + 1);
  meta.nsa_cu_seqlens_q = arena.view(o_arange, {rows + 1});
  meta.nsa_max_seqlen_q = 1;
}

}  // namespace attnserve
