// DenseBackend (seed 001 FlashAttentionBackend): the planner's metadata + paged attention / MLA.
#include "attnserve/backend/dense.h"

#include <map>

#include "attnserve/ops.h"
#include "backend/common.h"
#include "backend/config_check.h"
#include "backend/op_plans.h"
#include "ops/planned_ops.h"

namespace attnserve {

using namespace backend_detail;

struct DenseBackend::Impl {
  DenseBackendConfig cfg;
  std::shared_ptr<SharedWorkspace> ws;
  DensePlanner planner;
  ScaleTable scales;
  const DenseMetadata* meta = nullptr;
  BatchPlans* plans = nullptr;  // the op plans of `meta`'s batch: eager_plans or a captured graph's
  BatchPlans eager_plans;
  std::map<std::pair<int, ForwardMode>, BatchPlans> graph_plans;  // (bs, mode) -> made at capture
  int graph_max_bs = 0;                                           // 0 until init_cuda_graph_state
  // Draft trees (spec.topk > 1): the prefix part's LSE [max_num_tokens, h_q] f32 (its output goes to
  // `out`, which tree_attention then merges with the tree part in place).
  Buffer tree_lses;

  Impl(const DenseBackendConfig& c, std::shared_ptr<SharedWorkspace> w, Stream stream)
      : cfg(checked_dense_config(c, w->caps())),
        ws(std::move(w)),
        planner(plan_config(cfg), cfg.device),
        scales(cfg.kv_dtype == DType::fp8_e4m3 ? ScaleTable(cfg.kv_buffers, cfg.device, stream) : ScaleTable()) {
    planner.init(cfg.capacity, stream);
    ws->reserve(dense_workspace_for_capacity(cfg, ws->caps(), cfg.capacity.max_bs));
    if (cfg.spec.topk > 1) {
      ATTNSERVE_CHECK(cfg.kv_dtype != DType::fp8_e4m3, "DenseBackend: draft trees (spec.topk = ", cfg.spec.topk,
                      ") need a bf16 | f16 cache (the tree part reads no fp8 yet)");
      const std::size_t elems = std::size_t(cfg.capacity.max_num_tokens) * std::size_t(cfg.num_q_heads);
      tree_lses = Buffer(elems * sizeof(float), cfg.device);
    }
  }
  // The batch's metadata and plans become current; the workspace grows to what they need.
  void use(const DenseMetadata& m, BatchPlans& p) {
    ws->reserve(p.workspace_bytes());
    meta = &m;
    plans = &p;
  }

  BatchSpec with_table(const BatchSpec& b) const {
    BatchSpec s = b;
    if (s.req_to_token.empty_view()) s.req_to_token = cfg.req_to_token;
    return s;
  }
  int num_layers() const { return int(cfg.kv_buffers.size()); }

