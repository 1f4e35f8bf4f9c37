// DenseBackend on the CPU: for every forward mode its output (and the KV it stores) equals the
// planner + the ops composed by hand as seed 001 does; a captured-then-replayed step equals the eager
// step; multi-step draft decoding equals single-step backends; and a local + window + softcap layer
// matches a brute-force fp64 reference written from the masks' definitions.
#include <gtest/gtest.h>

#include <cmath>

#include "attnserve/ops.h"
#include "test_backend_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

constexpr int kCtx = 48, kPoolRows = 8, kLayers = 2, kMaxBs = 4;
const SpeculativeConfig kSpec{.draft_token_num = 3, .num_steps = 4, .step_id = 1};
const PlanCapacity kCap{.max_bs = kMaxBs, .max_num_tokens = 64, .max_context_len = kCtx};

enum class Kind { mha, mha_fp8, mla };
const char* kind_name(Kind k) { return k == Kind::mha ? "mha" : k == Kind::mha_fp8 ? "mha_fp8" : "mla"; }

struct Dims {
  int h_q, h_kv, d, d_v;
};
Dims dims_of(Kind k) { return k == Kind::mla ? Dims{2, 1, 576, 512} : Dims{4, 2, 16, 16}; }

KvPair make_kv(Kind k, const TestPool& pool, std::mt19937_64& g) {
  const Dims D = dims_of(k);
  if (k == Kind::mla) return KvPair::mla_pools(kLayers, pool_slots(pool), MlaCacheFormat::bf16, g);
  KvPair p = KvPair::mha_pools(kLayers, pool_slots(pool), D.h_kv, D.d, D.d_v,
                               k == Kind::mha_fp8 ? DType::fp8_e4m3 : DType::bf16, g);
  if (k == Kind::mha_fp8)
    for (auto& m : p.mha) m->set_scales(1, 0.5f, 0.25f);
  return p;
}

DenseBackendConfig make_config(Kind k, int page, int chunk, TestPool& pool, std::vector<KvLayerBuffers> kv,
                               const SpeculativeConfig& spec = kSpec) {
  const Dims D = dims_of(k);
  DenseBackendConfig c;
  c.arch = k == Kind::mla ? AttentionArch::mla : AttentionArch::mha;
  c.num_q_heads = D.h_q, c.num_kv_heads = D.h_kv, c.head_dim = D.d, c.v_head_dim = D.d_v;
  c.kv_dtype = k == Kind::mha_fp8 ? DType::fp8_e4m3 : DType::bf16;
  c.softmax_scale = 0.2f;
  c.page_size = page;
  c.attention_chunk_size = chunk;
  c.spec = spec;
  c.capacity = kCap;
  c.req_to_token = pool.view();
  c.kv_buffers = std::move(kv);
  return c;
}

// Layer 0 takes the config's defaults; layer 1 overrides everything (a local layer when chunked).
const LayerSpec kPlain{.layer_id = 0};
LayerSpec custom_layer(Kind k) {
  LayerSpec l{.layer_id = 1, .scaling = 0.3f, .logit_cap = 2.5f, .sliding_window_size = 5, .use_irope = true};
  if (k == Kind::mha_fp8) l.k_scale = 0.75f;  // overrides the pool's 0.5 (v keeps 0.25)
  return l;
}

