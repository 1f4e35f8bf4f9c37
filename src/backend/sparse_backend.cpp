// SparseBackend (the seeds' NativeSparseAttnBackend): the sparse planner's metadata, the indexer's
// top-k made slots, and attention over each row's top-k slots through one of three kernel paths.
#include "attnserve/backend/sparse.h"

#include <map>

#include "attnserve/ops.h"
#include "backend/common.h"
#include "backend/config_check.h"
#include "backend/op_plans.h"
#include "ops/planned_ops.h"
#include "plan/plan_device.h"

namespace attnserve {

using namespace backend_detail;

namespace {

constexpr int64_t kLatent = 512, kRope = 64, kRow = 576;

// Modes whose page_table_1 has one row per query row (decode, draft decode, target verify).
bool one_table_row_per_query_row(ForwardMode m) {
  return m == ForwardMode::decode || m == ForwardMode::draft_decode || m == ForwardMode::target_verify;
}

// q_nope [rows, h, 512] and q_rope [rows, h, 64] that are the two halves of one packed [rows, h, 576]
// tensor, as that tensor; an empty view when they are not.
TensorView packed_from_halves(const TensorView& nope, const TensorView& rope) {
  const bool adjacent = nope.dtype == rope.dtype && nope.device == rope.device && nope.strides[0] == rope.strides[0] &&
                        nope.strides[1] == rope.strides[1] && nope.strides[2] == 1 && rope.strides[2] == 1 &&
                        nope.strides[1] >= kRow &&
                        static_cast<const char*>(nope.data) + kLatent * int64_t(dtype_size(nope.dtype)) == rope.data;
  if (!adjacent) return {};
  TensorView v = nope;
  v.shape[2] = kRow;
  return v;
}

}  // namespace

struct SparseBackend::Impl {
  SparseBackendConfig cfg;
  NsaImpls impls;
  std::shared_ptr<SharedWorkspace> ws;
  SparsePlanner planner;
  Buffer topk_buf;     // [max_num_tokens, index_topk] i32: topk_transform's output
  Buffer scratch_buf;  // same size: slots from positions (fuse_topk = false), or positions before the
                       //   graph-safe transform (captured draft_extend)
  const SparseMetadata* meta = nullptr;
  BatchPlans* plans = nullptr;  // the op plans of `meta`'s batch: eager_plans or a captured graph's
  BatchPlans eager_plans;
  std::map<std::pair<int, ForwardMode>, BatchPlans> graph_plans;  // (bs, mode) -> made at capture
  int graph_max_bs = 0;

  Impl(const SparseBackendConfig& c, std::shared_ptr<SharedWorkspace> w, Stream stream)
      : cfg(c), impls(checked_sparse_config(c, w->caps())), ws(std::move(w)), planner(plan_config(cfg), cfg.device) {
    planner.init(cfg.capacity, stream);
    const std::size_t idx_bytes = std::size_t(cfg.capacity.max_num_tokens) * cfg.index_topk * sizeof(int32_t);
    topk_buf = Buffer(idx_bytes, cfg.device);
    if (!cfg.fuse_topk || cfg.spec.draft_token_num > 0) scratch_buf = Buffer(idx_bytes, cfg.device);
    ws->reserve(sparse_workspace_for_capacity(cfg, ws->caps(), impls, cfg.capacity.max_bs));
  }
  // The batch's metadata and plans become current; the workspace grows to what they need.
  void use(const SparseMetadata& m, BatchPlans& p) {
    ws->reserve(p.workspace_bytes());
    meta = &m;
    plans = &p;
  }

  BatchSpec with_table(const BatchSpec& b) const {
    BatchSpec s = b;
    if (s.req_to_token.empty_view()) s.req_to_token = cfg.req_to_token;
    return s;
  }
  const SparseMetadata& metadata(const char* who) const {
    ATTNSERVE_CHECK(meta, who,
                    ": no forward metadata: call init_forward_metadata (or the graph capture / replay) first");
    return *meta;
  }
  TensorView indices(const Buffer& b, int64_t rows) const {
    return TensorView::contiguous(b.data(), DType::i32, {rows, cfg.index_topk}, cfg.device);
  }
  int num_layers() const { return int(cfg.kv_buffers.size()); }