  void store(const char* who, const ForwardArgs& a, const LayerSpec& layer, const KvLayerBuffers& kv, int64_t rows,
             float k_scale, float v_scale, Stream stream);
  TensorView run(const ForwardArgs& a, const LayerSpec& layer, bool decode_call, Stream stream);
  // Draft trees: the prefix part (paged attention, no mask) and the tree part (tree_attention), merged.
  void run_tree(const char* who, const TensorView& q, const TensorView& q_nope, const TensorView& q_rope,
                const TensorView& out, const KvLayerBuffers& kv, const ResolvedLayer& L, Stream stream);
};

void DenseBackend::Impl::run_tree(const char* who, const TensorView& q, const TensorView& q_nope,
                                  const TensorView& q_rope, const TensorView& out, const KvLayerBuffers& kv,
                                  const ResolvedLayer& L, Stream stream) {
  const DenseMetadata& m = *meta;
  const DraftTreeMetadata& t = m.tree;
  ATTNSERVE_CHECK(L.window_left < 0 && L.window_right < 0, who, ": draft trees (spec.topk > 1) do not support a ",
                  "sliding window yet (the layer's sliding_window_size = ", L.window_left, ")");
  const bool mla = cfg.arch == AttentionArch::mla;
  const TensorView& q_rows = mla ? q_nope : q;
  const int64_t rows = m.num_q_rows, h = cfg.num_q_heads, dv = cfg.v_head_dim, P = cfg.page_size;
  const TensorView o_prefix = out;  // the prefix part's output, merged in place by tree_attention
  const TensorView lse_prefix = TensorView::contiguous(tree_lses.data(), DType::f32, {rows, h}, cfg.device);

  // Prefix: every row of a request sees its whole cached prefix (causal off).
  if (!mla) {
    const PagedAttentionArgs args{.q = q,
                                  .k_cache = as_pages(kv.k, P),
                                  .v_cache = as_pages(kv.v, P),
                                  .page_table = m.page_table,
                                  .cache_seqlens = m.cache_seqlens_int32,
                                  .cu_seqlens_q = m.cu_seqlens_q,
                                  .out = o_prefix,
                                  .lse = lse_prefix,
                                  .max_seqlen_q = m.max_seq_len_q,
                                  .softmax_scale = L.scale,
                                  .causal = false,
                                  .softcap = L.softcap,
                                  .deterministic = cfg.deterministic};
    if (cfg.device.is_cpu()) paged_attention(args, ws->view(), stream);
    else paged_attention(args, plans->get(cuda::attn::problem_of(args), ws->caps()), ws->view(), stream);
  } else {
    const MlaAttentionArgs args{.q_nope = q_nope,
                                .q_rope = q_rope,
                                .kv_cache = unsqueeze(as_pages(kv.k, P), 2),
                                .page_table = m.page_table,
                                .cache_seqlens = m.cache_seqlens_int32,
                                .cu_seqlens_q = m.cu_seqlens_q,
                                .out = o_prefix,
                                .lse = lse_prefix,
                                .max_seqlen_q = m.max_seq_len_q,
                                .softmax_scale = L.scale,
                                .causal = false,
                                .softcap = L.softcap,
                                .deterministic = cfg.deterministic};
    if (cfg.device.is_cpu()) mla_attention(args, ws->view(), stream);
    else mla_attention(args, plans->get(cuda::mla::problem_of(args), ws->caps()), ws->view(), stream);
  }
  // Tree: the draft tokens among themselves under the tree's mask (MLA: keys and values are the latent rows).
  const TensorView k_slots = mla ? unsqueeze(kv.k, 1) : kv.k;
  tree_attention({.q = q_rows,
                  .k_cache = k_slots,
                  .v_cache = mla ? k_slots.slice(2, 0, dv) : kv.v,
                  .key_slots = t.key_slots,
                  .num_keys = t.num_keys,
                  .cu_seqlens_q = m.cu_seqlens_q,
                  .mask = t.mask,
                  .out = out,
                  .q_rope = mla ? q_rope : TensorView{},
                  .prefix_out = o_prefix,
                  .prefix_lse = lse_prefix,
                  .max_seqlen_q = m.max_seq_len_q,
                  .softmax_scale = L.scale,
                  .softcap = L.softcap},
                 stream);
}

void DenseBackend::Impl::store(const char* who, const ForwardArgs& a, const LayerSpec& layer, const KvLayerBuffers& kv,
                               int64_t rows, float k_scale, float v_scale, Stream stream) {
  ATTNSERVE_CHECK(!a.out_cache_loc.empty_view(), who, ": argument 'out_cache_loc' is required to store 'k' (the ",
                  "slots of the new tokens); pass save_kv_cache = false to skip the store");
  if (cfg.arch == AttentionArch::mha) {
    ATTNSERVE_CHECK(!a.v.empty_view(), who, ": argument 'v' is required with 'k'");
    const TensorView k = as_heads(a.k, cfg.num_kv_heads, cfg.head_dim, who, "k");
    const TensorView v = as_heads(a.v, cfg.num_kv_heads, cfg.v_head_dim, who, "v");
    ATTNSERVE_CHECK(k.shape[0] == rows, who, ": argument 'k' has ", k.shape[0], " rows, the batch has ", rows,
                    " query rows");
    set_kv_buffer({.k = k,
                   .v = v,
                   .k_cache = kv.k,
                   .v_cache = kv.v,
                   .loc = a.out_cache_loc,
                   .k_scale = k_scale,
                   .v_scale = v_scale},
                  stream);
  } else {
    ATTNSERVE_CHECK(!a.k_rope.empty_view(), who,
                    ": argument 'k_rope' is required with 'k' (MLA stores [kv_c | k_rope])");
    const TensorView kv_c = as_rows(a.k, cfg.v_head_dim, who, "k");
    const TensorView k_rope = as_rows(a.k_rope, cfg.head_dim - cfg.v_head_dim, who, "k_rope");
    ATTNSERVE_CHECK(kv_c.shape[0] == rows, who, ": argument 'k' has ", kv_c.shape[0], " rows, the batch has ", rows,
                    " query rows");
    set_mla_kv_buffer({.kv_c = kv_c, .k_rope = k_rope, .cache = kv.k, .loc = a.out_cache_loc}, stream);
  }
  (void)layer;
}

TensorView DenseBackend::Impl::run(const ForwardArgs& a, const LayerSpec& layer, bool decode_call, Stream stream) {
  const char* who = decode_call ? "DenseBackend::forward_decode" : "DenseBackend::forward_extend";
  ATTNSERVE_CHECK(meta, who, ": no forward metadata: call init_forward_metadata (or the graph capture / replay) first");
  const DenseMetadata& m = *meta;
  check_call_mode(who, m.mode, decode_call);
  check_layer_id(who, layer, num_layers());
  const KvLayerBuffers& kv = cfg.kv_buffers[std::size_t(layer.layer_id)];
  const ResolvedLayer L = resolve_layer(who, layer, cfg.softmax_scale, cfg.softcap, cfg.sliding_window_size);
  const bool mla = cfg.arch == AttentionArch::mla;
  const int64_t rows = m.num_q_rows, h = cfg.num_q_heads, d = cfg.head_dim, dv = cfg.v_head_dim;

  // ---- Shapes: q (MHA; MLA split or packed) and out.
  TensorView q, q_nope, q_rope;
  if (!mla) {
    q = as_heads(a.q, h, d, who, "q");
  } else if (!a.q_rope.empty_view()) {
    q_nope = as_heads(a.q, h, dv, who, "q");
    q_rope = as_heads(a.q_rope, h, d - dv, who, "q_rope");
  } else {
    const TensorView packed = as_heads(a.q, h, d, who, "q");
    q_nope = packed.slice(2, 0, dv);
    q_rope = packed.slice(2, dv, d);
  }
  const TensorView& q_rows = mla ? q_nope : q;
  ATTNSERVE_CHECK(q_rows.shape[0] == rows, who, ": argument 'q' has ", q_rows.shape[0], " rows, the batch has ", rows,
                  " query rows (", to_string(m.mode), m.captured ? ", captured" : "", ")");
  const TensorView out = as_heads(a.out, h, dv, who, "out");
  ATTNSERVE_CHECK(out.shape[0] == rows, who, ": argument 'out' has ", out.shape[0], " rows, expected ", rows);

  const bool fp8 = cfg.kv_dtype == DType::fp8_e4m3;
  const float k_scale = layer.k_scale.value_or(kv.k_scale), v_scale = layer.v_scale.value_or(kv.v_scale);
  if (fp8) scales.update(layer.layer_id, k_scale, v_scale, stream);
  if (a.save_kv_cache && !a.k.empty_view()) store(who, a, layer, kv, rows, k_scale, v_scale, stream);
  if (rows == 0) return out;

  if (m.tree.enabled) {
    run_tree(who, q, q_nope, q_rope, out, kv, L, stream);
    return out;
  }

  // ---- Local (chunked) attention layers read the virtual batches (seed 001: use_irope).
  const bool local = layer.use_irope && m.has_local_attn;
  const LocalAttentionMetadata& la = m.local_attn_metadata;
  const TensorView page_table = local ? la.local_block_table : m.page_table;
  const TensorView cache_seqlens = local ? la.local_seqused_k : m.cache_seqlens_int32;
  const TensorView cu_seqlens_q = local ? la.local_query_start_loc : m.cu_seqlens_q;
  const int max_seqlen_q = local ? la.local_max_query_len : m.max_seq_len_q;
  const int64_t P = cfg.page_size;

  if (!mla) {
    const int64_t b = page_table.size(0);
    PagedAttentionArgs args{.q = q,
                            .k_cache = as_pages(kv.k, P),
                            .v_cache = as_pages(kv.v, P),
                            .page_table = page_table,
                            .cache_seqlens = cache_seqlens,
                            .cu_seqlens_q = cu_seqlens_q,
                            .out = out,
                            .max_seqlen_q = max_seqlen_q,
                            .softmax_scale = L.scale,
                            .causal = true,
                            .window_left = L.window_left,
                            .window_right = L.window_right,
                            .softcap = L.softcap,
                            .deterministic = cfg.deterministic};
    if (fp8) {
      args.k_descale = scales.k_descale(layer.layer_id, b, cfg.num_kv_heads);
      args.v_descale = scales.v_descale(layer.layer_id, b, cfg.num_kv_heads);
    }
    if (cfg.device.is_cpu()) paged_attention(args, ws->view(), stream);
    else paged_attention(args, plans->get(cuda::attn::problem_of(args), ws->caps()), ws->view(), stream);
  } else {
    const MlaAttentionArgs args{.q_nope = q_nope,
                                .q_rope = q_rope,
                                .kv_cache = unsqueeze(as_pages(kv.k, P), 2),
                                .page_table = page_table,
                                .cache_seqlens = cache_seqlens,
                                .cu_seqlens_q = cu_seqlens_q,
                                .out = out,
                                .max_seqlen_q = max_seqlen_q,
                                .softmax_scale = L.scale,
                                .causal = true,
                                .window_left = L.window_left,
                                .window_right = L.window_right,
                                .softcap = L.softcap,
                                .deterministic = cfg.deterministic};
    if (cfg.device.is_cpu()) mla_attention(args, ws->view(), stream);
    else mla_attention(args, plans->get(cuda::mla::problem_of(args), ws->caps()), ws->view(), stream);
  }
  return out;
}

// ---- Public ------------------------------------------------------------------------------------------

DenseBackend::DenseBackend(const DenseBackendConfig& config, Stream stream)
    : DenseBackend(config, make_workspace("DenseBackend", config.device), stream) {}
DenseBackend::DenseBackend(const DenseBackendConfig& config, std::shared_ptr<SharedWorkspace> ws, Stream stream)
    : impl_(std::make_unique<Impl>(config, std::move(ws), stream)) {}
DenseBackend::~DenseBackend() = default;
DenseBackend::DenseBackend(DenseBackend&&) noexcept = default;
DenseBackend& DenseBackend::operator=(DenseBackend&&) noexcept = default;

void DenseBackend::validate(const BatchSpec& batch) const { impl_->planner.validate(impl_->with_table(batch)); }

void DenseBackend::init_forward_metadata(const BatchSpec& batch, Stream stream) {
  Impl& s = *impl_;
  const DenseMetadata& m = s.planner.plan(s.with_table(batch), stream);
  s.eager_plans = plan_dense_batch(s.cfg, s.ws->caps(), m);
  s.use(m, s.eager_plans);
}

void DenseBackend::init_cuda_graph_state(int max_bs, int max_num_tokens, Stream) {
  Impl& s = *impl_;
  check_graph_capacity("DenseBackend::init_cuda_graph_state", max_bs, max_num_tokens, s.cfg.capacity);
  s.ws->reserve(dense_workspace_for_capacity(s.cfg, s.ws->caps(), max_bs));
  s.graph_max_bs = max_bs;
}

void DenseBackend::init_forward_metadata_capture_cuda_graph(int bs, int num_tokens, ForwardMode mode, Stream stream) {
  Impl& s = *impl_;
  constexpr const char* who = "DenseBackend::init_forward_metadata_capture_cuda_graph";
  ATTNSERVE_CHECK(s.graph_max_bs > 0, who, ": call init_cuda_graph_state(max_bs, max_num_tokens) first");
  ATTNSERVE_CHECK(bs >= 1 && bs <= s.graph_max_bs, who, ": bs ", bs, " must be in [1, ", s.graph_max_bs,
                  "] (init_cuda_graph_state's max_bs)");
  const int64_t rows = int64_t(bs) * graph_rows_per_request(mode, s.cfg.spec);
  ATTNSERVE_CHECK(num_tokens == rows, who, ": num_tokens ", num_tokens, ", but a ", to_string(mode),
                  " graph of batch size ", bs, " has ", rows, " query rows");
  const DenseMetadata& m = s.planner.capture(bs, mode, stream);
  BatchPlans& p = s.graph_plans[{bs, mode}] = plan_dense_batch(s.cfg, s.ws->caps(), m);
  s.use(m, p);
}

void DenseBackend::validate_replay(int bs, const BatchSpec& batch) const {
  impl_->planner.validate_replay(bs, batch.mode, impl_->with_table(batch));
}

void DenseBackend::init_forward_metadata_replay_cuda_graph(int bs, const BatchSpec& batch, Stream stream) {
  Impl& s = *impl_;
  const DenseMetadata& m = s.planner.replay(bs, batch.mode, s.with_table(batch), stream);
  s.meta = &m;
  s.plans = &s.graph_plans[{bs, batch.mode}];  // the plans captured with the graph: same shapes, no growth
}

TensorView DenseBackend::forward_extend(const ForwardArgs& args, const LayerSpec& layer, Stream stream) {
  return impl_->run(args, layer, false, stream);
}
TensorView DenseBackend::forward_decode(const ForwardArgs& args, const LayerSpec& layer, Stream stream) {
  return impl_->run(args, layer, true, stream);
}
TensorView DenseBackend::forward(const ForwardArgs& args, const LayerSpec& layer, Stream stream) {
  ATTNSERVE_CHECK(impl_->meta, "DenseBackend::forward: no forward metadata: call init_forward_metadata first");
  return impl_->run(args, layer, is_decode_call_mode(impl_->meta->mode), stream);
}

bool DenseBackend::has_forward_metadata() const { return impl_->meta != nullptr; }
const DenseMetadata& DenseBackend::forward_metadata() const {
  ATTNSERVE_CHECK(impl_->meta, "DenseBackend::forward_metadata: none yet (call init_forward_metadata)");
  return *impl_->meta;
}
const DenseBackendConfig& DenseBackend::config() const { return impl_->cfg; }
int DenseBackend::num_layers() const { return impl_->num_layers(); }
std::size_t DenseBackend::workspace_bytes() const { return impl_->ws->bytes(); }
std::size_t DenseBackend::workspace_for_capacity(const DenseBackendConfig& config, const DeviceCaps& caps) {
  return dense_workspace_for_capacity(checked_dense_config(config, caps), caps, config.capacity.max_bs);
}
std::size_t DenseBackend::device_bytes() const {
  return impl_->planner.device_bytes() + impl_->scales.bytes() + impl_->ws->total_bytes();
}

}  // namespace attnserve