// One step's inputs for `rows` query rows; MLA q packed or split (q_nope, q_rope separate tensors).
struct StepInputs {
  HostTensor q, q_rope, k, v, k_rope, loc;
  ForwardArgs args(const HostTensor& out) const {
    ForwardArgs a{.q = q.view,
                  .out = out.view,
                  .k = k.view,
                  .v = v.view,
                  .q_rope = q_rope.view,
                  .k_rope = k_rope.view,
                  .out_cache_loc = loc.view};
    if (q_rope.bytes.empty()) a.q_rope = {};
    if (v.bytes.empty()) a.v = {};
    if (k_rope.bytes.empty()) a.k_rope = {};
    return a;
  }
};
StepInputs make_inputs(Kind k, int64_t rows, const std::vector<int32_t>& slots, bool split, std::mt19937_64& g) {
  const Dims D = dims_of(k);
  StepInputs in;
  if (k == Kind::mla) {
    in.q = random_tensor(DType::bf16, {rows, D.h_q, split ? 512 : 576}, g, 1.0);
    if (split) in.q_rope = random_tensor(DType::bf16, {rows, D.h_q, 64}, g, 1.0);
    in.k = random_tensor(DType::bf16, {rows, 512}, g, 1.0);
    in.k_rope = random_tensor(DType::bf16, {rows, 64}, g, 1.0);
  } else {
    in.q = random_tensor(DType::bf16, {rows, D.h_q, D.d}, g, 2.0);
    in.k = random_tensor(DType::bf16, {rows, D.h_kv, D.d}, g, 1.5);
    in.v = random_tensor(DType::bf16, {rows, D.h_kv, D.d_v}, g, 1.0);
  }
  in.loc = i32_tensor(slots);
  return in;
}
HostTensor out_for(Kind k, int64_t rows) {
  const Dims D = dims_of(k);
  return poisoned(DType::bf16, {rows, D.h_q, D.d_v});
}

// Seed 001's forward_extend / forward_decode, written out: store the new K/V at out_cache_loc, pick
// the local metadata for use_irope layers, call the kernel with the layer's scale / window / softcap.
void compose_by_hand(Kind k, const DenseBackendConfig& c, const DenseMetadata& m, const KvPair& kv,
                     const LayerSpec& layer, const StepInputs& in, HostTensor& out) {
  const int l = layer.layer_id, P = c.page_size;
  const int64_t rows = in.loc.numel();
  const bool local = layer.use_irope && c.attention_chunk_size > 0;
  const LocalAttentionMetadata& la = m.local_attn_metadata;
  const TensorView page_table = local ? la.local_block_table : m.page_table;
  const TensorView cache_seqlens = local ? la.local_seqused_k : m.cache_seqlens_int32;
  const TensorView cu_q = local ? la.local_query_start_loc : m.cu_seqlens_q;
  const int max_q = local ? la.local_max_query_len : m.max_seq_len_q;
  const float scale = layer.scaling.value_or(c.softmax_scale), cap = layer.logit_cap.value_or(c.softcap);
  const int w = layer.sliding_window_size.value_or(c.sliding_window_size);
  if (k == Kind::mla) {
    const MlaKvPool& pool = *kv.mla[1];
    if (rows)
      set_mla_kv_buffer({.kv_c = in.k.view, .k_rope = in.k_rope.view, .cache = pool.cache(l), .loc = in.loc.view});
    if (!rows) return;
    const TensorView paged = pool.cache_paged(l, P);
    const bool split = !in.q_rope.bytes.empty();
    mla_attention({.q_nope = split ? in.q.view : in.q.view.slice(2, 0, 512),
                   .q_rope = split ? in.q_rope.view : in.q.view.slice(2, 512, 576),
                   .kv_cache = paged.reshape({paged.shape[0], P, 1, 576}),
                   .page_table = page_table,
                   .cache_seqlens = cache_seqlens,
                   .cu_seqlens_q = cu_q,
                   .out = out.view,
                   .max_seqlen_q = max_q,
                   .softmax_scale = scale,
                   .causal = true,
                   .window_left = w >= 0 ? w : -1,
                   .window_right = w >= 0 ? 0 : -1,
                   .softcap = cap});
    return;
  }
  const MhaKvPool& pool = *kv.mha[1];
  const float ks = layer.k_scale.value_or(pool.k_scale(l)), vs = layer.v_scale.value_or(pool.v_scale(l));
  if (rows)
    set_kv_buffer({.k = in.k.view,
                   .v = in.v.view,
                   .k_cache = pool.k(l),
                   .v_cache = pool.v(l),
                   .loc = in.loc.view,
                   .k_scale = ks,
                   .v_scale = vs});
  if (!rows) return;
  PagedAttentionArgs a{.q = in.q.view,
                       .k_cache = pool.k_paged(l, P),
                       .v_cache = pool.v_paged(l, P),
                       .page_table = page_table,
                       .cache_seqlens = cache_seqlens,
                       .cu_seqlens_q = cu_q,
                       .out = out.view,
                       .max_seqlen_q = max_q,
                       .softmax_scale = scale,
                       .causal = true,
                       .window_left = w >= 0 ? w : -1,
                       .window_right = w >= 0 ? 0 : -1,
                       .softcap = cap};
  HostTensor kd(DType::f32, {page_table.shape[0], pool.h_kv()}), vd(DType::f32, {page_table.shape[0], pool.h_kv()});
  if (k == Kind::mha_fp8) {
    for (int64_t i = 0; i < kd.numel(); ++i) kd.set(i, ks), vd.set(i, vs);
    a.k_descale = kd.view, a.v_descale = vd.view;
  }
  paged_attention(a);
}