  TensorView topk_transform(const TensorView& logits, int topk, const TensorView& row_starts, Stream stream);
  void move_tree_logits(const char* who, const SparseMetadata& m, const TensorView& logits,
                        const TensorView& row_starts, Stream stream);
  TensorView run(const ForwardArgs& a, const LayerSpec& layer, bool decode_call, Stream stream);
};

// Draft-tree verify: each row's logits at its path's columns (seq + path[d], the draft tokens in
// req_to_token's order, as the indexer scored them) move to columns seq + d, where page_table_1 holds
// the path's slots; in place, before the top-k (plan.h SparseDraftTreeMetadata).
void SparseBackend::Impl::move_tree_logits(const char* who, const SparseMetadata& m, const TensorView& logits,
                                           const TensorView& row_starts, Stream stream) {
  ATTNSERVE_CHECK(logits.size(1) <= 1 || logits.stride(1) == 1, who,
                  ": argument 'logits' must have contiguous rows (stride ", logits.stride(1),
                  ") with draft trees: topk_transform moves each row's path logits in place");
  check_output(who, "logits", logits);
  if (!m.captured && row_starts.empty_view())
    ATTNSERVE_CHECK(logits.size(1) >= m.max_seq_len_k, who, ": argument 'logits' has ", logits.size(1),
                    " columns, the draft-tree rows score ", m.max_seq_len_k, " keys (prefix + every draft token)");
  if (!row_starts.empty_view()) check_tensor(who, "row_starts", row_starts, {DType::i32}, {m.num_rows});
  plan_detail::run_tree_logits({.logits = static_cast<float*>(logits.data),
                                .logits_stride = logits.stride(0),
                                .row_starts = row_starts.empty_view() ? nullptr : row_starts.ptr<int32_t>(),
                                .path = m.tree.path.ptr<int32_t>(),
                                .path_width = m.tree.path_width,
                                .topk_lengths = m.tree.topk_lengths.ptr<int32_t>(),
                                .rows = m.num_rows},
                               cfg.device, stream);
}

TensorView SparseBackend::Impl::topk_transform(const TensorView& logits, int topk, const TensorView& row_starts,
                                               Stream stream) {
  constexpr const char* who = "SparseBackend::topk_transform";
  const SparseMetadata& m = metadata(who);
  ATTNSERVE_CHECK(topk == cfg.index_topk, who, ": topk ", topk, " differs from config.index_topk ", cfg.index_topk,
                  " (the backend's index buffers and the attention read index_topk columns)");
  const int64_t rows = m.num_rows;
  check_tensor(who, "logits", logits, {DType::f32}, {rows, -1});
  const TensorView out = indices(topk_buf, rows);
  if (m.tree.path_width > 0) move_tree_logits(who, m, logits, row_starts, stream);
  // Draft trees: the top-k chooses among each row's causal set (its prefix and path), not the
  // indexer's whole row.
  const TensorView lengths = m.tree.enabled ? m.tree.topk_lengths : m.nsa_seqlens_expanded;
  TopkArgs a{.scores = logits, .lengths = lengths, .out = out, .topk = topk, .row_starts = row_starts};
  // The fused transforms: per-row tables (decode-like modes) or rows mapped to requests through
  // cu_seqlens_q. A captured draft_extend has rows past the accepted tokens, which the fused prefill
  // transform does not take: top-k positions first, then the graph-safe index transform.
  const bool captured_draft_extend = m.captured && m.mode == ForwardMode::draft_extend;
  if (cfg.fuse_topk && one_table_row_per_query_row(m.mode)) {
    a.transform = TopkTransform::decode;
    a.page_table_1 = m.page_table_1;
  } else if (cfg.fuse_topk && !captured_draft_extend) {
    a.transform = TopkTransform::prefill;
    a.page_table_1 = m.page_table_1;
    a.cu_seqlens_q = m.cu_seqlens_q;
  } else if (cfg.fuse_topk) {
    a.out = indices(scratch_buf, rows);
  }
  attnserve::topk(a, ws->view(), stream);
  if (cfg.fuse_topk && captured_draft_extend) {
    transform_index_page_table(
        {.page_table_1 = m.page_table_1, .topk_indices = a.out, .out = out, .cu_seqlens_q = m.cu_seqlens_q}, stream);
  }
  return out;
}

TensorView SparseBackend::Impl::run(const ForwardArgs& a, const LayerSpec& layer, bool decode_call, Stream stream) {
  const char* who = decode_call ? "SparseBackend::forward_decode" : "SparseBackend::forward_extend";
  const SparseMetadata& m = metadata(who);
  check_call_mode(who, m.mode, decode_call);
  check_layer_id(who, layer, num_layers());
  const KvLayerBuffers& kv = cfg.kv_buffers[std::size_t(layer.layer_id)];
  const NsaImpl impl = decode_call ? impls.decode : impls.prefill;
  const ResolvedLayer L = resolve_layer(who, layer, cfg.softmax_scale, cfg.softcap, -1);
  ATTNSERVE_CHECK(L.window_left < 0, who, ": layer ", layer.layer_id, " has a sliding window; the sparse backend ",
                  "has none (unset LayerSpec::sliding_window_size)");
  ATTNSERVE_CHECK(L.softcap == 0.f || impl == NsaImpl::gather, who, ": layer ", layer.layer_id, " has logit_cap ",
                  L.softcap, ", which only the gather path supports (this call uses ", to_string(impl), ")");
  const int64_t rows = m.num_rows, h = cfg.num_q_heads;

  // ---- q: split (q_nope, q_rope) or packed; the sparse_mla paths read it packed.
  TensorView q_nope, q_rope, packed;
  if (!a.q_rope.empty_view()) {
    q_nope = as_heads(a.q, h, kLatent, who, "q");
    q_rope = as_heads(a.q_rope, h, kRope, who, "q_rope");
    packed = packed_from_halves(q_nope, q_rope);
    ATTNSERVE_CHECK(impl == NsaImpl::gather || !packed.empty_view(), who, ": the ", to_string(impl),
                    " path reads q packed as [rows, h, 576]: pass q packed (q_rope absent), or q / q_rope as the two "
                    "halves of one packed tensor, or use the gather path");
  } else {
    packed = as_heads(a.q, h, kRow, who, "q");
    q_nope = packed.slice(2, 0, kLatent);
    q_rope = packed.slice(2, kLatent, kRow);
  }
  ATTNSERVE_CHECK(q_nope.shape[0] == rows, who, ": argument 'q' has ", q_nope.shape[0], " rows, the batch has ", rows,
                  " query rows (", to_string(m.mode), m.captured ? ", captured" : "", ")");
  const TensorView out = as_heads(a.out, h, kLatent, who, "out");
  ATTNSERVE_CHECK(out.shape[0] == rows, who, ": argument 'out' has ", out.shape[0], " rows, expected ", rows);

  // ---- Store the new tokens' latent (kv_c | k_rope) at their slots.
  if (a.save_kv_cache && !a.k.empty_view()) {
    ATTNSERVE_CHECK(!a.out_cache_loc.empty_view(), who, ": argument 'out_cache_loc' is required to store 'k' (the ",
                    "slots of the new tokens); pass save_kv_cache = false to skip the store");
    ATTNSERVE_CHECK(!a.k_rope.empty_view(), who,
                    ": argument 'k_rope' is required with 'k' (MLA stores [kv_c | k_rope])");
    const TensorView kv_c = as_rows(a.k, kLatent, who, "k");
    ATTNSERVE_CHECK(kv_c.shape[0] == rows, who, ": argument 'k' has ", kv_c.shape[0], " rows, the batch has ", rows,
                    " query rows");
    set_mla_kv_buffer(
        {.kv_c = kv_c, .k_rope = as_rows(a.k_rope, kRope, who, "k_rope"), .cache = kv.k, .loc = a.out_cache_loc},
        stream);
  }
  if (rows == 0) return out;

  // ---- The rows' top-k slots (transformed here when the engine's top-k gave positions).
  ATTNSERVE_CHECK(!a.topk_indices.empty_view(), who, ": argument 'topk_indices' is required: each row's top-k ",
                  cfg.fuse_topk ? "slots" : "positions", " [rows, index_topk] (topk_transform)");
  check_tensor(who, "topk_indices", a.topk_indices, {DType::i32}, {rows, cfg.index_topk});
  TensorView slots = a.topk_indices;
  if (!cfg.fuse_topk) {
    slots = indices(scratch_buf, rows);
    transform_index_page_table({.page_table_1 = m.page_table_1,
                                .topk_indices = a.topk_indices,
                                .out = slots,
                                .cu_seqlens_q = one_table_row_per_query_row(m.mode) ? TensorView{} : m.cu_seqlens_q},
                               stream);
  }

  if (impl == NsaImpl::gather) {
    // Each row is its own request of one query over nsa_cache_seqlens keys; page size 1, so the
    // page table is the slot list itself (valid slots first).
    const MlaAttentionArgs args{.q_nope = q_nope,
                                .q_rope = q_rope,
                                .kv_cache = unsqueeze(as_pages(kv.k, 1), 2),
                                .page_table = slots,
                                .cache_seqlens = m.nsa_cache_seqlens_int32,
                                .cu_seqlens_q = m.nsa_cu_seqlens_q,
                                .out = out,
                                .max_seqlen_q = 1,
                                .softmax_scale = L.scale,
                                .causal = true,
                                .softcap = L.softcap,
                                .deterministic = cfg.deterministic};
    if (cfg.device.is_cpu()) mla_attention(args, ws->view(), stream);
    else mla_attention(args, plans->get(cuda::mla::problem_of(args), ws->caps()), ws->view(), stream);
  } else {
    const SparseMlaArgs args{.q = packed,
                             .kv = kv.k,
                             .indices = slots,
                             .out = out,
                             .topk_length = m.nsa_cache_seqlens_int32,
                             .softmax_scale = L.scale,
                             .deterministic = cfg.deterministic};
    if (cfg.device.is_cpu()) sparse_mla(args, ws->view(), stream);
    else sparse_mla(args, plans->get(cuda::sparse_mla_op::problem_of(args), ws->caps()), ws->view(), stream);
  }
  return out;
}

// ---- Public ------------------------------------------------------------------------------------------

SparseBackend::SparseBackend(const SparseBackendConfig& config, Stream stream)
    : SparseBackend(config, make_workspace("SparseBackend", config.device), stream) {}
SparseBackend::SparseBackend(const SparseBackendConfig& config, std::shared_ptr<SharedWorkspace> ws, Stream stream)
    : impl_(std::make_unique<Impl>(config, std::move(ws), stream)) {}
SparseBackend::~SparseBackend() = default;
SparseBackend::SparseBackend(SparseBackend&&) noexcept = default;
SparseBackend& SparseBackend::operator=(SparseBackend&&) noexcept = default;

void SparseBackend::validate(const BatchSpec& batch) const { impl_->planner.validate(impl_->with_table(batch)); }

void SparseBackend::init_forward_metadata(const BatchSpec& batch, Stream stream) {
  Impl& s = *impl_;
  const SparseMetadata& m = s.planner.plan(s.with_table(batch), stream);
  s.eager_plans = plan_sparse_batch(s.cfg, s.ws->caps(), s.impls, m);
  s.use(m, s.eager_plans);
}

void SparseBackend::init_cuda_graph_state(int max_bs, int max_num_tokens, Stream) {
  Impl& s = *impl_;
  check_graph_capacity("SparseBackend::init_cuda_graph_state", max_bs, max_num_tokens, s.cfg.capacity);
  s.ws->reserve(sparse_workspace_for_capacity(s.cfg, s.ws->caps(), s.impls, max_bs));
  s.graph_max_bs = max_bs;
}

void SparseBackend::init_forward_metadata_capture_cuda_graph(int bs, int num_tokens, ForwardMode mode, Stream stream) {
  Impl& s = *impl_;
  constexpr const char* who = "SparseBackend::init_forward_metadata_capture_cuda_graph";
  ATTNSERVE_CHECK(s.graph_max_bs > 0, who, ": call init_cuda_graph_state(max_bs, max_num_tokens) first");
  ATTNSERVE_CHECK(bs >= 1 && bs <= s.graph_max_bs, who, ": bs ", bs, " must be in [1, ", s.graph_max_bs,
                  "] (init_cuda_graph_state's max_bs)");
  const int64_t rows = int64_t(bs) * graph_rows_per_request(mode, s.cfg.spec);
  ATTNSERVE_CHECK(num_tokens == rows, who, ": num_tokens ", num_tokens, ", but a ", to_string(mode),
                  " graph of batch size ", bs, " has ", rows, " query rows");
  const SparseMetadata& m = s.planner.capture(bs, mode, stream);
  BatchPlans& p = s.graph_plans[{bs, mode}] = plan_sparse_batch(s.cfg, s.ws->caps(), s.impls, m);
  s.use(m, p);
}

void SparseBackend::validate_replay(int bs, const BatchSpec& batch) const {
  impl_->planner.validate_replay(bs, batch.mode, impl_->with_table(batch));
}

void SparseBackend::init_forward_metadata_replay_cuda_graph(int bs, const BatchSpec& batch, Stream stream) {
  Impl& s = *impl_;
  s.meta = &s.planner.replay(bs, batch.mode, s.with_table(batch), stream);
  s.plans = &s.graph_plans[{bs, batch.mode}];  // the plans captured with the graph: same shapes, no growth
}

TensorView SparseBackend::get_seqlens_int32() const {
  return impl_->metadata("SparseBackend::get_seqlens_int32").cache_seqlens_int32;
}
TensorView SparseBackend::get_page_table_64() const {
  return impl_->metadata("SparseBackend::get_page_table_64").real_page_table;
}
TensorView SparseBackend::get_seqlens_expanded() const {
  return impl_->metadata("SparseBackend::get_seqlens_expanded").nsa_seqlens_expanded;
}
TensorView SparseBackend::topk_transform(const TensorView& logits, int topk, Stream stream,
                                         const TensorView& row_starts) {
  return impl_->topk_transform(logits, topk, row_starts, stream);
}

TensorView SparseBackend::forward_extend(const ForwardArgs& args, const LayerSpec& layer, Stream stream) {
  return impl_->run(args, layer, false, stream);
}
TensorView SparseBackend::forward_decode(const ForwardArgs& args, const LayerSpec& layer, Stream stream) {
  return impl_->run(args, layer, true, stream);
}
TensorView SparseBackend::forward(const ForwardArgs& args, const LayerSpec& layer, Stream stream) {
  const SparseMetadata& m = impl_->metadata("SparseBackend::forward");
  return impl_->run(args, layer, is_decode_call_mode(m.mode), stream);
}

NsaImpl SparseBackend::resolved_prefill_impl() const { return impl_->impls.prefill; }
NsaImpl SparseBackend::resolved_decode_impl() const { return impl_->impls.decode; }
bool SparseBackend::has_forward_metadata() const { return impl_->meta != nullptr; }
const SparseMetadata& SparseBackend::forward_metadata() const {
  return impl_->metadata("SparseBackend::forward_metadata");
}
const SparseBackendConfig& SparseBackend::config() const { return impl_->cfg; }
int SparseBackend::num_layers() const { return impl_->num_layers(); }
std::size_t SparseBackend::workspace_bytes() const { return impl_->ws->bytes(); }
std::size_t SparseBackend::workspace_for_capacity(const SparseBackendConfig& config, const DeviceCaps& caps) {
  return sparse_workspace_for_capacity(config, caps, checked_sparse_config(config, caps), config.capacity.max_bs);
}
std::size_t SparseBackend::device_bytes() const {
  const Impl& s = *impl_;
  return s.planner.device_bytes() + s.topk_buf.bytes() + s.scratch_buf.bytes() + s.ws->total_bytes();
}

}  // namespace attnserve
