// SparseBackend on the CPU: for every forward mode, kernel path (sparse_bf16, sparse_fp8, gather) and
// top-k form (fused slots, positions), topk_transform and forward equal the sparse planner + the ops
// composed by hand as the seeds' NSA backend does; captured-then-replayed steps equal eager steps;
// multi-step draft decoding equals single steps; the indexer metadata views the planner's arrays.
#include <gtest/gtest.h>

#include "attnserve/ops.h"
#include "test_backend_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

constexpr int kCtx = 40, kPoolRows = 8, kLayers = 2, kMaxBs = 4, kTopk = 12, kHeads = 2;
const SpeculativeConfig kSpec{.draft_token_num = 3, .num_steps = 4, .step_id = 1};
const PlanCapacity kCap{.max_bs = kMaxBs, .max_num_tokens = 48, .max_context_len = kCtx};

struct Variant {
  NsaImpl impl;
  bool fuse;
};
std::string name_of(const Variant& v) { return std::string(to_string(v.impl)) + (v.fuse ? " fused" : " positions"); }
MlaCacheFormat format_of(NsaImpl impl) {
  return impl == NsaImpl::sparse_fp8 ? MlaCacheFormat::fp8_656 : MlaCacheFormat::bf16;
}

SparseBackendConfig make_config(const Variant& v, int page, TestPool& pool, std::vector<KvLayerBuffers> kv,
                                const SpeculativeConfig& spec = kSpec) {
  SparseBackendConfig c;
  c.num_q_heads = kHeads;
  c.kv_cache_format = format_of(v.impl);
  c.index_topk = kTopk;
  c.softmax_scale = 0.1f;
  c.page_size = page;
  c.prefill_impl = c.decode_impl = v.impl;
  c.fuse_topk = v.fuse;
  c.spec = spec;
  c.capacity = kCap;
  c.req_to_token = pool.view();
  c.kv_buffers = std::move(kv);
  return c;
}

const LayerSpec kPlain{.layer_id = 0};
const LayerSpec kScaled{.layer_id = 1, .scaling = 0.135f};

bool table_row_per_query_row(ForwardMode m) {
  return m == ForwardMode::decode || m == ForwardMode::draft_decode || m == ForwardMode::target_verify;
}

// Top-k by hand: positions from the plain top-k over each row's expanded length, then slots through
// page_table_1 (the row's own table row, or its request's through cu_seqlens_q).
struct HandTopk {
  std::vector<int32_t> positions, slots;
};
HandTopk hand_topk(const SparseMetadata& m, const HostTensor& logits) {
  const int64_t rows = m.num_rows;
  HostTensor pos(DType::i32, {rows, kTopk});
  topk({.scores = logits.view, .lengths = m.nsa_seqlens_expanded, .out = pos.view, .topk = kTopk});
  HandTopk h;
  h.positions.assign(pos.ptr<int32_t>(), pos.ptr<int32_t>() + rows * kTopk);
  const std::vector<int32_t> t1 = read_i32(m.page_table_1), cu = read_i32(m.cu_seqlens_q);
  const int64_t w = m.page_table_1.shape[1];
  for (int64_t i = 0; i < rows; ++i) {
    int64_t r = i;
    if (!table_row_per_query_row(m.mode))
      for (r = 0; cu[std::size_t(r) + 1] <= i; ++r) {
      }
    for (int j = 0; j < kTopk; ++j) {
      const int32_t p = h.positions[std::size_t(i * kTopk + j)];
      h.slots.push_back(p < 0 ? -1 : t1[std::size_t(r * w + p)]);
    }
  }
  return h;
}

struct StepInputs {
  HostTensor q, q_rope, k, k_rope, loc, logits;
  bool halves = false;  // q / q_rope as the two halves of the packed q
  ForwardArgs args(const HostTensor& out, const TensorView& topk) const {
    ForwardArgs a{.q = q.view,
                  .out = out.view,
                  .k = k.view,
                  .k_rope = k_rope.view,
                  .out_cache_loc = loc.view,
                  .topk_indices = topk};
    if (halves) a.q = q.view.slice(2, 0, 512), a.q_rope = q.view.slice(2, 512, 576);
    return a;
  }
};
StepInputs make_inputs(int64_t rows, const std::vector<int32_t>& slots, std::mt19937_64& g) {
  return {random_tensor(DType::bf16, {rows, kHeads, 576}, g),
          HostTensor(),
          random_tensor(DType::bf16, {rows, 512}, g),
          random_tensor(DType::bf16, {rows, 64}, g),
          i32_tensor(slots),
          random_tensor(DType::f32, {rows, kCtx + 3}, g, 3.0)};
}
HostTensor out_for(int64_t rows) { return poisoned(DType::bf16, {rows, kHeads, 512}); }

