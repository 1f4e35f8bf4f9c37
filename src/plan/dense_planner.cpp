// DensePlanner: the FlashAttention backend's metadata (seed 001 init_forward_metadata), eager path.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "plan/dense_impl.h"
#include "plan/plan_device.h"

namespace attnserve {

using namespace plan_detail;

DensePlanner::Impl::Impl(const DensePlanConfig& c, Device d) : cfg(c), device(d) {
  constexpr const char* who = "DensePlanner";
  ATTNSERVE_CHECK(c.page_size >= 1, who, ": page_size = ", c.page_size, " must be >= 1");
  ATTNSERVE_CHECK(c.attention_chunk_size >= 0, who, ": attention_chunk_size = ", c.attention_chunk_size,
                  " is negative (0 turns local attention off)");
  ATTNSERVE_CHECK(c.attention_chunk_size % c.page_size == 0, who, ": attention_chunk_size = ", c.attention_chunk_size,
                  " is not a multiple of page_size = ", c.page_size);
  ATTNSERVE_CHECK(c.sliding_window_size >= -1, who, ": sliding_window_size = ", c.sliding_window_size,
                  " (use -1 for no window)");
  check_spec_config(who, c.spec);
  if (c.spec.topk > 1) {
    ATTNSERVE_CHECK(c.sliding_window_size < 0, who, ": draft trees (spec.topk = ", c.spec.topk,
                    ") do not support a sliding window yet (sliding_window_size = ", c.sliding_window_size, ")");
    ATTNSERVE_CHECK(c.attention_chunk_size == 0, who, ": draft trees (spec.topk = ", c.spec.topk,
                    ") do not support local (chunked) attention yet (attention_chunk_size = ", c.attention_chunk_size,
                    ")");
  }
}

void DensePlanner::Impl::require_init(const char* who) const {
  ATTNSERVE_CHECK(initialized, who, ": call init(capacity) first");
}

LayoutRules DensePlanner::Impl::rules(const char* who) const {
  return LayoutRules{who, cfg.page_size, cfg.spec, cap, device};
}

int64_t DensePlanner::Impl::graph_virtual_batches(int bs, ForwardMode mode) const {
  const int q =
      std::max(padding_q_len(mode, cfg.spec), mode == ForwardMode::draft_extend ? cfg.spec.draft_token_num : 0);
  return int64_t(bs) * max_virtual_batches_per_request(q, cfg.attention_chunk_size);
}

TensorView DensePlanner::Impl::page_table_view(int64_t rows, int64_t width) const {
  return TensorView::contiguous(page_table.data(), DType::i32, {rows, width}, device);
}
TensorView DensePlanner::Impl::local_table_view(int64_t rows, int64_t width) const {
  return TensorView::contiguous(local_table.data(), DType::i32, {rows, width}, device);
}

DraftTreeMetadata DensePlanner::Impl::tree_views(ForwardMode mode, int64_t bs, int64_t rows) const {
  DraftTreeMetadata t;
  if (!is_tree_mode(mode, cfg.spec)) return t;
  t.enabled = true;
  t.max_keys = tree_keys_of(mode, cfg.spec);
  t.key_slots = TensorView::contiguous(tree_slots.data(), DType::i32, {bs, t.max_keys}, device);
  t.num_keys = arena.view(o_tree_nk, {bs});
  t.mask = TensorView::contiguous(const_cast<int32_t*>(arena.device_ptr(o_tree_mask)), DType::i64, {rows}, device);
  t.positions = arena.view(o_tree_pos, {rows});
  return t;
}

// Host arrays of the tree part (staged; uploaded with the plan's other arrays) and the gather of the
// draft keys' slots: verify reads req_to_token at seq_lens .. seq_lens + n, draft decode the staged
// draft_slots (as a gather whose every position is a draft override).
void DensePlanner::Impl::fill_tree(const RequestLayout& L, Stream stream) {
  const int bs = L.bs;
  const int64_t rows = L.q_rows;
  std::copy(L.tree_num_keys.begin(), L.tree_num_keys.end(), arena.host(o_tree_nk));
  arena.mark(o_tree_nk, bs);
  if (rows > 0) std::memcpy(arena.host(o_tree_mask), L.tree_mask.data(), std::size_t(rows) * sizeof(uint64_t));
  arena.mark(o_tree_mask, 2 * rows);
  std::copy(L.tree_pos.begin(), L.tree_pos.end(), arena.host(o_tree_pos));
  arena.mark(o_tree_pos, rows);
  const bool verify = L.mode == ForwardMode::target_verify;
  if (!verify && !L.tree_key_slots.empty()) {
    std::copy(L.tree_key_slots.begin(), L.tree_key_slots.end(), arena.host(o_tree_host_slots));
    arena.mark(o_tree_host_slots, int64_t(L.tree_key_slots.size()));
  }
  int32_t* desc = arena.host(o_tree_desc);
  for (int r = 0; r < bs; ++r) {
    int32_t* d = desc + int64_t(r) * kGatherDescInts;
    const bool live = r < L.live_bs;
    d[0] = L.pool_row[r], d[2] = L.tree_num_keys[r];
    if (verify) d[1] = L.kv_len[r], d[3] = INT32_MAX, d[4] = -1;  // kv_len: the prefix
    else d[1] = 0, d[3] = 0, d[4] = live ? r : -1;
  }
  arena.mark(o_tree_desc, int64_t(bs) * kGatherDescInts);
  (void)stream;
}

DensePlanner::DensePlanner(const DensePlanConfig& config, Device device)
    : impl_(std::make_unique<Impl>(config, device)) {}
DensePlanner::~DensePlanner() = default;
DensePlanner::DensePlanner(DensePlanner&&) noexcept = default;
DensePlanner& DensePlanner::operator=(DensePlanner&&) noexcept = default;

const DensePlanConfig& DensePlanner::config() const { return impl_->cfg; }
const PlanCapacity& DensePlanner::capacity() const { return impl_->cap; }
Device DensePlanner::device() const { return impl_->device; }
std::size_t DensePlanner::device_bytes() const {
  return impl_->arena.device_bytes() + impl_->page_table.bytes() + impl_->local_table.bytes();
}

void DensePlanner::init(const PlanCapacity& c, Stream stream) {
  Impl& s = *impl_;
  constexpr const char* who = "DensePlanner::init";
  ATTNSERVE_CHECK(!s.initialized, who, ": already initialized (buffers are allocated once)");
  check_capacity(who, c);
  const int P = s.cfg.page_size;
  const int64_t max_pages = (int64_t(c.max_context_len) + P - 1) / P;
  s.cap = c;
  s.max_pages = int(max_pages);
  s.o_cache = s.arena.reserve(c.max_bs);
  s.o_cu_q = s.arena.reserve(c.max_bs + 1);
  s.o_cu_k = s.arena.reserve(c.max_bs + 1);
  s.o_arange = s.arena.reserve(c.max_bs + 1);
  s.o_desc = s.arena.reserve(int64_t(c.max_bs) * kGatherDescInts);
  s.o_draft = s.arena.reserve(int64_t(c.max_bs) * s.cfg.spec.num_steps);
  if (s.local_enabled()) {
    const int C = s.cfg.attention_chunk_size;
    s.chunk_pages = C / P;
    s.local_capacity = max_virtual_batches_eager(c.max_bs, c.max_num_tokens, C);
    for (ForwardMode m : {ForwardMode::target_verify, ForwardMode::draft_extend})
      if (s.cfg.spec.draft_token_num > 0)
        s.local_capacity = std::max(s.local_capacity, s.graph_virtual_batches(c.max_bs, m));
    s.o_local_q = s.arena.reserve(s.local_capacity + 1);
    s.o_local_k = s.arena.reserve(s.local_capacity);
    s.o_local_desc = s.arena.reserve(s.local_capacity * kGatherDescInts);
  }
  if (s.cfg.spec.topk > 1) {
    s.max_tree_keys = std::max(tree_keys_of(ForwardMode::target_verify, s.cfg.spec),
                               s.cfg.spec.num_steps > 0 ? tree_keys_of(ForwardMode::draft_decode, s.cfg.spec) : 0);
    s.o_tree_nk = s.arena.reserve(c.max_bs);
    s.o_tree_mask = s.arena.reserve(2 * int64_t(c.max_num_tokens));
    s.o_tree_pos = s.arena.reserve(c.max_num_tokens);
    s.o_tree_desc = s.arena.reserve(int64_t(c.max_bs) * kGatherDescInts);
    s.o_tree_host_slots = s.arena.reserve(int64_t(c.max_bs) * std::max(1, s.max_tree_keys));
  }
  s.arena.allocate(s.device, stream);
  s.page_table = Buffer(std::size_t(c.max_bs) * max_pages * sizeof(int32_t), s.device);
  memset_async(s.page_table_view(c.max_bs, max_pages), 0, stream);
  if (s.local_enabled()) {
    s.local_table = Buffer(std::size_t(s.local_capacity) * s.chunk_pages * sizeof(int32_t), s.device);
    memset_async(s.local_table_view(s.local_capacity, s.chunk_pages), 0, stream);
  }
  if (s.cfg.spec.topk > 1) {
    const int64_t keys = std::max(1, s.max_tree_keys);
    s.tree_slots = Buffer(std::size_t(c.max_bs) * keys * sizeof(int32_t), s.device);
    memset_async(TensorView::contiguous(s.tree_slots.data(), DType::i32, {c.max_bs, keys}, s.device), 0, stream);
    s.layout.tree_mask.reserve(std::size_t(c.max_num_tokens));
    s.layout.tree_pos.reserve(std::size_t(c.max_num_tokens));
    s.layout.tree_num_keys.reserve(std::size_t(c.max_bs));
    s.layout.tree_key_slots.reserve(std::size_t(c.max_bs) * std::size_t(keys));
  }
  // cu_seqlens_q of decode batches: 0, 1, ..., max_bs, written once.
  std::vector<int32_t> arange(std::size_t(c.max_bs) + 1);
  std::iota(arange.begin(), arange.end(), 0);
  s.arena.write_constant(s.o_arange, arange.data(), int64_t(arange.size()));
  s.arena.upload(stream);
  s.layout.q_len.reserve(std::size_t(c.max_bs));
  s.layout.kv_len.reserve(std::size_t(c.max_bs));
  s.layout.pool_row.reserve(std::size_t(c.max_bs));
  s.layout.draft_begin.reserve(std::size_t(c.max_bs));
  s.vbs.reserve(std::size_t(s.local_capacity));
  s.initialized = true;
}

void DensePlanner::validate(const BatchSpec& batch) const {
  impl_->require_init("DensePlanner::validate");
  RequestLayout scratch;
  build_layout(batch, impl_->rules("DensePlanner::validate"), scratch);
}

const DenseMetadata& DensePlanner::plan(const BatchSpec& batch, Stream stream) {
  Impl& s = *impl_;
  s.require_init("DensePlanner::plan");
  build_layout(batch, s.rules("DensePlanner::plan"), s.layout);  // throws before any state changes
  s.fill(s.layout, s.eager, /*graph=*/false, stream);
  return s.eager;
}

void DensePlanner::Impl::fill(const RequestLayout& L, DenseMetadata& meta, bool graph, Stream stream) {
  const int bs = L.bs, P = cfg.page_size;
  const ForwardMode m = L.mode;
  arena.begin();
  // ---- Per-request arrays on the host.
  int32_t* cache = arena.host(o_cache);
  int32_t* cu_k = arena.host(o_cu_k);
  int32_t* desc = arena.host(o_desc);
  cu_k[0] = 0;
  for (int r = 0; r < bs; ++r) {
    cache[r] = L.kv_len[r];
    cu_k[r + 1] = cu_k[r] + L.kv_len[r];
    int32_t* d = desc + int64_t(r) * kGatherDescInts;
    const bool drafts = r < L.live_bs && L.num_draft > 0;
    d[0] = L.pool_row[r], d[1] = 0, d[2] = L.kv_len[r], d[3] = L.draft_begin[r], d[4] = drafts ? r : -1;
  }
  arena.mark(o_cache, bs);
  arena.mark(o_cu_k, bs + 1);
  arena.mark(o_desc, int64_t(bs) * kGatherDescInts);

  // cu_seqlens_q: arange (decode), stride draft_token_num (verify), cu_seqlens_k (extend without a
  // prefix), else the prefix sums of the query rows.
  enum class CuQ { arange, written, alias_k } cu_q_kind = CuQ::written;
  if ((m == ForwardMode::decode || m == ForwardMode::draft_decode) && !L.tree) cu_q_kind = CuQ::arange;
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

  // ---- Local attention: virtual batches (host), their block-table rows (device).
  const bool local = local_enabled() && m != ForwardMode::idle;
  int chunk = 0;
  int64_t num_vb = 0;
  if (local) {
    chunk = graph ? cfg.attention_chunk_size : effective_chunk_size(cfg.attention_chunk_size, L.max_kv, P);
    split_virtual_batches(L.q_len, L.kv_len, chunk, vbs);
    num_vb = graph ? graph_virtual_batches(bs, m) : int64_t(vbs.size());
    ATTNSERVE_CHECK(int64_t(vbs.size()) <= num_vb && num_vb <= local_capacity,
                    "DensePlanner: internal: virtual batches exceed their bound");
    int32_t* lq = arena.host(o_local_q);
    int32_t* lk = arena.host(o_local_k);
    int32_t* ld = arena.host(o_local_desc);
    lq[0] = 0;
    for (int64_t v = 0; v < num_vb; ++v) {
      const bool pad = v >= int64_t(vbs.size());
      const VirtualBatch vb = pad ? VirtualBatch{0, 0, 0, 0} : vbs[std::size_t(v)];
      lq[v + 1] = lq[v] + vb.q_len;
      lk[v] = vb.k_len;
      int32_t* d = ld + v * kGatherDescInts;
      const bool drafts = !pad && vb.request < L.live_bs && L.num_draft > 0;
      d[0] = pad ? 0 : L.pool_row[std::size_t(vb.request)];
      d[1] = vb.k_start, d[2] = vb.k_len;
      d[3] = pad ? INT32_MAX : L.draft_begin[std::size_t(vb.request)];
      d[4] = drafts ? vb.request : -1;
    }
    arena.mark(o_local_q, num_vb + 1);
    arena.mark(o_local_k, num_vb);
    arena.mark(o_local_desc, num_vb * kGatherDescInts);
  }
  if (L.tree) fill_tree(L, stream);
  arena.upload(stream);

  // ---- Device: page tables.
  const int width = int((int64_t(L.max_kv) + P - 1) / P);
  GatherPageTableArgs g;
  g.req_to_token = L.req_to_token.empty_view() ? nullptr : L.req_to_token.ptr<int32_t>();
  g.r2t_row_stride = L.req_to_token.empty_view() ? 0 : L.req_to_token.stride(0);
  g.draft_slots = arena.device_ptr(o_draft);
  g.draft_row_stride = L.draft_row_stride;
  g.num_draft = L.num_draft;
  g.page_size = P;
  g.descs = arena.device_ptr(o_desc);
  g.num_descs = bs;
  g.out = static_cast<int32_t*>(page_table.data());
  g.out_row_stride = graph ? max_pages : width;
  g.width = width;
  run_gather_page_table(g, device, stream);

  int local_width = 0, local_max_q = 0, local_max_k = 0;
  if (local) {
    for (const VirtualBatch& vb : vbs) {
      local_max_q = std::max(local_max_q, int(vb.q_len));
      local_max_k = std::max(local_max_k, int(vb.k_len));
    }
    local_width = graph ? (local_max_k + P - 1) / P : chunk / P;
    GatherPageTableArgs lg = g;
    lg.descs = arena.device_ptr(o_local_desc);
    lg.num_descs = int(num_vb);
    lg.out = static_cast<int32_t*>(local_table.data());
    lg.out_row_stride = graph ? chunk_pages : chunk / P;
    lg.width = local_width;
    run_gather_page_table(lg, device, stream);
  }
  if (L.tree) {  // the draft keys' slots (page size 1)
    GatherPageTableArgs tg = g;
    tg.descs = arena.device_ptr(o_tree_desc);
    tg.num_descs = bs;
    tg.draft_slots = arena.device_ptr(o_tree_host_slots);
    tg.draft_row_stride = L.tree_keys;
    tg.num_draft = m == ForwardMode::target_verify ? 0 : L.tree_keys;
    tg.page_size = 1;
    tg.out = static_cast<int32_t*>(tree_slots.data());
    tg.out_row_stride = L.tree_keys;
    tg.width = L.tree_keys;
    run_gather_page_table(tg, device, stream);
  }
  if (graph) return;

  // ---- Eager metadata: compact views, live host values.
  meta = DenseMetadata{};
  meta.mode = m;
  meta.batch_size = bs;
  meta.num_q_rows = int(L.q_rows);
  meta.page_size = P;
  meta.cache_seqlens_int32 = arena.view(o_cache, {bs});
  meta.cu_seqlens_k = arena.view(o_cu_k, {bs + 1});
  meta.cu_seqlens_q = cu_q_kind == CuQ::arange    ? arena.view(o_arange, {bs + 1})
                      : cu_q_kind == CuQ::alias_k ? meta.cu_seqlens_k
                                                  : arena.view(o_cu_q, {bs + 1});
  meta.max_seq_len_q = cu_q_kind == CuQ::alias_k ? L.max_kv : L.max_q;
  meta.max_seq_len_k = L.max_kv;
  meta.page_table = page_table_view(bs, width);
  if (cfg.sliding_window_size >= 0) meta.window_left = cfg.sliding_window_size, meta.window_right = 0;
  if (local) {
    LocalAttentionMetadata& la = meta.local_attn_metadata;
    meta.has_local_attn = true;
    la.local_query_start_loc = arena.view(o_local_q, {num_vb + 1});
    la.local_seqused_k = arena.view(o_local_k, {num_vb});
    la.local_block_table = local_table_view(num_vb, chunk / P);
    la.local_max_query_len = local_max_q;
    la.local_max_seq_len = local_max_k;
    la.num_virtual_batches = int(num_vb);
    la.effective_chunk_size = chunk;
  }
  meta.tree = tree_views(m, bs, L.q_rows);
}

}  // namespace attnserve
