// Python bindings of the ops: thin, DLPack in, keyword arguments named as in the C++ Args structs.
// Outputs are passed in (no hidden allocations); `stream` is a raw cudaStream_t (0 = default).
// Ops that take a workspace accept query_workspace=True: validate, return the bytes needed, run nothing.
#include "attnserve/ops.h"
#include "convert.h"

namespace attnserve::py {
namespace {

using nb::arg;

// MHA caches, indexer keys and quantized activations travel as uint8 when the framework has no fp8.
TensorView fp8_if_u8(const nb::ndarray<>& a) {
  TensorView v = to_view(a);
  return v.dtype == DType::u8 ? v.with_dtype(DType::fp8_e4m3) : v;
}
TensorView fp8_if_u8(const OptArray& a) { return a ? fp8_if_u8(*a) : TensorView{}; }

Workspace to_workspace(const OptArray& a) {
  if (!a) return {};
  TensorView v = to_view(*a);
  return Workspace{v.data, v.nbytes()};
}

}  // namespace

void bind_ops(nb::module_& m) {
  m.def(
      "paged_attention",
      [](nb::ndarray<> q, nb::ndarray<> k_cache, nb::ndarray<> v_cache, nb::ndarray<> page_table,
         nb::ndarray<> cache_seqlens, nb::ndarray<> cu_seqlens_q, nb::ndarray<> out, float softmax_scale,
         OptArray lse, OptArray k_descale, OptArray v_descale, int max_seqlen_q, bool causal, int window_left,
         int window_right, float softcap, bool deterministic, OptArray workspace, uintptr_t stream,
         bool query_workspace) -> nb::object {
        PagedAttentionArgs a{.q = to_view(q), .k_cache = fp8_if_u8(k_cache), .v_cache = fp8_if_u8(v_cache),
                             .page_table = to_view(page_table), .cache_seqlens = to_view(cache_seqlens),
                             .cu_seqlens_q = to_view(cu_seqlens_q), .out = to_view(out), .lse = to_view(lse),
                             .k_descale = to_view(k_descale), .v_descale = to_view(v_descale),
                             .max_seqlen_q = max_seqlen_q, .softmax_scale = softmax_scale, .causal = causal,
                             .window_left = window_left, .window_right = window_right, .softcap = softcap,
                             .deterministic = deterministic};
        if (query_workspace) return nb::int_(paged_attention_workspace_size(a, query_device_caps(a.q.device)));
        paged_attention(a, to_workspace(workspace), to_stream(stream));
        return nb::none();
      },
      arg("q"), arg("k_cache"), arg("v_cache"), arg("page_table"), arg("cache_seqlens"), arg("cu_seqlens_q"),
      arg("out"), nb::kw_only(), arg("softmax_scale"), arg("lse") = nb::none(), arg("k_descale") = nb::none(),
      arg("v_descale") = nb::none(), arg("max_seqlen_q") = 0, arg("causal") = true, arg("window_left") = -1,
      arg("window_right") = -1, arg("softcap") = 0.f, arg("deterministic") = false,
      arg("workspace") = nb::none(), arg("stream") = 0, arg("query_workspace") = false,
      "Paged attention with varlen queries (GQA/MQA, causal bottom-right, window, softcap, fp8 KV, LSE).");

  m.def(
      "mla_attention",
      [](nb::ndarray<> q_nope, nb::ndarray<> q_rope, nb::ndarray<> kv_cache, nb::ndarray<> page_table,
         nb::ndarray<> cache_seqlens, nb::ndarray<> cu_seqlens_q, nb::ndarray<> out, float softmax_scale,
         OptArray lse, int max_seqlen_q, bool causal, int window_left, int window_right, float softcap,
         bool deterministic, OptArray workspace, uintptr_t stream, bool query_workspace) -> nb::object {
        MlaAttentionArgs a{.q_nope = to_view(q_nope), .q_rope = to_view(q_rope), .kv_cache = to_view(kv_cache),
                           .page_table = to_view(page_table), .cache_seqlens = to_view(cache_seqlens),
                           .cu_seqlens_q = to_view(cu_seqlens_q), .out = to_view(out), .lse = to_view(lse),
                           .max_seqlen_q = max_seqlen_q, .softmax_scale = softmax_scale, .causal = causal,
                           .window_left = window_left, .window_right = window_right, .softcap = softcap,
                           .deterministic = deterministic};
        if (query_workspace) return nb::int_(mla_attention_workspace_size(a, query_device_caps(a.q_nope.device)));
        mla_attention(a, to_workspace(workspace), to_stream(stream));
        return nb::none();
      },
      arg("q_nope"), arg("q_rope"), arg("kv_cache"), arg("page_table"), arg("cache_seqlens"), arg("cu_seqlens_q"),
      arg("out"), nb::kw_only(), arg("softmax_scale"), arg("lse") = nb::none(), arg("max_seqlen_q") = 0,
      arg("causal") = true, arg("window_left") = -1, arg("window_right") = -1, arg("softcap") = 0.f,
      arg("deterministic") = false, arg("workspace") = nb::none(), arg("stream") = 0,
      arg("query_workspace") = false,
      "MLA attention, absorbed form (score = q_nope.c_kv + q_rope.k_rope, value = c_kv).");

  m.def(
      "merge_state",
      [](nb::ndarray<> v_a, nb::ndarray<> s_a, nb::ndarray<> v_b, nb::ndarray<> s_b, nb::ndarray<> v_out,
         OptArray s_out, uintptr_t stream) {
        merge_state({.v_a = to_view(v_a), .s_a = to_view(s_a), .v_b = to_view(v_b), .s_b = to_view(s_b),
                     .v_out = to_view(v_out), .s_out = to_view(s_out)},
                    to_stream(stream));
      },
      arg("v_a"), arg("s_a"), arg("v_b"), arg("s_b"), arg("v_out"), arg("s_out") = nb::none(), nb::kw_only(),
      arg("stream") = 0, "Merge two partial attention states (out, lse).");

  m.def(
      "merge_states",
      [](nb::ndarray<> v_parts, nb::ndarray<> s_parts, nb::ndarray<> v_out, OptArray s_out, uintptr_t stream) {
        merge_states({.v_parts = to_view(v_parts), .s_parts = to_view(s_parts), .v_out = to_view(v_out),
                      .s_out = to_view(s_out)},
                     to_stream(stream));
      },
      arg("v_parts"), arg("s_parts"), arg("v_out"), arg("s_out") = nb::none(), nb::kw_only(), arg("stream") = 0,
      "Merge n partial attention states [n, tokens, heads, d] / [n, tokens, heads].");

  m.def(
      "sparse_mla",
      [](nb::ndarray<> q, nb::ndarray<> kv, nb::ndarray<> indices, nb::ndarray<> out, float softmax_scale,
         OptArray topk_length, OptArray attn_sink, OptArray lse, OptArray max_logits, OptArray workspace,
         uintptr_t stream, bool query_workspace, bool deterministic) -> nb::object {
        SparseMlaArgs a{.q = to_view(q), .kv = to_view(kv), .indices = to_view(indices), .out = to_view(out),
                        .topk_length = to_view(topk_length), .attn_sink = to_view(attn_sink), .lse = to_view(lse),
                        .max_logits = to_view(max_logits), .softmax_scale = softmax_scale,
                        .deterministic = deterministic};
        if (query_workspace) return nb::int_(sparse_mla_workspace_size(a, query_device_caps(a.q.device)));
        sparse_mla(a, to_workspace(workspace), to_stream(stream));
        return nb::none();
      },
      arg("q"), arg("kv"), arg("indices"), arg("out"), nb::kw_only(), arg("softmax_scale"),
      arg("topk_length") = nb::none(), arg("attn_sink") = nb::none(), arg("lse") = nb::none(),
      arg("max_logits") = nb::none(), arg("workspace") = nb::none(), arg("stream") = 0,
      arg("query_workspace") = false, arg("deterministic") = false,
      "Sparse MLA over top-k slots (bf16 cache [slots, 576] or FP8-656 cache [slots, 656] uint8). On CUDA, "
      "few rows split each row's top-k list across CTAs: pass the workspace that query_workspace=True asks "
      "for; deterministic=True never splits (bits independent of the batch).");

  m.def(
      "quantize_fp8_groups",
      [](nb::ndarray<> x, nb::ndarray<> out, nb::ndarray<> scales, int group, uintptr_t stream) {
        quantize_fp8_groups({.x = to_view(x), .out = fp8_if_u8(out), .scales = to_view(scales), .group = group},
                            to_stream(stream));
      },
      arg("x"), arg("out"), arg("scales"), nb::kw_only(), arg("group") = 128, arg("stream") = 0,
      "Per-group FP8 e4m3 quantization with power-of-two scales.");

  m.def(
      "indexer_ragged",
      [](nb::ndarray<> q, nb::ndarray<> weights, nb::ndarray<> k, nb::ndarray<> k_scale, nb::ndarray<> ks,
         nb::ndarray<> ke, nb::ndarray<> logits, OptArray q_scale, OptArray workspace, uintptr_t stream) {
        indexer_ragged({.q = fp8_if_u8(q), .weights = to_view(weights), .k = fp8_if_u8(k),
                        .k_scale = to_view(k_scale), .ks = to_view(ks), .ke = to_view(ke), .logits = to_view(logits),
                        .q_scale = to_view(q_scale)},
                       to_workspace(workspace), to_stream(stream));
      },
      arg("q"), arg("weights"), arg("k"), arg("k_scale"), arg("ks"), arg("ke"), arg("logits"), nb::kw_only(),
      arg("q_scale") = nb::none(), arg("workspace") = nb::none(), arg("stream") = 0, "Lightning-indexer scores, ragged (prefill) form.");

  m.def(
      "indexer_paged",
      [](nb::ndarray<> q, nb::ndarray<> weights, nb::ndarray<> index_k_cache, nb::ndarray<> page_table,
         nb::ndarray<> seqlens, nb::ndarray<> logits, int page_size, int next_n, OptArray q_scale,
         OptArray workspace, uintptr_t stream) {
        indexer_paged({.q = fp8_if_u8(q), .weights = to_view(weights), .index_k_cache = to_view(index_k_cache),
                       .page_table = to_view(page_table), .seqlens = to_view(seqlens), .logits = to_view(logits),
                       .page_size = page_size, .next_n = next_n, .q_scale = to_view(q_scale)},
                      to_workspace(workspace), to_stream(stream));
      },
      arg("q"), arg("weights"), arg("index_k_cache"), arg("page_table"), arg("seqlens"), arg("logits"),
      nb::kw_only(), arg("page_size") = 64, arg("next_n") = 1, arg("q_scale") = nb::none(), arg("workspace") = nb::none(), arg("stream") = 0,
      "Lightning-indexer scores, paged (decode / verify / draft extend) form.");

  nb::enum_<TopkTransform>(m, "TopkTransform")
      .value("none", TopkTransform::none)
      .value("decode", TopkTransform::decode)
      .value("prefill", TopkTransform::prefill)
      .value("ragged", TopkTransform::ragged);

  m.def(
      "topk",
      [](nb::ndarray<> scores, nb::ndarray<> lengths, nb::ndarray<> out, int k, OptArray row_starts,
         TopkTransform transform, OptArray page_table_1, OptArray cu_seqlens_q, OptArray offsets,
         OptArray workspace, uintptr_t stream, bool query_workspace) -> nb::object {
        TopkArgs a{.scores = to_view(scores), .lengths = to_view(lengths), .out = to_view(out), .topk = k,
                   .row_starts = to_view(row_starts), .transform = transform, .page_table_1 = to_view(page_table_1),
                   .cu_seqlens_q = to_view(cu_seqlens_q), .offsets = to_view(offsets)};
        if (query_workspace) return nb::int_(topk_workspace_size(a, query_device_caps(a.scores.device)));
        topk(a, to_workspace(workspace), to_stream(stream));
        return nb::none();
      },
      arg("scores"), arg("lengths"), arg("out"), nb::kw_only(), arg("topk") = 2048, arg("row_starts") = nb::none(),
      arg("transform") = TopkTransform::none, arg("page_table_1") = nb::none(), arg("cu_seqlens_q") = nb::none(),
      arg("offsets") = nb::none(), arg("workspace") = nb::none(), arg("stream") = 0,
      arg("query_workspace") = false,
      "Exact top-k per row, optionally emitting KV slots (decode / prefill / ragged transforms).");

  m.def(
      "set_kv_buffer",
      [](nb::ndarray<> k, nb::ndarray<> v, nb::ndarray<> k_cache, nb::ndarray<> v_cache, nb::ndarray<> loc,
         float k_scale, float v_scale, uintptr_t stream) {
        set_kv_buffer({.k = to_view(k), .v = to_view(v), .k_cache = fp8_if_u8(k_cache),
                       .v_cache = fp8_if_u8(v_cache), .loc = to_view(loc), .k_scale = k_scale, .v_scale = v_scale},
                      to_stream(stream));
      },
      arg("k"), arg("v"), arg("k_cache"), arg("v_cache"), arg("loc"), nb::kw_only(), arg("k_scale") = 1.f,
      arg("v_scale") = 1.f, arg("stream") = 0, "Store K/V rows at their slots (MHA/GQA pools).");

  m.def(
      "set_mla_kv_buffer",
      [](nb::ndarray<> kv_c, nb::ndarray<> k_rope, nb::ndarray<> cache, nb::ndarray<> loc, uintptr_t stream) {
        set_mla_kv_buffer({.kv_c = to_view(kv_c), .k_rope = to_view(k_rope), .cache = to_view(cache),
                           .loc = to_view(loc)},
                          to_stream(stream));
      },
      arg("kv_c"), arg("k_rope"), arg("cache"), arg("loc"), nb::kw_only(), arg("stream") = 0,
      "Store MLA latent + rope rows (bf16 [slots, 576] or FP8-656 [slots, 656] uint8 cache).");

  m.def(
      "set_index_k",
      [](nb::ndarray<> k, nb::ndarray<> index_k_cache, nb::ndarray<> loc, int page_size, uintptr_t stream) {
        set_index_k({.k = to_view(k), .index_k_cache = to_view(index_k_cache), .loc = to_view(loc),
                     .page_size = page_size},
                    to_stream(stream));
      },
      arg("k"), arg("index_k_cache"), arg("loc"), nb::kw_only(), arg("page_size") = 64, arg("stream") = 0,
      "Quantize and store indexer keys into the paged indexer-key pool.");
}

}  // namespace attnserve::py