// The seeds' forward_extend / forward_decode over slots computed by hand.
void compose_by_hand(const Variant& v, const SparseMetadata& m, const KvPair& kv, const LayerSpec& layer,
                     const StepInputs& in, const std::vector<int32_t>& slots, HostTensor& out) {
  const int64_t rows = in.loc.numel();
  const TensorView cache = kv.mla[1]->cache(layer.layer_id);
  if (!rows) return;
  set_mla_kv_buffer({.kv_c = in.k.view, .k_rope = in.k_rope.view, .cache = cache, .loc = in.loc.view});
  HostTensor idx(DType::i32, {rows, kTopk});
  std::memcpy(idx.bytes.data(), slots.data(), slots.size() * sizeof(int32_t));
  const float scale = layer.scaling.value_or(0.1f);
  if (v.impl == NsaImpl::gather) {
    mla_attention({.q_nope = in.q.view.slice(2, 0, 512),
                   .q_rope = in.q.view.slice(2, 512, 576),
                   .kv_cache = cache.reshape({cache.shape[0], 1, 1, 576}),
                   .page_table = idx.view,
                   .cache_seqlens = m.nsa_cache_seqlens_int32,
                   .cu_seqlens_q = m.nsa_cu_seqlens_q,
                   .out = out.view,
                   .max_seqlen_q = 1,
                   .softmax_scale = scale});
  } else {
    sparse_mla({.q = in.q.view,
                .kv = cache,
                .indices = idx.view,
                .out = out.view,
                .topk_length = m.nsa_cache_seqlens_int32,
                .softmax_scale = scale});
  }
}

std::vector<int32_t> as_vector(const TensorView& v) { return read_i32(v); }

BatchShape batch_shape() { return {.max_ctx = kCtx, .max_q = 8, .spec = kSpec}; }

const Variant kVariants[] = {{NsaImpl::sparse_bf16, true},
                             {NsaImpl::sparse_fp8, true},
                             {NsaImpl::gather, true},
                             {NsaImpl::sparse_bf16, false},
                             {NsaImpl::gather, false}};

}  // namespace

TEST(SparseBackend, EveryModeAndPathEqualsPlannerPlusOpsByHand) {
  auto g = rng_for_test();
  for (const Variant& v : kVariants)
    for (int P : {1, 4}) {
      SCOPED_TRACE(name_of(v) + " page " + std::to_string(P));
      TestPool pool(kPoolRows, kCtx, P, g);
      KvPair kv = KvPair::mla_pools(kLayers, pool_slots(pool), format_of(v.impl), g);
      SparseBackend backend(make_config(v, P, pool, kv.buffers(0)));
      EXPECT_EQ(backend.resolved_prefill_impl(), v.impl);
      SparsePlanner planner({.page_size = P, .topk = kTopk, .spec = kSpec}, Device::cpu());
      planner.init(kCap);
      for (ForwardMode mode : kAllModes) {
        SCOPED_TRACE(to_string(mode));
        const TestBatch b =
            random_batch(g, mode, mode == ForwardMode::idle ? 0 : rand_int(g, 1, kMaxBs), batch_shape(), pool);
        const BatchSpec spec = b.spec(pool.view());
        const int64_t rows = batch_rows(b, kSpec);
        backend.init_forward_metadata(spec);
        const SparseMetadata& m = planner.plan(spec);
        ASSERT_EQ(backend.forward_metadata().num_rows, rows);
        EXPECT_EQ(as_vector(backend.get_seqlens_expanded()), as_vector(m.nsa_seqlens_expanded));
        EXPECT_EQ(as_vector(backend.get_seqlens_int32()), as_vector(m.cache_seqlens_int32));
        EXPECT_EQ(as_vector(backend.get_page_table_64()), as_vector(m.real_page_table));
        for (const LayerSpec& layer : {kPlain, kScaled}) {
          SCOPED_TRACE("layer " + std::to_string(layer.layer_id));
          StepInputs in = make_inputs(rows, new_token_slots(b, pool, kSpec), g);
          in.halves = layer.layer_id == 1;
          const HandTopk hand = hand_topk(m, in.logits);
          const TensorView got = backend.get_indexer_metadata().topk_transform(in.logits.view, kTopk);
          ASSERT_EQ(got.shape[0], rows);
          EXPECT_EQ(as_vector(got), v.fuse ? hand.slots : hand.positions);
          HostTensor out_backend = out_for(rows), out_hand = out_for(rows);
          backend.forward(in.args(out_backend, got), layer);
          compose_by_hand(v, m, kv, layer, in, hand.slots, out_hand);
          EXPECT_EQ(bytes_of(out_backend.view), bytes_of(out_hand.view));
          EXPECT_TRUE(kv.same_contents());
        }
      }
    }
}

