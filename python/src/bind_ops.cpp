// Python bindings of the ops: thin, DLPack in, keyword arguments named as in the C++ Args structs.
// Outputs are passed in (no hidden allocations); `stream` is a raw cudaStream_t (0 = default).
// Ops that take a workspace accept query_workspace=True: validate, return the bytes needed, run nothing.
#include "attnserve/ops.h"
#include "convert.h"

namespace attnserve::py {
namespace {

using nb::arg;

// MHA caches, indexer keys and quantized activations travel as uint8 when the framework has no fp8.
template <class... Ts>
TensorView fp8_if_u8(const nb::ndarray<Ts...>& a) {
  TensorView v = to_view(a);
  return v.dtype == DType::u8 ? v.with_dtype(DType::fp8_e4m3) : v;
}
template <class... Ts>
TensorView fp8_if_u8(const std::optional<nb::ndarray<Ts...>>& a) {
  return a ? fp8_if_u8(*a) : TensorView{};
}

Workspace to_workspace(const OptArray& a) {
  if (!a) return {};
  TensorView v = to_view(*a);
  return Workspace{v.data, v.nbytes()};
}

}  // namespace

void bind_ops(nb::module_& m) {
  m.def(
      "paged_attention",
      [](RoArray q, RoArray k_cache, RoArray v_cache, RoArray page_table, RoArray cache_seqlens, RoArray cu_seqlens_q,
         Array out, float softmax_scale, OptArray lse, OptRoArray k_descale, OptRoArray v_descale, int max_seqlen_q,
         bool causal, int window_left, int window_right, float softcap, bool deterministic, OptArray workspace,
         uintptr_t stream, bool query_workspace, OptRoArray q_descale) -> nb::object {
        PagedAttentionArgs a{.q = fp8_if_u8(q),
                             .k_cache = fp8_if_u8(k_cache),
                             .v_cache = fp8_if_u8(v_cache),
                             .page_table = to_view(page_table),
                             .cache_seqlens = to_view(cache_seqlens),
                             .cu_seqlens_q = to_view(cu_seqlens_q),
                             .out = to_view(out),
                             .lse = to_view(lse),
                             .q_descale = to_view(q_descale),
                             .k_descale = to_view(k_descale),
                             .v_descale = to_view(v_descale),
                             .max_seqlen_q = max_seqlen_q,
                             .softmax_scale = softmax_scale,
                             .causal = causal,
                             .window_left = window_left,
                             .window_right = window_right,
                             .softcap = softcap,
                             .deterministic = deterministic};
        if (query_workspace) return nb::int_(paged_attention_workspace_size(a, query_device_caps(a.q.device)));
        paged_attention(a, to_workspace(workspace), to_stream(stream));
        return nb::none();
      },
      arg("q"), arg("k_cache"), arg("v_cache"), arg("page_table"), arg("cache_seqlens"), arg("cu_seqlens_q"),
      arg("out"), nb::kw_only(), arg("softmax_scale"), arg("lse") = nb::none(), arg("k_descale") = nb::none(),
      arg("v_descale") = nb::none(), arg("max_seqlen_q") = 0, arg("causal") = true, arg("window_left") = -1,
      arg("window_right") = -1, arg("softcap") = 0.f, arg("deterministic") = false, arg("workspace") = nb::none(),
      arg("stream") = 0, arg("query_workspace") = false, arg("q_descale") = nb::none(),
      "Paged attention with varlen queries (GQA/MQA, causal bottom-right, window, softcap, fp8 KV, LSE).\n\n"
      "q [total_q, h_q, d] bf16 | f16 | fp8 e4m3 (f32 on the CPU; fp8 needs fp8 caches and out bf16 | f16);\n"
      "k_cache [num_pages, page_size, h_kv, d] and\n"
      "v_cache [num_pages, page_size, h_kv, d_v]: q's dtype or fp8 e4m3 (ml_dtypes.float8_e4m3fn or uint8);\n"
      "page_table [b, max_pages] i32; cache_seqlens [b] i32; cu_seqlens_q [b + 1] i32;\n"
      "out [total_q, h_q, d_v] q's dtype (written); lse [total_q, h_q] f32 (written, optional);\n"
      "q_descale / k_descale / v_descale [b, h_kv] f32 (fp8 q / caches). Returns None (the workspace bytes with\n"
      "query_workspace=True).");

  m.def(
      "mla_attention",
      [](RoArray q_nope, RoArray q_rope, RoArray kv_cache, RoArray page_table, RoArray cache_seqlens,
         RoArray cu_seqlens_q, Array out, float softmax_scale, OptArray lse, int max_seqlen_q, bool causal,
         int window_left, int window_right, float softcap, bool deterministic, OptArray workspace, uintptr_t stream,
         bool query_workspace) -> nb::object {
        MlaAttentionArgs a{.q_nope = to_view(q_nope),
                           .q_rope = to_view(q_rope),
                           .kv_cache = to_view(kv_cache),
                           .page_table = to_view(page_table),
                           .cache_seqlens = to_view(cache_seqlens),
                           .cu_seqlens_q = to_view(cu_seqlens_q),
                           .out = to_view(out),
                           .lse = to_view(lse),
                           .max_seqlen_q = max_seqlen_q,
                           .softmax_scale = softmax_scale,
                           .causal = causal,
                           .window_left = window_left,
                           .window_right = window_right,
                           .softcap = softcap,
                           .deterministic = deterministic};
        if (query_workspace) return nb::int_(mla_attention_workspace_size(a, query_device_caps(a.q_nope.device)));
        mla_attention(a, to_workspace(workspace), to_stream(stream));
        return nb::none();
      },
      arg("q_nope"), arg("q_rope"), arg("kv_cache"), arg("page_table"), arg("cache_seqlens"), arg("cu_seqlens_q"),
      arg("out"), nb::kw_only(), arg("softmax_scale"), arg("lse") = nb::none(), arg("max_seqlen_q") = 0,
      arg("causal") = true, arg("window_left") = -1, arg("window_right") = -1, arg("softcap") = 0.f,
      arg("deterministic") = false, arg("workspace") = nb::none(), arg("stream") = 0, arg("query_workspace") = false,
      "MLA attention, absorbed form (score = q_nope.c_kv + q_rope.k_rope, value = c_kv).\n\n"
      "q_nope [total_q, h_q, d_v] bf16 (f32 on the CPU); q_rope [total_q, h_q, d_rope];\n"
      "kv_cache [num_pages, page_size, 1, d_v + d_rope] q's dtype, or [num_pages, page_size, 1, 656] uint8\n"
      "(FP8-656, as MlaKvPool(fp8_656) stores it; d_v 512, d_rope 64); page_table [b, max_pages] i32;\n"
      "cache_seqlens [b] i32; cu_seqlens_q [b + 1] i32; out [total_q, h_q, d_v] (written);\n"
      "lse [total_q, h_q] f32 (written, optional).");

  m.def(
      "merge_state",
      [](RoArray v_a, RoArray s_a, RoArray v_b, RoArray s_b, Array v_out, OptArray s_out, uintptr_t stream) {
        merge_state({.v_a = to_view(v_a),
                     .s_a = to_view(s_a),
                     .v_b = to_view(v_b),
                     .s_b = to_view(s_b),
                     .v_out = to_view(v_out),
                     .s_out = to_view(s_out)},
                    to_stream(stream));
      },
      arg("v_a"), arg("s_a"), arg("v_b"), arg("s_b"), arg("v_out"), arg("s_out") = nb::none(), nb::kw_only(),
      arg("stream") = 0,
      "Merge two partial attention states (out, lse) over disjoint key sets.\n\n"
      "v_a, v_b [tokens, heads, d] bf16 | f16 | f32; s_a, s_b [tokens, heads] f32 (natural-log LSE; an\n"
      "infinite LSE of either sign means an empty part); v_out like v_a (written);\n"
      "s_out [tokens, heads] f32 (written, optional).");

  m.def(
      "merge_states",
      [](RoArray v_parts, RoArray s_parts, Array v_out, OptArray s_out, uintptr_t stream) {
        merge_states({.v_parts = to_view(v_parts),
                      .s_parts = to_view(s_parts),
                      .v_out = to_view(v_out),
                      .s_out = to_view(s_out)},
                     to_stream(stream));
      },
      arg("v_parts"), arg("s_parts"), arg("v_out"), arg("s_out") = nb::none(), nb::kw_only(), arg("stream") = 0,
      "Merge n partial attention states.\n\n"
      "v_parts [n, tokens, heads, d] bf16 | f16 | f32; s_parts [n, tokens, heads] f32 (an infinite LSE\n"
      "of either sign: an empty part); v_out [tokens, heads, d] (written); s_out [tokens, heads] f32\n"
      "(written, optional).");

  m.def(
      "sparse_mla",
      [](RoArray q, RoArray kv, RoArray indices, Array out, float softmax_scale, OptRoArray topk_length,
         OptRoArray attn_sink, OptArray lse, OptArray max_logits, OptArray workspace, uintptr_t stream,
         bool query_workspace, bool deterministic) -> nb::object {
        SparseMlaArgs a{.q = to_view(q),
                        .kv = to_view(kv),
                        .indices = to_view(indices),
                        .out = to_view(out),
                        .topk_length = to_view(topk_length),
                        .attn_sink = to_view(attn_sink),
                        .lse = to_view(lse),
                        .max_logits = to_view(max_logits),
                        .softmax_scale = softmax_scale,
                        .deterministic = deterministic};
        if (query_workspace) return nb::int_(sparse_mla_workspace_size(a, query_device_caps(a.q.device)));
        sparse_mla(a, to_workspace(workspace), to_stream(stream));
        return nb::none();
      },
      arg("q"), arg("kv"), arg("indices"), arg("out"), nb::kw_only(), arg("softmax_scale"),
      arg("topk_length") = nb::none(), arg("attn_sink") = nb::none(), arg("lse") = nb::none(),
      arg("max_logits") = nb::none(), arg("workspace") = nb::none(), arg("stream") = 0, arg("query_workspace") = false,
      arg("deterministic") = false,
      "Sparse MLA over top-k slots.\n\nq [rows, h_q, 576] bf16 (f32 on the CPU); kv [num_slots, 576] bf16 or "
      "[num_slots, 656] uint8 (FP8-656); indices [rows, topk] i32 slots (-1 skipped); out [rows, h_q, 512] q's "
      "dtype (written); topk_length [rows] i32; attn_sink [h_q] f32; lse, max_logits [rows, h_q] f32 (written, "
      "optional).\n\nOn CUDA, "
      "few rows split each row's top-k list across CTAs: pass the workspace that query_workspace=True asks "
      "for; deterministic=True never splits (bits independent of the batch).");

  m.def(
      "quantize_fp8_groups",
      [](RoArray x, Array out, Array scales, int group, uintptr_t stream) {
        quantize_fp8_groups({.x = to_view(x), .out = fp8_if_u8(out), .scales = to_view(scales), .group = group},
                            to_stream(stream));
      },
      arg("x"), arg("out"), arg("scales"), nb::kw_only(), arg("group") = 128, arg("stream") = 0,
      "Per-group FP8 e4m3 quantization with power-of-two scales.\n\n"
      "x [rows, dim] bf16 | f16 | f32 (dim % group == 0); out [rows, dim] fp8 e4m3 (float8_e4m3fn or\n"
      "uint8, written); scales [rows, dim / group] f32 (written).");

  m.def(
      "indexer_ragged",
      [](RoArray q, RoArray weights, RoArray k, RoArray k_scale, RoArray ks, RoArray ke, Array logits,
         OptRoArray q_scale, OptArray workspace, uintptr_t stream) {
        indexer_ragged({.q = fp8_if_u8(q),
                        .weights = to_view(weights),
                        .k = fp8_if_u8(k),
                        .k_scale = to_view(k_scale),
                        .ks = to_view(ks),
                        .ke = to_view(ke),
                        .logits = to_view(logits),
                        .q_scale = to_view(q_scale)},
                       to_workspace(workspace), to_stream(stream));
      },
      arg("q"), arg("weights"), arg("k"), arg("k_scale"), arg("ks"), arg("ke"), arg("logits"), nb::kw_only(),
      arg("q_scale") = nb::none(), arg("workspace") = nb::none(), arg("stream") = 0,
      "Lightning-indexer scores, ragged (prefill) form.\n\n"
      "q [rows, n_heads, 128] fp8 e4m3 (or uint8); weights [rows, n_heads] f32; k [num_keys, 128] fp8;\n"
      "k_scale [num_keys] f32; ks, ke [rows] i32 (key window [ks, ke) of each row);\n"
      "logits [rows, num_keys] f32 (written; -inf outside the window); q_scale [rows, n_heads] f32.");

  m.def(
      "indexer_paged",
      [](RoArray q, RoArray weights, RoArray index_k_cache, RoArray page_table, RoArray seqlens, Array logits,
         int page_size, int next_n, OptRoArray q_scale, OptArray workspace, uintptr_t stream) {
        indexer_paged({.q = fp8_if_u8(q),
                       .weights = to_view(weights),
                       .index_k_cache = to_view(index_k_cache),
                       .page_table = to_view(page_table),
                       .seqlens = to_view(seqlens),
                       .logits = to_view(logits),
                       .page_size = page_size,
                       .next_n = next_n,
                       .q_scale = to_view(q_scale)},
                      to_workspace(workspace), to_stream(stream));
      },
      arg("q"), arg("weights"), arg("index_k_cache"), arg("page_table"), arg("seqlens"), arg("logits"), nb::kw_only(),
      arg("page_size") = 64, arg("next_n") = 1, arg("q_scale") = nb::none(), arg("workspace") = nb::none(),
      arg("stream") = 0,
      "Lightning-indexer scores, paged (decode / verify / draft extend) form.\n\n"
      "q [b * next_n, n_heads, 128] fp8 e4m3 (or uint8); weights [b * next_n, n_heads] f32;\n"
      "index_k_cache [num_pages, page_size * 132] uint8 (IndexerKeyPool.cache); page_table [b, max_pages] i32;\n"
      "seqlens [b] i32 (keys of each request including its next_n new tokens: 0 or >= next_n);\n"
      "logits [b * next_n, max_context] f32 (written); q_scale [b * next_n, n_heads] f32.");

  nb::enum_<TopkTransform>(m, "TopkTransform")
      .value("none", TopkTransform::none)
      .value("decode", TopkTransform::decode)
      .value("prefill", TopkTransform::prefill)
      .value("ragged", TopkTransform::ragged);

  m.def(
      "topk",
      [](RoArray scores, RoArray lengths, Array out, int k, OptRoArray row_starts, TopkTransform transform,
         OptRoArray page_table_1, OptRoArray cu_seqlens_q, OptRoArray offsets, OptArray workspace, uintptr_t stream,
         bool query_workspace) -> nb::object {
        TopkArgs a{.scores = to_view(scores),
                   .lengths = to_view(lengths),
                   .out = to_view(out),
                   .topk = k,
                   .row_starts = to_view(row_starts),
                   .transform = transform,
                   .page_table_1 = to_view(page_table_1),
                   .cu_seqlens_q = to_view(cu_seqlens_q),
                   .offsets = to_view(offsets)};
        if (query_workspace) return nb::int_(topk_workspace_size(a, query_device_caps(a.scores.device)));
        topk(a, to_workspace(workspace), to_stream(stream));
        return nb::none();
      },
      arg("scores"), arg("lengths"), arg("out"), nb::kw_only(), arg("topk") = 2048, arg("row_starts") = nb::none(),
      arg("transform") = TopkTransform::none, arg("page_table_1") = nb::none(), arg("cu_seqlens_q") = nb::none(),
      arg("offsets") = nb::none(), arg("workspace") = nb::none(), arg("stream") = 0, arg("query_workspace") = false,
      "Exact top-k per row, optionally emitting KV slots (decode / prefill / ragged transforms).\n\n"
      "scores [rows, width] f32; lengths [rows] i32 (row_starts + lengths <= width); out [rows, topk] i32\n"
      "(written: positions, or slots with a transform; -1 past a row's length); row_starts [rows] i32;\n"
      "page_table_1 (decode [rows, W], prefill [b, W]) i32; cu_seqlens_q [b + 1] i32; offsets [rows] i32.");

  m.def(
      "set_kv_buffer",
      [](RoArray k, RoArray v, Array k_cache, Array v_cache, RoArray loc, float k_scale, float v_scale,
         uintptr_t stream) {
        set_kv_buffer({.k = to_view(k),
                       .v = to_view(v),
                       .k_cache = fp8_if_u8(k_cache),
                       .v_cache = fp8_if_u8(v_cache),
                       .loc = to_view(loc),
                       .k_scale = k_scale,
                       .v_scale = v_scale},
                      to_stream(stream));
      },
      arg("k"), arg("v"), arg("k_cache"), arg("v_cache"), arg("loc"), nb::kw_only(), arg("k_scale") = 1.f,
      arg("v_scale") = 1.f, arg("stream") = 0,
      "Store K/V rows at their slots (MHA/GQA pools).\n\n"
      "k [n, h_kv, d], v [n, h_kv, d_v] bf16 | f16 | f32; k_cache [num_slots, h_kv, d] and v_cache\n"
      "[num_slots, h_kv, d_v] bf16 | f16 | fp8 e4m3 (MhaKvPool.k / .v, written); loc [n] i32 | i64 slots.");

  m.def(
      "set_mla_kv_buffer",
      [](RoArray kv_c, RoArray k_rope, Array cache, RoArray loc, uintptr_t stream) {
        set_mla_kv_buffer(
            {.kv_c = to_view(kv_c), .k_rope = to_view(k_rope), .cache = to_view(cache), .loc = to_view(loc)},
            to_stream(stream));
      },
      arg("kv_c"), arg("k_rope"), arg("cache"), arg("loc"), nb::kw_only(), arg("stream") = 0,
      "Store MLA latent + rope rows.\n\n"
      "kv_c [n, 512], k_rope [n, 64] bf16 | f32; cache [num_slots, 576] bf16 or [num_slots, 656] uint8\n"
      "(FP8-656; MlaKvPool.cache, written); loc [n] i32 | i64.");

  m.def(
      "set_index_k",
      [](RoArray k, Array index_k_cache, RoArray loc, int page_size, uintptr_t stream) {
        set_index_k(
            {.k = to_view(k), .index_k_cache = to_view(index_k_cache), .loc = to_view(loc), .page_size = page_size},
            to_stream(stream));
      },
      arg("k"), arg("index_k_cache"), arg("loc"), nb::kw_only(), arg("page_size") = 64, arg("stream") = 0,
      "Quantize and store indexer keys into the paged indexer-key pool.\n\n"
      "k [n, 128] bf16 | f32; index_k_cache [num_pages, page_size * 132] uint8 (IndexerKeyPool.cache,\n"
      "written); loc [n] i32 | i64 token slots.");
}

}  // namespace attnserve::py
