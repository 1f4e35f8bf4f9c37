// Python bindings of the backends (thin): the core classes _DenseBackend, _SparseBackend and their
// multi-step holders. The engine-facing classes (seed signatures, ForwardBatch, LayerSpec) are in
// attnserve/backend.py. Batch inputs are host integer lists; arrays are any DLPack array; metadata
// and indexer arrays come back as views of the backend's buffers (kept alive by it).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "attnserve/backend.h"
#include "metadata_dict.h"
#include "views.h"

namespace attnserve::py {
namespace {

using nb::arg;
using IntList = std::optional<std::vector<int32_t>>;
using Int64List = std::optional<std::vector<int64_t>>;
using ArrayList = std::vector<std::optional<nb::ndarray<>>>;

// Owns the host arrays a BatchSpec points into for the duration of one call.
struct HostBatch {
  std::vector<int32_t> seq_lens, req_pool_indices, extend_seq_lens, extend_prefix_lens, draft_slots, tree_parents;
  std::vector<int64_t> tree_mask;
  TensorView req_to_token;
  HostBatch(std::vector<int32_t> seq, std::vector<int32_t> rows, IntList ext, IntList pre, IntList drafts,
            const OptArray& table, IntList parents = std::nullopt, Int64List masks = std::nullopt)
      : seq_lens(std::move(seq)),
        req_pool_indices(std::move(rows)),
        extend_seq_lens(ext.value_or(std::vector<int32_t>{})),
        extend_prefix_lens(pre.value_or(std::vector<int32_t>{})),
        draft_slots(drafts.value_or(std::vector<int32_t>{})),
        tree_parents(parents.value_or(std::vector<int32_t>{})),
        tree_mask(masks.value_or(std::vector<int64_t>{})),
        req_to_token(to_view(table)) {}
  BatchSpec spec(ForwardMode mode) const {
    return BatchSpec{.mode = mode,
                     .seq_lens = seq_lens,
                     .req_pool_indices = req_pool_indices,
                     .extend_seq_lens = extend_seq_lens,
                     .extend_prefix_lens = extend_prefix_lens,
                     .draft_slots = draft_slots,
                     .tree_parents = tree_parents,
                     .tree_mask = tree_mask,
                     .req_to_token = req_to_token};
  }
};

// Per-layer KV buffers from lists of arrays (fp8 MHA caches travel as uint8).
std::vector<KvLayerBuffers> kv_buffers(const std::vector<nb::ndarray<>>& k, const ArrayList& v,
                                       const std::vector<float>& k_scales, const std::vector<float>& v_scales,
                                       bool fp8) {
  ATTNSERVE_CHECK(v.empty() || v.size() == k.size(), "kv buffers: ", v.size(), " v arrays for ", k.size(), " layers");
  std::vector<KvLayerBuffers> out;
  for (std::size_t l = 0; l < k.size(); ++l) {
    KvLayerBuffers b;
    b.k = to_view(k[l]);
    if (!v.empty() && v[l]) b.v = to_view(*v[l]);
    if (fp8) {
      if (b.k.dtype == DType::u8) b.k = b.k.with_dtype(DType::fp8_e4m3);
      if (b.v.dtype == DType::u8 && !b.v.empty_view()) b.v = b.v.with_dtype(DType::fp8_e4m3);
    }
    if (l < k_scales.size()) b.k_scale = k_scales[l];
    if (l < v_scales.size()) b.v_scale = v_scales[l];
    out.push_back(b);
  }
  return out;
}

LayerSpec layer_spec(int layer_id, std::optional<float> scaling, std::optional<float> logit_cap,
                     std::optional<int> sliding_window_size, bool use_irope, std::optional<float> k_scale,
                     std::optional<float> v_scale) {
  return LayerSpec{.layer_id = layer_id,
                   .scaling = scaling,
                   .logit_cap = logit_cap,
                   .sliding_window_size = sliding_window_size,
                   .use_irope = use_irope,
                   .k_scale = k_scale,
                   .v_scale = v_scale};
}

// Lifecycle and forward methods both backends share (same names and arguments).
template <class Backend>
void bind_backend_methods(nb::class_<Backend>& c) {
  c.def(
       "validate",
       [](const Backend& b, ForwardMode mode, std::vector<int32_t> seq_lens, std::vector<int32_t> req_pool_indices,
          IntList extend_seq_lens, IntList extend_prefix_lens, IntList draft_slots, OptArray req_to_token,
          IntList tree_parents, Int64List tree_mask) {
         const HostBatch h(std::move(seq_lens), std::move(req_pool_indices), std::move(extend_seq_lens),
                           std::move(extend_prefix_lens), std::move(draft_slots), req_to_token, std::move(tree_parents),
                           std::move(tree_mask));
         b.validate(h.spec(mode));
       },
       arg("mode"), arg("seq_lens"), arg("req_pool_indices"), nb::kw_only(), arg("extend_seq_lens") = nb::none(),
       arg("extend_prefix_lens") = nb::none(), arg("draft_slots") = nb::none(), arg("req_to_token") = nb::none(),
       arg("tree_parents") = nb::none(), arg("tree_mask") = nb::none())
      .def(
          "init_forward_metadata",
          [](Backend& b, ForwardMode mode, std::vector<int32_t> seq_lens, std::vector<int32_t> req_pool_indices,
             IntList extend_seq_lens, IntList extend_prefix_lens, IntList draft_slots, OptArray req_to_token,
             uintptr_t stream, IntList tree_parents, Int64List tree_mask) {
            const HostBatch h(std::move(seq_lens), std::move(req_pool_indices), std::move(extend_seq_lens),
                              std::move(extend_prefix_lens), std::move(draft_slots), req_to_token,
                              std::move(tree_parents), std::move(tree_mask));
            b.init_forward_metadata(h.spec(mode), to_stream(stream));
          },
          arg("mode"), arg("seq_lens"), arg("req_pool_indices"), nb::kw_only(), arg("extend_seq_lens") = nb::none(),
          arg("extend_prefix_lens") = nb::none(), arg("draft_slots") = nb::none(), arg("req_to_token") = nb::none(),
          arg("stream") = 0, arg("tree_parents") = nb::none(), arg("tree_mask") = nb::none())
      .def(
          "init_cuda_graph_state",
          [](Backend& b, int max_bs, int max_num_tokens, uintptr_t stream) {
            b.init_cuda_graph_state(max_bs, max_num_tokens, to_stream(stream));
          },
          arg("max_bs"), arg("max_num_tokens"), nb::kw_only(), arg("stream") = 0)
      .def(
          "init_forward_metadata_capture_cuda_graph",
          [](Backend& b, int bs, int num_tokens, ForwardMode mode, uintptr_t stream) {
            b.init_forward_metadata_capture_cuda_graph(bs, num_tokens, mode, to_stream(stream));
          },
          arg("bs"), arg("num_tokens"), arg("mode"), nb::kw_only(), arg("stream") = 0)
      .def(
          "init_forward_metadata_replay_cuda_graph",
          [](Backend& b, int bs, ForwardMode mode, std::vector<int32_t> seq_lens, std::vector<int32_t> req_pool_indices,
             IntList extend_seq_lens, IntList extend_prefix_lens, IntList draft_slots, OptArray req_to_token,
             uintptr_t stream, IntList tree_parents, Int64List tree_mask) {
            const HostBatch h(std::move(seq_lens), std::move(req_pool_indices), std::move(extend_seq_lens),
                              std::move(extend_prefix_lens), std::move(draft_slots), req_to_token,
                              std::move(tree_parents), std::move(tree_mask));
            b.init_forward_metadata_replay_cuda_graph(bs, h.spec(mode), to_stream(stream));
          },
          arg("bs"), arg("mode"), arg("seq_lens"), arg("req_pool_indices"), nb::kw_only(),
          arg("extend_seq_lens") = nb::none(), arg("extend_prefix_lens") = nb::none(), arg("draft_slots") = nb::none(),
          arg("req_to_token") = nb::none(), arg("stream") = 0, arg("tree_parents") = nb::none(),
          arg("tree_mask") = nb::none());
  // forward_extend / forward_decode / forward: `out` is written; layer fields as LayerSpec.
  auto add_forward = [&c](const char* name, TensorView (Backend::*fn)(const ForwardArgs&, const LayerSpec&, Stream)) {
    c.def(
        name,
        [fn](Backend& b, RoArray q, Array out, int layer_id, OptRoArray k, OptRoArray v, OptRoArray q_rope,
             OptRoArray k_rope, OptRoArray out_cache_loc, bool save_kv_cache, OptRoArray topk_indices,
             std::optional<float> scaling, std::optional<float> logit_cap, std::optional<int> sliding_window_size,
             bool use_irope, std::optional<float> k_scale, std::optional<float> v_scale, uintptr_t stream) {
          const ForwardArgs a{.q = to_view(q),
                              .out = to_view(out),
                              .k = to_view(k),
                              .v = to_view(v),
                              .q_rope = to_view(q_rope),
                              .k_rope = to_view(k_rope),
                              .out_cache_loc = to_view(out_cache_loc),
                              .save_kv_cache = save_kv_cache,
                              .topk_indices = to_view(topk_indices)};
          (b.*fn)(a, layer_spec(layer_id, scaling, logit_cap, sliding_window_size, use_irope, k_scale, v_scale),
                  to_stream(stream));
        },
        arg("q"), arg("out"), arg("layer_id"), nb::kw_only(), arg("k") = nb::none(), arg("v") = nb::none(),
        arg("q_rope") = nb::none(), arg("k_rope") = nb::none(), arg("out_cache_loc") = nb::none(),
        arg("save_kv_cache") = true, arg("topk_indices") = nb::none(), arg("scaling") = nb::none(),
        arg("logit_cap") = nb::none(), arg("sliding_window_size") = nb::none(), arg("use_irope") = false,
        arg("k_scale") = nb::none(), arg("v_scale") = nb::none(), arg("stream") = 0);
  };
  add_forward("forward_extend", &Backend::forward_extend);
  add_forward("forward_decode", &Backend::forward_decode);
  add_forward("forward", &Backend::forward);
  c.def_prop_ro("forward_metadata",
                [](nb::handle self) {
                  const Backend& b = nb::cast<const Backend&>(self);
                  return b.has_forward_metadata() ? nb::object(metadata_dict(b.forward_metadata(), self)) : nb::none();
                })
      .def("get_cuda_graph_seq_len_fill_value", &Backend::get_cuda_graph_seq_len_fill_value)
      .def_prop_ro("num_layers", &Backend::num_layers)
      .def_prop_ro("workspace_bytes", &Backend::workspace_bytes)
      .def_prop_ro("device_bytes", &Backend::device_bytes);
}

template <class Multi>
void bind_multi_step(nb::module_& m, const char* name, const char* doc) {
  nb::class_<Multi>(m, name, doc)
      .def(
          "__init__",
          [](Multi* self, const typename Multi::Config& config, uintptr_t stream) {
            new (self) Multi(config, to_stream(stream));
          },
          arg("config"), nb::kw_only(), arg("stream") = 0, nb::keep_alive<1, 2>())
      .def_prop_ro("num_backends", &Multi::num_backends)
      .def("step", &Multi::step, arg("i"), nb::rv_policy::reference_internal)
      .def(
          "init_forward_metadata",
          [](Multi& ms, std::vector<int32_t> seq_lens, std::vector<int32_t> req_pool_indices, IntList draft_slots,
             OptArray req_to_token, uintptr_t stream) {
            const HostBatch h(std::move(seq_lens), std::move(req_pool_indices), {}, {}, std::move(draft_slots),
                              req_to_token);
            ms.init_forward_metadata(h.spec(ForwardMode::draft_decode), to_stream(stream));
          },
          arg("seq_lens"), arg("req_pool_indices"), nb::kw_only(), arg("draft_slots") = nb::none(),
          arg("req_to_token") = nb::none(), arg("stream") = 0)
      .def(
          "init_cuda_graph_state",
          [](Multi& ms, int max_bs, int max_num_tokens, uintptr_t stream) {
            ms.init_cuda_graph_state(max_bs, max_num_tokens, to_stream(stream));
          },
          arg("max_bs"), arg("max_num_tokens"), nb::kw_only(), arg("stream") = 0)
      .def(
          "init_forward_metadata_capture_cuda_graph",
          [](Multi& ms, int bs, uintptr_t stream) {
            ms.init_forward_metadata_capture_cuda_graph(bs, to_stream(stream));
          },
          arg("bs"), nb::kw_only(), arg("stream") = 0)
      .def(
          "init_forward_metadata_replay_cuda_graph",
          [](Multi& ms, int bs, std::vector<int32_t> seq_lens, std::vector<int32_t> req_pool_indices,
             IntList draft_slots, OptArray req_to_token, uintptr_t stream) {
            const HostBatch h(std::move(seq_lens), std::move(req_pool_indices), {}, {}, std::move(draft_slots),
                              req_to_token);
            ms.init_forward_metadata_replay_cuda_graph(bs, h.spec(ForwardMode::draft_decode), to_stream(stream));
          },
          arg("bs"), arg("seq_lens"), arg("req_pool_indices"), nb::kw_only(), arg("draft_slots") = nb::none(),
          arg("req_to_token") = nb::none(), arg("stream") = 0);
}

// Fields both configurations share: speculative decoding, capacity, device, and the buffers (the
// config keeps the arrays alive; a backend keeps its config alive).
template <class Config>
void bind_config_common(nb::class_<Config>& c) {
  c.def(nb::init<>())
      .def_prop_rw(
          "draft_token_num", [](const Config& c) { return c.spec.draft_token_num; },
          [](Config& c, int v) { c.spec.draft_token_num = v; })
      .def_prop_rw(
          "num_steps", [](const Config& c) { return c.spec.num_steps; }, [](Config& c, int v) { c.spec.num_steps = v; })
      .def_prop_rw(
          "step_id", [](const Config& c) { return c.spec.step_id; }, [](Config& c, int v) { c.spec.step_id = v; })
      .def_prop_rw(
          "topk", [](const Config& c) { return c.spec.topk; }, [](Config& c, int v) { c.spec.topk = v; })
      .def_prop_rw(
          "max_bs", [](const Config& c) { return c.capacity.max_bs; }, [](Config& c, int v) { c.capacity.max_bs = v; })
      .def_prop_rw(
          "max_num_tokens", [](const Config& c) { return c.capacity.max_num_tokens; },
          [](Config& c, int v) { c.capacity.max_num_tokens = v; })
      .def_prop_rw(
          "max_context_len", [](const Config& c) { return c.capacity.max_context_len; },
          [](Config& c, int v) { c.capacity.max_context_len = v; })
      .def_prop_rw(
          "device", [](const Config& c) { return to_string(c.device); },
          [](Config& c, const std::string& d) { c.device = parse_device(d); })
      .def_rw("softmax_scale", &Config::softmax_scale)
      .def_rw("softcap", &Config::softcap)
      .def_rw("page_size", &Config::page_size)
      .def_rw("deterministic", &Config::deterministic)
      .def(
          "set_req_to_token", [](Config& c, nb::ndarray<> table) { c.req_to_token = to_view(table); }, arg("table"),
          nb::keep_alive<1, 2>(), "The engine's [pool_size, max_context_len] i32 request -> token-slot table.")
      .def(
          "set_kv_buffers",
          [](Config& c, const std::vector<nb::ndarray<>>& k, const ArrayList& v, const std::vector<float>& k_scales,
             const std::vector<float>& v_scales,
             bool fp8) { c.kv_buffers = kv_buffers(k, v, k_scales, v_scales, fp8); },
          arg("k"), arg("v") = ArrayList{}, arg("k_scales") = std::vector<float>{},
          arg("v_scales") = std::vector<float>{}, arg("fp8") = false, nb::keep_alive<1, 2>(), nb::keep_alive<1, 3>(),
          "Per-layer KV arrays (MLA: the latent caches in k, v empty). fp8: uint8 arrays hold fp8 e4m3.")
      .def_prop_ro("num_layers", [](const Config& c) { return int(c.kv_buffers.size()); });
}

}  // namespace

void bind_backend(nb::module_& m) {
  nb::enum_<AttentionArch>(m, "AttentionArch").value("mha", AttentionArch::mha).value("mla", AttentionArch::mla);
  nb::enum_<NsaImpl>(m, "NsaImpl")
      .value("automatic", NsaImpl::automatic)
      .value("sparse_bf16", NsaImpl::sparse_bf16)
      .value("sparse_fp8", NsaImpl::sparse_fp8)
      .value("gather", NsaImpl::gather);
  m.def(
      "parse_nsa_impl", [](const std::string& s) { return parse_nsa_impl(s); }, arg("name"),
      "An NSA kernel path from our name or the seeds' (flashmla_sparse, flashmla_kv, fa3, auto).");

  nb::class_<DenseBackendConfig> dense_cfg(m, "DenseBackendConfig", "Configuration of a DenseBackend.");
  bind_config_common(dense_cfg);
  dense_cfg.def_rw("arch", &DenseBackendConfig::arch)
      .def_rw("num_q_heads", &DenseBackendConfig::num_q_heads)
      .def_rw("num_kv_heads", &DenseBackendConfig::num_kv_heads)
      .def_rw("head_dim", &DenseBackendConfig::head_dim)
      .def_rw("v_head_dim", &DenseBackendConfig::v_head_dim)
      .def_prop_rw(
          "kv_dtype", [](const DenseBackendConfig& c) { return std::string(dtype_name(c.kv_dtype)); },
          [](DenseBackendConfig& c, const std::string& t) { c.kv_dtype = parse_dtype(t); })
      .def_rw("sliding_window_size", &DenseBackendConfig::sliding_window_size)
      .def_rw("attention_chunk_size", &DenseBackendConfig::attention_chunk_size);

  nb::class_<SparseBackendConfig> sparse_cfg(m, "SparseBackendConfig", "Configuration of a SparseBackend.");
  bind_config_common(sparse_cfg);
  sparse_cfg.def_rw("num_q_heads", &SparseBackendConfig::num_q_heads)
      .def_rw("kv_lora_rank", &SparseBackendConfig::kv_lora_rank)
      .def_rw("qk_rope_head_dim", &SparseBackendConfig::qk_rope_head_dim)
      .def_rw("kv_cache_format", &SparseBackendConfig::kv_cache_format)
      .def_rw("index_topk", &SparseBackendConfig::index_topk)
      .def_rw("index_n_heads", &SparseBackendConfig::index_n_heads)
      .def_rw("index_head_dim", &SparseBackendConfig::index_head_dim)
      .def_rw("prefill_impl", &SparseBackendConfig::prefill_impl)
      .def_rw("decode_impl", &SparseBackendConfig::decode_impl)
      .def_rw("fuse_topk", &SparseBackendConfig::fuse_topk);

  nb::class_<DenseBackend> dense(m, "_DenseBackend", "Core of attnserve.DenseBackend (attnserve/backend.py).");
  dense.def(
      "__init__",
      [](DenseBackend* self, const DenseBackendConfig& config, uintptr_t stream) {
        new (self) DenseBackend(config, to_stream(stream));
      },
      arg("config"), nb::kw_only(), arg("stream") = 0, nb::keep_alive<1, 2>());
  bind_backend_methods(dense);

  nb::class_<SparseBackend> sparse(m, "_SparseBackend", "Core of attnserve.SparseBackend (attnserve/backend.py).");
  sparse.def(
      "__init__",
      [](SparseBackend* self, const SparseBackendConfig& config, uintptr_t stream) {
        new (self) SparseBackend(config, to_stream(stream));
      },
      arg("config"), nb::kw_only(), arg("stream") = 0, nb::keep_alive<1, 2>());
  bind_backend_methods(sparse);
  sparse
      .def("get_seqlens_int32",
           [](nb::handle self) { return to_python(nb::cast<SparseBackend&>(self).get_seqlens_int32(), self); })
      .def("get_page_table_64",
           [](nb::handle self) { return to_python(nb::cast<SparseBackend&>(self).get_page_table_64(), self); })
      .def("get_seqlens_expanded",
           [](nb::handle self) { return to_python(nb::cast<SparseBackend&>(self).get_seqlens_expanded(), self); })
      .def(
          "topk_transform",
          [](nb::handle self, RoArray logits, int topk, OptRoArray row_starts, uintptr_t stream) {
            SparseBackend& b = nb::cast<SparseBackend&>(self);
            return to_python(b.topk_transform(to_view(logits), topk, to_stream(stream), to_view(row_starts)), self);
          },
          arg("logits"), arg("topk"), nb::kw_only(), arg("row_starts") = nb::none(), arg("stream") = 0,
          "Top-k slots [rows, topk] (a view of the backend's buffer, valid until the next call).")
      .def_prop_ro("resolved_prefill_impl", &SparseBackend::resolved_prefill_impl)
      .def_prop_ro("resolved_decode_impl", &SparseBackend::resolved_decode_impl);

  bind_multi_step<DenseMultiStepBackend>(m, "_DenseMultiStepBackend", "One DenseBackend per draft step.");
  bind_multi_step<SparseMultiStepBackend>(m, "_SparseMultiStepBackend", "One SparseBackend per draft step.");
}

}  // namespace attnserve::py