TEST(SparseBackend, CapturedThenReplayedStepEqualsEagerStep) {
  auto g = rng_for_test();
  constexpr int G = kMaxBs;
  for (const Variant& v :
       {Variant{NsaImpl::sparse_bf16, true}, Variant{NsaImpl::gather, false}, Variant{NsaImpl::sparse_fp8, true}}) {
    SCOPED_TRACE(name_of(v));
    const int P = 4;
    TestPool pool(kPoolRows, kCtx, P, g);
    KvPair kv = KvPair::mla_pools(kLayers, pool_slots(pool), format_of(v.impl), g);
    SparseBackend graph(make_config(v, P, pool, kv.buffers(0)));
    SparseBackend eager(make_config(v, P, pool, kv.buffers(1)));
    graph.init_cuda_graph_state(G, kCap.max_num_tokens);
    for (ForwardMode mode : kGraphModes) {
      SCOPED_TRACE(to_string(mode));
      const int per =
          mode == ForwardMode::target_verify || mode == ForwardMode::draft_extend ? kSpec.draft_token_num : 1;
      const int64_t graph_rows = int64_t(G) * per;
      graph.init_forward_metadata_capture_cuda_graph(G, int(graph_rows), mode);
      StepInputs st = make_inputs(graph_rows, std::vector<int32_t>(std::size_t(graph_rows), 0), g);
      HostTensor out_graph = out_for(graph_rows);
      auto graph_step = [&](const LayerSpec& layer) {  // what the captured graph runs
        const TensorView idx = graph.topk_transform(st.logits.view, kTopk);
        graph.forward(st.args(out_graph, idx), layer);
        return idx;
      };
      graph_step(kPlain);  // capture
      for (int rep = 0; rep < 3; ++rep) {
        const TestBatch b = random_batch(g, mode, rand_int(g, 1, G), batch_shape(), pool);
        const BatchSpec spec = b.spec(pool.view());
        const int64_t rows = batch_rows(b, kSpec);
        graph.init_forward_metadata_replay_cuda_graph(G, spec);
        eager.init_forward_metadata(spec);
        for (const LayerSpec& layer : {kPlain, kScaled}) {
          const StepInputs in = make_inputs(rows, new_token_slots(b, pool, kSpec), g);
          for (auto [dst, src] : {std::pair{&st.q, &in.q},
                                  {&st.k, &in.k},
                                  {&st.k_rope, &in.k_rope},
                                  {&st.loc, &in.loc},
                                  {&st.logits, &in.logits}})
            std::memcpy(dst->bytes.data(), src->bytes.data(), src->view.nbytes());
          for (int64_t i = rows; i < graph_rows; ++i) st.loc.ptr<int32_t>()[i] = 0;
          const TensorView graph_idx = graph_step(layer);
          HostTensor out_eager = out_for(rows);
          const TensorView eager_idx = eager.topk_transform(in.logits.view, kTopk);
          eager.forward(in.args(out_eager, eager_idx), layer);
          const std::vector<int32_t> gi = as_vector(graph_idx), ei = as_vector(eager_idx);
          EXPECT_EQ(std::vector<int32_t>(gi.begin(), gi.begin() + rows * kTopk), ei) << "rep " << rep;
          for (int64_t i = rows * kTopk; i < graph_rows * kTopk; ++i) ASSERT_EQ(gi[std::size_t(i)], -1) << "tail row";
          EXPECT_EQ(row_bytes(out_graph.view, 0, rows), bytes_of(out_eager.view)) << "rep " << rep;
        }
      }
    }
  }
}