bool all_finite(const HostTensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(t.get(i))) return false;
  return true;
}

BatchShape batch_shape() { return {.max_ctx = kCtx, .max_q = 8, .spec = kSpec}; }

}  // namespace

TEST(DenseBackend, EveryModeEqualsPlannerPlusOpsByHand) {
  auto g = rng_for_test();
  for (Kind kind : {Kind::mha, Kind::mha_fp8, Kind::mla})
    for (int P : {1, 4})
      for (int chunk : {0, 8}) {
        SCOPED_TRACE(std::string(kind_name(kind)) + " page " + std::to_string(P) + " chunk " + std::to_string(chunk));
        TestPool pool(kPoolRows, kCtx, P, g);
        KvPair kv = make_kv(kind, pool, g);
        const DenseBackendConfig cfg = make_config(kind, P, chunk, pool, kv.buffers(0));
        DenseBackend backend(cfg);
        DensePlanner planner({.page_size = P, .attention_chunk_size = chunk, .spec = kSpec}, Device::cpu());
        planner.init(kCap);
        for (ForwardMode mode : kAllModes) {
          SCOPED_TRACE(to_string(mode));
          const int bs = mode == ForwardMode::idle ? 0 : rand_int(g, 1, kMaxBs);
          const TestBatch b = random_batch(g, mode, bs, batch_shape(), pool);
          const BatchSpec spec = b.spec(pool.view());
          const int64_t rows = batch_rows(b, kSpec);
          const std::vector<int32_t> slots = new_token_slots(b, pool, kSpec);
          backend.init_forward_metadata(spec);
          const DenseMetadata& m = planner.plan(spec);
          EXPECT_EQ(backend.forward_metadata().num_q_rows, rows);
          for (const LayerSpec& layer : {kPlain, custom_layer(kind)}) {
            SCOPED_TRACE("layer " + std::to_string(layer.layer_id));
            const StepInputs in = make_inputs(kind, rows, slots, /*split=*/layer.layer_id == 1, g);
            HostTensor out_backend = out_for(kind, rows), out_hand = out_for(kind, rows);
            const bool decode = mode == ForwardMode::decode || mode == ForwardMode::draft_decode;
            const TensorView ret = decode ? backend.forward_decode(in.args(out_backend), layer)
                                          : backend.forward_extend(in.args(out_backend), layer);
            EXPECT_EQ(ret.data, out_backend.view.data);
            compose_by_hand(kind, cfg, m, kv, layer, in, out_hand);
            EXPECT_TRUE(all_finite(out_backend)) << "every output element written";
            EXPECT_EQ(bytes_of(out_backend.view), bytes_of(out_hand.view));
            EXPECT_TRUE(kv.same_contents()) << "the backend stores what the hand path stores";
          }
        }
      }
}

// The engine's static graph inputs: rows of the captured batch, live rows first, then padding rows
// whose tokens go to slot 0 (the padding page).
struct GraphInputs {
  StepInputs st;
  HostTensor out;
  void load(const StepInputs& live, int64_t live_rows) {
    for (auto [dst, src] : {std::pair{&st.q, &live.q},
                            {&st.q_rope, &live.q_rope},
                            {&st.k, &live.k},
                            {&st.v, &live.v},
                            {&st.k_rope, &live.k_rope},
                            {&st.loc, &live.loc}})
      if (!src->bytes.empty() && live_rows)
        std::memcpy(dst->bytes.data(), src->bytes.data(), std::size_t(src->view.nbytes()));
    for (int64_t i = live_rows; i < st.loc.numel(); ++i) st.loc.ptr<int32_t>()[i] = 0;
  }
};