TEST(SparseBackend, MultiStepDraftDecodeEqualsSingleSteps) {
  auto g = rng_for_test();
  const Variant v{NsaImpl::sparse_bf16, true};
  const int P = 4, bs = 3;
  TestPool pool(kPoolRows, kCtx, P, g);
  KvPair kv = KvPair::mla_pools(kLayers, pool_slots(pool), MlaCacheFormat::bf16, g);
  SparseMultiStepBackend multi(make_config(v, P, pool, kv.buffers(0)));
  const TestBatch b = random_batch(g, ForwardMode::draft_decode, bs, batch_shape(), pool);
  const BatchSpec spec = b.spec(pool.view());
  multi.init_forward_metadata(spec);
  for (int i = 0; i < multi.num_backends(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    SpeculativeConfig s = kSpec;
    s.step_id = i;
    SparseBackend single(make_config(v, P, pool, kv.buffers(1), s));
    single.init_forward_metadata(spec);
    std::vector<int32_t> step_slots;
    for (int r = 0; r < bs; ++r) step_slots.push_back(b.drafts[std::size_t(r * kSpec.num_steps + i)]);
    const StepInputs in = make_inputs(bs, step_slots, g);
    HostTensor out_multi = out_for(bs), out_single = out_for(bs);
    const TensorView mi = multi.step(i).topk_transform(in.logits.view, kTopk);
    const TensorView si = single.topk_transform(in.logits.view, kTopk);
    EXPECT_EQ(as_vector(mi), as_vector(si));
    multi.step(i).forward_decode(in.args(out_multi, mi), kPlain);
    single.forward_decode(in.args(out_single, si), kPlain);
    EXPECT_EQ(bytes_of(out_multi.view), bytes_of(out_single.view));
  }
  EXPECT_TRUE(kv.same_contents());
}

TEST(SparseBackend, AutomaticPathsOnTheCpu) {
  auto g = rng_for_test();
  TestPool pool(kPoolRows, kCtx, 4, g);
  KvPair bf16 = KvPair::mla_pools(1, pool_slots(pool), MlaCacheFormat::bf16, g);
  KvPair fp8 = KvPair::mla_pools(1, pool_slots(pool), MlaCacheFormat::fp8_656, g);
  SparseBackendConfig c = make_config({NsaImpl::automatic, true}, 4, pool, bf16.buffers(0));
  c.kv_cache_format = MlaCacheFormat::bf16;
  SparseBackend a(c);
  EXPECT_EQ(a.resolved_prefill_impl(), NsaImpl::sparse_bf16);
  EXPECT_EQ(a.resolved_decode_impl(), NsaImpl::sparse_bf16);
  c.kv_cache_format = MlaCacheFormat::fp8_656;
  c.kv_buffers = fp8.buffers(0);
  SparseBackend b(c);
  EXPECT_EQ(b.resolved_prefill_impl(), NsaImpl::sparse_fp8);
  EXPECT_EQ(b.resolved_decode_impl(), NsaImpl::sparse_fp8);
  c.kv_cache_format = MlaCacheFormat::bf16;
  c.kv_buffers = bf16.buffers(0);
  c.softcap = 10.f;  // only the gather path has a softcap
  SparseBackend s(c);
  EXPECT_EQ(s.resolved_prefill_impl(), NsaImpl::gather);
  EXPECT_EQ(s.resolved_decode_impl(), NsaImpl::gather);
  EXPECT_EQ(parse_nsa_impl("flashmla_kv"), NsaImpl::sparse_fp8);
  EXPECT_EQ(parse_nsa_impl("fa3"), NsaImpl::gather);
  EXPECT_EQ(parse_nsa_impl("flashmla_sparse"), NsaImpl::sparse_bf16);
  EXPECT_THROW(parse_nsa_impl("tilelang"), Error);
}