TEST(DenseBackend, CapturedThenReplayedStepEqualsEagerStep) {
  auto g = rng_for_test();
  constexpr int G = kMaxBs;
  for (Kind kind : {Kind::mha, Kind::mla}) {
    SCOPED_TRACE(kind_name(kind));
    const int P = 4, chunk = 8;
    TestPool pool(kPoolRows, kCtx, P, g);
    KvPair kv = make_kv(kind, pool, g);
    DenseBackend graph(make_config(kind, P, chunk, pool, kv.buffers(0)));
    DenseBackend eager(make_config(kind, P, chunk, pool, kv.buffers(1)));
    graph.init_cuda_graph_state(G, kCap.max_num_tokens);
    for (ForwardMode mode : kGraphModes) {
      SCOPED_TRACE(to_string(mode));
      const int per =
          mode == ForwardMode::target_verify || mode == ForwardMode::draft_extend ? kSpec.draft_token_num : 1;
      const int64_t graph_rows = int64_t(G) * per;
      graph.init_forward_metadata_capture_cuda_graph(G, int(graph_rows), mode);
      GraphInputs gi{make_inputs(kind, graph_rows, std::vector<int32_t>(std::size_t(graph_rows), 0), false, g),
                     out_for(kind, graph_rows)};
      for (const LayerSpec& layer : {kPlain, custom_layer(kind)}) graph.forward(gi.st.args(gi.out), layer);  // capture
      for (int rep = 0; rep < 3; ++rep) {
        const TestBatch b = random_batch(g, mode, rand_int(g, 1, G), batch_shape(), pool);
        const BatchSpec spec = b.spec(pool.view());
        const int64_t rows = batch_rows(b, kSpec);
        graph.init_forward_metadata_replay_cuda_graph(G, spec);
        eager.init_forward_metadata(spec);
        for (const LayerSpec& layer : {kPlain, custom_layer(kind)}) {
          const StepInputs in = make_inputs(kind, rows, new_token_slots(b, pool, kSpec), false, g);
          gi.load(in, rows);
          HostTensor out_eager = out_for(kind, rows);
          graph.forward(gi.st.args(gi.out), layer);  // the replayed graph: same calls, same buffers
          eager.forward(in.args(out_eager), layer);
          EXPECT_EQ(row_bytes(gi.out.view, 0, rows), bytes_of(out_eager.view)) << "rep " << rep;
        }
      }
    }
  }
}

TEST(DenseBackend, MultiStepDraftDecodeEqualsSingleSteps) {
  auto g = rng_for_test();
  for (Kind kind : {Kind::mha, Kind::mla})
    for (bool graphs : {false, true}) {
      SCOPED_TRACE(std::string(kind_name(kind)) + (graphs ? " graphs" : " eager"));
      const int P = 2;
      TestPool pool(kPoolRows, kCtx, P, g);
      KvPair kv = make_kv(kind, pool, g);
      DenseMultiStepBackend multi(make_config(kind, P, 0, pool, kv.buffers(0)));
      ASSERT_EQ(multi.num_backends(), kSpec.num_steps - 1);
      std::vector<DenseBackend> single;
      for (int i = 0; i + 1 < kSpec.num_steps; ++i) {
        SpeculativeConfig s = kSpec;
        s.step_id = i;
        single.emplace_back(make_config(kind, P, 0, pool, kv.buffers(1), s));
      }
      const int bs = 3;
      const TestBatch b = random_batch(g, ForwardMode::draft_decode, bs, batch_shape(), pool);
      const BatchSpec spec = b.spec(pool.view());
      if (graphs) {
        multi.init_cuda_graph_state(kMaxBs, kCap.max_num_tokens);
        multi.init_forward_metadata_capture_cuda_graph(bs);
        multi.init_forward_metadata_replay_cuda_graph(bs, spec);
      } else {
        multi.init_forward_metadata(spec);
      }
      for (int i = 0; i + 1 < kSpec.num_steps; ++i) {
        SCOPED_TRACE("step " + std::to_string(i));
        single[std::size_t(i)].init_forward_metadata(spec);
        std::vector<int32_t> step_slots;  // step i's draft tokens: draft_slots[:, i]
        for (int r = 0; r < bs; ++r) step_slots.push_back(b.drafts[std::size_t(r * kSpec.num_steps + i)]);
        const StepInputs in = make_inputs(kind, bs, step_slots, false, g);
        HostTensor out_multi = out_for(kind, bs), out_single = out_for(kind, bs);
        for (const LayerSpec& layer : {kPlain, custom_layer(kind)}) {
          multi.step(i).forward_decode(in.args(out_multi), layer);
          single[std::size_t(i)].forward_decode(in.args(out_single), layer);
          EXPECT_EQ(bytes_of(out_multi.view), bytes_of(out_single.view));
        }
        EXPECT_EQ(multi.step(i).forward_metadata().cache_seqlens_int32.shape[0], bs);
      }
      EXPECT_TRUE(kv.same_contents());
    }
}

// A local + sliding-window + softcap layer against the definition: the row at position p sees key j
// iff j <= p, j >= floor(p / C) * C and j >= p - w; score = cap * tanh(scale * q.k / cap).
TEST(DenseBackend, LocalWindowSoftcapLayerMatchesBruteForce) {
  auto g = rng_for_test();
  const int P = 2, C = 8, W = 5;
  const float scale = 0.3f, cap = 2.5f;
  TestPool pool(kPoolRows, kCtx, P, g);
  KvPair kv = make_kv(Kind::mha, pool, g);
  DenseBackend backend(make_config(Kind::mha, P, C, pool, kv.buffers(0)));
  const MhaKvPool& cache = *kv.mha[0];
  const LayerSpec layer{.layer_id = 1, .scaling = scale, .logit_cap = cap, .sliding_window_size = W, .use_irope = true};
  for (ForwardMode mode : {ForwardMode::extend, ForwardMode::decode, ForwardMode::target_verify}) {
    SCOPED_TRACE(to_string(mode));
    const TestBatch b = random_batch(g, mode, 3, batch_shape(), pool);
    const int64_t rows = batch_rows(b, kSpec);
    const StepInputs in = make_inputs(Kind::mha, rows, new_token_slots(b, pool, kSpec), false, g);
    HostTensor out = out_for(Kind::mha, rows);
    backend.init_forward_metadata(b.spec(pool.view()));
    backend.forward(in.args(out), layer);

    const Dims D = dims_of(Kind::mha);
    const int group = D.h_q / D.h_kv;
    auto reference = [&]<typename T>(T) {
      std::vector<double> ref;
      int64_t row = 0;
      for (int r = 0; r < b.bs(); ++r) {
        const ReqShape s = request_shape(b, r, kSpec);
        for (int t = 0; t < s.q; ++t, ++row) {
          const int p = s.kv - s.q + t;
          for (int h = 0; h < D.h_q; ++h) {
            std::vector<T> score;
            std::vector<int32_t> keys;
            for (int j = std::max({0, p / C * C, p - W}); j <= p; ++j) {
              const int32_t slot = expected_slot(b, pool, r, j);
              T dot = 0;
              for (int e = 0; e < D.d; ++e)
                dot += T(ref_at(in.q.view, row, h, e)) * T(ref_at(cache.k(1), slot, h / group, e));
              score.push_back(T(cap) * std::tanh(T(scale) * dot / T(cap)));
              keys.push_back(slot);
            }
            T mx = score[0], sum = 0;
            for (T x : score) mx = std::max(mx, x);
            for (T& x : score) sum += (x = std::exp(x - mx));
            for (int e = 0; e < D.d_v; ++e) {
              T acc = 0;
              for (std::size_t i = 0; i < keys.size(); ++i)
                acc += score[i] * T(ref_at(cache.v(1), keys[i], h / group, e));
              ref.push_back(double(acc / sum));
            }
          }
        }
      }
      return ref;
    };
    const std::vector<double> ref64 = reference(double{}), ref32 = reference(float{});
    const double tol = tolerance_by_rule(rel_l2(ref32, ref64), DType::bf16);
    EXPECT_LE(rel_l2(to_doubles(out), ref64), tol);
  }
}
