// Draft trees (spec.topk > 1) in the sparse backend on the CPU, against a brute force: each draft
// row's causal set is its prefix and its tree path; the top-k of the indexer's logits over that set
// (the logits scored in req_to_token's order, as the engine's indexer gives them), then sparse MLA
// over those slots in fp64. Every tree shape (chains, stars, full k-ary, random, relabelled), both
// tree inputs, page sizes 1 and 4, the three kernel paths and both top-k forms; a one-token tree and a
// chain equal linear verify bit for bit; tree draft decode (one row per branch); graph replay = eager;
// multi-step = single steps; clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "attnserve/ops.h"
#include "cpu/reference_sparse_mla.h"
#include "cpu/tree_test_util.h"
#include "test_backend_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

constexpr int kCtx = 100, kPoolRows = 6, kTopk = 12, kHeads = 2;

struct Variant {
  NsaImpl impl;
  bool fuse;
};
std::string name_of(const Variant& v) { return std::string(to_string(v.impl)) + (v.fuse ? " fused" : " positions"); }
MlaCacheFormat format_of(NsaImpl impl) {
  return impl == NsaImpl::sparse_fp8 ? MlaCacheFormat::fp8_656 : MlaCacheFormat::bf16;
}

SparseBackendConfig make_config(const Variant& v, int page, TestPool& pool, std::vector<KvLayerBuffers> kv,
                                const SpeculativeConfig& spec, int max_bs = 4) {
  SparseBackendConfig c;
  c.num_q_heads = kHeads;
  c.kv_cache_format = format_of(v.impl);
  c.index_topk = kTopk;
  c.softmax_scale = 0.1f;
  c.page_size = page;
  c.prefill_impl = c.decode_impl = v.impl;
  c.fuse_topk = v.fuse;
  c.spec = spec;
  c.capacity = {.max_bs = max_bs,
                .max_num_tokens = max_bs * std::max({1, spec.draft_token_num, spec.topk}),
                .max_context_len = kCtx};
  c.req_to_token = pool.view();
  c.kv_buffers = std::move(kv);
  return c;
}

// One request's brute-force rows: per draft row its causal set as (logits column, slot), in position
// order (the prefix, then the path root .. itself).
using CausalSet = std::vector<std::pair<int, int32_t>>;

// The K largest logits of a causal set (all of it when it is no larger), as slots.
std::set<int32_t> topk_slots(const CausalSet& set, const float* logits_row) {
  std::vector<std::pair<float, int32_t>> scored;
  for (auto [col, slot] : set) scored.push_back({logits_row[col], slot});
  std::sort(scored.begin(), scored.end(), [](auto a, auto b) { return a.first > b.first; });
  std::set<int32_t> out;
  for (std::size_t i = 0; i < scored.size() && i < std::size_t(kTopk); ++i) out.insert(scored[i].second);
  return out;
}

std::set<int32_t> row_set(const std::vector<int32_t>& v, int64_t row) {
  std::set<int32_t> s;
  for (int j = 0; j < kTopk; ++j)
    if (v[std::size_t(row * kTopk + j)] >= 0) s.insert(v[std::size_t(row * kTopk + j)]);
  return s;
}

double max_abs_diff(const HostTensor& out, const std::vector<double>& ref) {
  double e = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) e = std::max(e, std::abs(double(out.get(int64_t(i))) - ref[i]));
  return e;
}

// Runs one step of `be` (topk_transform, forward) on random q and logits; checks the top-k slot sets
// against the brute force (`sets` per row) and the output against sparse MLA over those slots in fp64
// (tolerance by rule). Returns the slots and output for bitwise comparisons.
struct StepResult {
  std::vector<int32_t> idx;
  HostTensor out;
};
StepResult run_and_check(SparseBackend& be, const std::vector<CausalSet>& sets, const TensorView& cache,
                         const HostTensor& q, const HostTensor& logits_in, const TensorView& page_table_1) {
  const int64_t rows = int64_t(sets.size());
  HostTensor logits(DType::f32, {rows, logits_in.view.shape[1]});
  std::memcpy(logits.bytes.data(), logits_in.bytes.data(), logits.bytes.size());  // topk_transform moves columns
  const TensorView idx = be.topk_transform(logits.view, kTopk);
  StepResult r;
  r.idx = read_i32(idx);
  std::vector<int32_t> slots = r.idx;
  if (!be.config().fuse_topk) {  // positions in the row's page_table_1 (its causal set, in order)
    const std::vector<int32_t> t1 = read_i32(page_table_1);
    const int64_t w = page_table_1.shape[1];
    for (int64_t i = 0; i < rows; ++i)
      for (int j = 0; j < kTopk; ++j) {
        int32_t& p = slots[std::size_t(i * kTopk + j)];
        if (p >= 0) p = t1[std::size_t(i * w + p)];
      }
  }
  std::vector<int32_t> lens;
  for (int64_t i = 0; i < rows; ++i) {
    const std::set<int32_t> want =
        topk_slots(sets[std::size_t(i)], logits_in.view.ptr<float>() + i * logits.view.shape[1]);
    EXPECT_EQ(row_set(slots, i), want) << "row " << i;
    lens.push_back(int32_t(want.size()));
  }
  r.out = poisoned(DType::bf16, {rows, kHeads, 512});
  be.forward({.q = q.view, .out = r.out.view, .topk_indices = idx}, LayerSpec{.layer_id = 0});
  // fp64 and f32 brute force over the expected slots.
  HostTensor ref_idx(DType::i32, {rows, kTopk});
  for (int64_t i = 0; i < rows; ++i) {
    const std::set<int32_t> want =
        topk_slots(sets[std::size_t(i)], logits_in.view.ptr<float>() + i * logits.view.shape[1]);
    int j = 0;
    for (int32_t s : want) ref_idx.ptr<int32_t>()[i * kTopk + j++] = s;
    for (; j < kTopk; ++j) ref_idx.ptr<int32_t>()[i * kTopk + j] = -1;
  }
  const HostTensor len = i32_tensor(lens);
  const SparseMlaArgs args{
      .q = q.view, .kv = cache, .indices = ref_idx.view, .topk_length = len.view, .softmax_scale = 0.1f};
  const SparseMlaReference ref64 = reference_sparse_mla<double>(args), ref32 = reference_sparse_mla<float>(args);
  double e32 = 0;
  for (std::size_t i = 0; i < ref64.out.size(); ++i) e32 = std::max(e32, std::abs(ref32.out[i] - ref64.out[i]));
  EXPECT_LE(max_abs_diff(r.out, ref64.out), tolerance_by_rule(e32, DType::bf16));
  return r;
}

// A verify batch over `pool`: bs requests with random prefixes, their draft tokens at seq .. seq + D - 1
// of their table rows.
struct VerifyCase {
  std::vector<int32_t> seq, rows, parents;
  std::vector<int64_t> masks;
  BatchSpec spec(const TensorView& r2t, bool as_masks) const {
    BatchSpec b;
    b.mode = ForwardMode::target_verify;
    b.seq_lens = seq;
    b.req_pool_indices = rows;
    if (as_masks) b.tree_mask = masks;
    else b.tree_parents = parents;
    b.req_to_token = r2t;
    return b;
  }
  // Brute-force causal sets, row r * D + t.
  std::vector<CausalSet> sets(const TestPool& pool, int D) const {
    std::vector<CausalSet> out;
    for (std::size_t r = 0; r < seq.size(); ++r) {
      const std::vector<int32_t> p(parents.begin() + long(r) * D, parents.begin() + long(r + 1) * D);
      for (int t = 0; t < D; ++t) {
        CausalSet s;
        for (int c = 0; c < seq[r]; ++c) s.push_back({c, pool.slot(rows[r], c)});
        std::vector<int> path;
        for (int j = t; j >= 0; j = p[std::size_t(j)]) path.push_back(j);
        for (auto it = path.rbegin(); it != path.rend(); ++it)
          s.push_back({seq[r] + *it, pool.slot(rows[r], seq[r] + *it)});
        out.push_back(std::move(s));
      }
    }
    return out;
  }
};

VerifyCase verify_case(std::mt19937_64& g, int bs, int D, const std::vector<int32_t>& shape_or_empty) {
  VerifyCase c;
  std::vector<int32_t> rows(kPoolRows);
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), g);
  for (int r = 0; r < bs; ++r) {
    c.seq.push_back(rand_int(g, r == 0 ? 0 : 1, kCtx - D - 2));  // an empty prefix too
    c.rows.push_back(rows[std::size_t(r)]);
    const std::vector<int32_t> p =
        shape_or_empty.empty() ? (r % 2 ? shuffled_tree(random_tree(D, g), g) : random_tree(D, g)) : shape_or_empty;
    c.parents.insert(c.parents.end(), p.begin(), p.end());
    const std::vector<int64_t> m = ancestor_masks(p);
    c.masks.insert(c.masks.end(), m.begin(), m.end());
  }
  return c;
}

}  // namespace

TEST(SparseDraftTree, VerifyMatchesBruteForceForEveryTreeShape) {
  auto g = rng_for_test();
  const Variant variants[] = {{NsaImpl::sparse_bf16, true},
                              {NsaImpl::gather, true},
                              {NsaImpl::sparse_bf16, false},
                              {NsaImpl::sparse_fp8, true}};
  for (const Variant& v : variants)
    for (int P : {1, 4})
      for (int D : {5, 16, 64}) {
        SCOPED_TRACE(name_of(v) + " page " + std::to_string(P) + " D " + std::to_string(D));
        TestPool pool(kPoolRows, kCtx, P, g);
        KvPair kv = KvPair::mla_pools(1, pool_slots(pool), format_of(v.impl), g);
        const SpeculativeConfig spec{.draft_token_num = D, .num_steps = 3, .topk = 4};
        SparseBackend be(make_config(v, P, pool, kv.buffers(0), spec));
        SparsePlanner linear({.page_size = P, .topk = kTopk, .spec = {.draft_token_num = D}}, Device::cpu());
        linear.init(be.config().capacity);
        const std::vector<std::vector<int32_t>> shapes = {
            chain_tree(D), star_tree(D), kary_tree(D, 2), kary_tree(D, 4), {}};
        for (std::size_t k = 0; k < shapes.size(); ++k) {
          SCOPED_TRACE("shape " + std::to_string(k));
          const int bs = D == 64 ? 1 : rand_int(g, 1, 4);
          const VerifyCase c = verify_case(g, bs, D, shapes[k]);
          be.init_forward_metadata(c.spec(pool.view(), /*as_masks=*/k % 2 == 1));
          const SparseMetadata& m = be.forward_metadata();
          ASSERT_TRUE(m.tree.enabled);
          ASSERT_EQ(m.num_rows, bs * D);
          const std::vector<CausalSet> sets = c.sets(pool, D);
          // page_table_1: each row's causal set in order; the indexer's view is linear verify's.
          const std::vector<int32_t> t1 = read_i32(m.page_table_1), len = read_i32(m.tree.topk_lengths);
          const int64_t w = m.page_table_1.shape[1];
          for (int64_t i = 0; i < m.num_rows; ++i) {
            ASSERT_EQ(len[std::size_t(i)], int(sets[std::size_t(i)].size()));
            for (std::size_t j = 0; j < sets[std::size_t(i)].size(); ++j)
              ASSERT_EQ(t1[std::size_t(i * w) + j], sets[std::size_t(i)][j].second) << "row " << i << " key " << j;
          }
          BatchSpec lb = c.spec(pool.view(), false);
          lb.tree_parents = {};
          const SparseMetadata& lm = linear.plan(lb);
          EXPECT_EQ(read_i32(m.real_page_table), read_i32(lm.real_page_table));
          std::vector<int32_t> last_rows;  // linear verify's last row of each request: seq + D keys
          const std::vector<int32_t> lexp = read_i32(lm.nsa_seqlens_expanded);
          for (int r = 0; r < bs; ++r)
            for (int t = 0; t < D; ++t) last_rows.push_back(lexp[std::size_t(r * D + D - 1)]);
          EXPECT_EQ(read_i32(m.nsa_seqlens_expanded), last_rows);
          const HostTensor q = random_tensor(DType::bf16, {m.num_rows, kHeads, 576}, g);
          const HostTensor logits = random_tensor(DType::f32, {m.num_rows, kCtx + 3}, g, 3.0);
          run_and_check(be, sets, kv.mla[0]->cache(0), q, logits, m.page_table_1);
        }
      }
}

TEST(SparseDraftTree, OneTokenTreeAndChainEqualLinearVerify) {
  auto g = rng_for_test();
  for (const Variant& v : {Variant{NsaImpl::sparse_bf16, true}, Variant{NsaImpl::gather, false}})
    for (int D : {1, 6}) {
      SCOPED_TRACE(name_of(v) + " D " + std::to_string(D));
      const int P = 4;
      TestPool pool(kPoolRows, kCtx, P, g);
      KvPair kv = KvPair::mla_pools(1, pool_slots(pool), MlaCacheFormat::bf16, g);
      SparseBackend tree(make_config(v, P, pool, kv.buffers(0), {.draft_token_num = D, .topk = 2}));
      SparseBackend chain(make_config(v, P, pool, kv.buffers(1), {.draft_token_num = D}));
      const VerifyCase c = verify_case(g, 3, D, chain_tree(D));
      tree.init_forward_metadata(c.spec(pool.view(), false));
      BatchSpec lb = c.spec(pool.view(), false);
      lb.tree_parents = {};
      chain.init_forward_metadata(lb);
      const int64_t rows = 3 * D;
      EXPECT_EQ(read_i32(tree.forward_metadata().nsa_cache_seqlens_int32),
                read_i32(chain.forward_metadata().nsa_cache_seqlens_int32));
      const HostTensor q = random_tensor(DType::bf16, {rows, kHeads, 576}, g);
      HostTensor l1 = random_tensor(DType::f32, {rows, kCtx}, g, 3.0), l2 = l1;
      const std::vector<int32_t> ti = read_i32(tree.topk_transform(l1.view, kTopk));
      const std::vector<int32_t> ci = read_i32(chain.topk_transform(l2.view, kTopk));
      EXPECT_EQ(ti, ci);
      HostTensor o1 = poisoned(DType::bf16, {rows, kHeads, 512}), o2 = o1;
      HostTensor i1 = i32_tensor(ti), i2 = i32_tensor(ci);
      tree.forward({.q = q.view, .out = o1.view, .topk_indices = i1.view.reshape({rows, kTopk})}, {.layer_id = 0});
      chain.forward({.q = q.view, .out = o2.view, .topk_indices = i2.view.reshape({rows, kTopk})}, {.layer_id = 0});
      EXPECT_EQ(bytes_of(o1.view), bytes_of(o2.view));
    }
}

namespace {

// A tree draft-decode batch: bs requests, draft_slots [bs, topk, num_steps] page aligned (slot % P ==
// (seq + s) % P: the slot of position seq + s in a random table row), and the brute-force sets of
// branch rows r * topk + b for step `step`.
struct DraftCase {
  std::vector<int32_t> seq, rows, slots;
  BatchSpec spec(const TensorView& r2t) const {
    BatchSpec b;
    b.mode = ForwardMode::draft_decode;
    b.seq_lens = seq;
    b.req_pool_indices = rows;
    b.draft_slots = slots;
    b.req_to_token = r2t;
    return b;
  }
  std::vector<CausalSet> sets(const TestPool& pool, int K, int S, int step) const {
    std::vector<CausalSet> out;
    for (std::size_t r = 0; r < seq.size(); ++r)
      for (int b = 0; b < K; ++b) {
        CausalSet s;
        for (int c = 0; c < seq[r]; ++c) s.push_back({c, pool.slot(rows[r], c)});
        for (int st = 0; st <= step; ++st) s.push_back({seq[r] + st, slots[(r * K + std::size_t(b)) * S + st]});
        out.push_back(std::move(s));
      }
    return out;
  }
};

DraftCase draft_case(std::mt19937_64& g, const TestPool& pool, int bs, int K, int S) {
  DraftCase c;
  for (int r = 0; r < bs; ++r) {
    c.seq.push_back(rand_int(g, 1, kCtx - S - 2));
    c.rows.push_back(int32_t((r * 5 + 1) % kPoolRows));
  }
  for (int r = 0; r < bs; ++r)
    for (int b = 0; b < K; ++b)
      for (int s = 0; s < S; ++s)
        c.slots.push_back(pool.slot(rand_int(g, 0, kPoolRows - 1), c.seq[std::size_t(r)] + s));
  return c;
}

}  // namespace

TEST(SparseDraftTree, DraftDecodeBranchesSeeThePrefixAndTheirOwnPath) {
  auto g = rng_for_test();
  for (const Variant& v : {Variant{NsaImpl::sparse_bf16, true}, Variant{NsaImpl::gather, false}})
    for (int P : {1, 4}) {
      SCOPED_TRACE(name_of(v) + " page " + std::to_string(P));
      const int K = 3, S = 4;
      TestPool pool(kPoolRows, kCtx, P, g);
      KvPair kv = KvPair::mla_pools(1, pool_slots(pool), MlaCacheFormat::bf16, g);
      const DraftCase c = draft_case(g, pool, 3, K, S);
      for (int step = 0; step < S - 1; ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        SparseBackend be(make_config(v, P, pool, kv.buffers(0), {.num_steps = S, .step_id = step, .topk = K}));
        be.init_forward_metadata(c.spec(pool.view()));
        const SparseMetadata& m = be.forward_metadata();
        ASSERT_EQ(m.num_rows, 3 * K);
        EXPECT_EQ(m.tree.path_width, 0);
        EXPECT_EQ(read_i32(m.nsa_seqlens_expanded), read_i32(m.tree.topk_lengths));
        // The indexer's pages: the prefix's whole pages, then the branch's own pages, the one holding
        // its first draft position included (the engine keeps a copy of the prefix's tail there).
        const std::vector<int32_t> real = read_i32(m.real_page_table);
        const int64_t wp = m.real_page_table.shape[1];
        for (int r = 0; r < 3; ++r)
          for (int b = 0; b < K; ++b) {
            const int64_t row = r * K + b, seq = c.seq[std::size_t(r)];
            for (int64_t j = 0; j * P < seq + step + 1; ++j) {
              const int64_t first_pos = std::max<int64_t>(j * P, seq);
              const int32_t want = j * P + P <= seq ? pool.slot(c.rows[std::size_t(r)], int(j * P)) / P
                                                    : c.slots[std::size_t((r * K + b) * S + (first_pos - seq))] / P;
              EXPECT_EQ(real[std::size_t(row * wp + j)], want) << "row " << row << " page " << j;
            }
          }
        const HostTensor q = random_tensor(DType::bf16, {m.num_rows, kHeads, 576}, g);
        const HostTensor logits = random_tensor(DType::f32, {m.num_rows, kCtx}, g, 3.0);
        run_and_check(be, c.sets(pool, K, S, step), kv.mla[0]->cache(0), q, logits, m.page_table_1);
      }
    }
}

TEST(SparseDraftTree, MultiStepBackendEqualsSingleStepBackends) {
  auto g = rng_for_test();
  const Variant v{NsaImpl::sparse_bf16, true};
  const int K = 2, S = 4, P = 4;
  TestPool pool(kPoolRows, kCtx, P, g);
  KvPair kv = KvPair::mla_pools(1, pool_slots(pool), MlaCacheFormat::bf16, g);
  const DraftCase c = draft_case(g, pool, 2, K, S);
  SparseMultiStepBackend multi(make_config(v, P, pool, kv.buffers(0), {.num_steps = S, .topk = K}));
  multi.init_forward_metadata(c.spec(pool.view()));
  for (int i = 0; i < multi.num_backends(); ++i) {
    SparseBackend single(make_config(v, P, pool, kv.buffers(1), {.num_steps = S, .step_id = i, .topk = K}));
    single.init_forward_metadata(c.spec(pool.view()));
    HostTensor l1 = random_tensor(DType::f32, {2 * K, kCtx}, g, 3.0), l2 = l1;
    EXPECT_EQ(read_i32(multi.step(i).topk_transform(l1.view, kTopk)), read_i32(single.topk_transform(l2.view, kTopk)));
  }
}

TEST(SparseDraftTree, GraphReplayEqualsEager) {
  auto g = rng_for_test();
  const int G = 3, D = 8, K = 2, S = 3, P = 4;
  for (const Variant& v : {Variant{NsaImpl::sparse_bf16, true}, Variant{NsaImpl::gather, false}})
    for (ForwardMode mode : {ForwardMode::target_verify, ForwardMode::draft_decode}) {
      SCOPED_TRACE(name_of(v) + " " + to_string(mode));
      TestPool pool(kPoolRows, kCtx, P, g);
      KvPair kv = KvPair::mla_pools(1, pool_slots(pool), MlaCacheFormat::bf16, g);
      const SpeculativeConfig spec{.draft_token_num = D, .num_steps = S, .step_id = 1, .topk = K};
      SparseBackend graph(make_config(v, P, pool, kv.buffers(0), spec, G));
      SparseBackend eager(make_config(v, P, pool, kv.buffers(1), spec, G));
      const int per = mode == ForwardMode::target_verify ? D : K;
      const int64_t graph_rows = int64_t(G) * per;
      graph.init_cuda_graph_state(G, int(graph_rows));
      graph.init_forward_metadata_capture_cuda_graph(G, int(graph_rows), mode);
      HostTensor q = random_tensor(DType::bf16, {graph_rows, kHeads, 576}, g);
      HostTensor logits = random_tensor(DType::f32, {graph_rows, kCtx}, g, 3.0);
      HostTensor out_graph = poisoned(DType::bf16, {graph_rows, kHeads, 512});
      auto graph_step = [&] {  // what the captured graph runs
        const TensorView idx = graph.topk_transform(logits.view, kTopk);
        graph.forward({.q = q.view, .out = out_graph.view, .topk_indices = idx}, {.layer_id = 0});
        return read_i32(idx);
      };
      graph_step();
      for (int rep = 0; rep < 3; ++rep) {
        const int bs = rand_int(g, 1, G);
        VerifyCase vc = verify_case(g, bs, D, {});
        const DraftCase dc = draft_case(g, pool, bs, K, S);
        const BatchSpec b = mode == ForwardMode::target_verify ? vc.spec(pool.view(), rep % 2) : dc.spec(pool.view());
        const int64_t rows = int64_t(bs) * per;
        graph.init_forward_metadata_replay_cuda_graph(G, b);
        eager.init_forward_metadata(b);
        HostTensor eq = random_tensor(DType::bf16, {rows, kHeads, 576}, g);
        HostTensor el = random_tensor(DType::f32, {rows, kCtx}, g, 3.0);
        std::memcpy(q.bytes.data(), eq.bytes.data(), eq.bytes.size());
        std::memcpy(logits.bytes.data(), el.bytes.data(), el.bytes.size());
        const std::vector<int32_t> gi = graph_step();
        const std::vector<int32_t> ei = read_i32(eager.topk_transform(el.view, kTopk));
        EXPECT_EQ(std::vector<int32_t>(gi.begin(), gi.begin() + rows * kTopk), ei) << "rep " << rep;
        for (int64_t i = rows * kTopk; i < graph_rows * kTopk; ++i) ASSERT_EQ(gi[std::size_t(i)], -1) << "tail row";
        HostTensor out_eager = poisoned(DType::bf16, {rows, kHeads, 512});
        HostTensor ei_t = i32_tensor(ei);
        eager.forward({.q = eq.view, .out = out_eager.view, .topk_indices = ei_t.view.reshape({rows, kTopk})},
                      {.layer_id = 0});
        EXPECT_EQ(row_bytes(out_graph.view, 0, rows), bytes_of(out_eager.view)) << "rep " << rep;
      }
    }
}

TEST(SparseDraftTree, BadBatchesAreClearErrors) {
  auto g = rng_for_test();
  const int P = 4, K = 2, S = 3;
  TestPool pool(kPoolRows, kCtx, P, g);
  KvPair kv = KvPair::mla_pools(1, pool_slots(pool), MlaCacheFormat::bf16, g);
  SparseBackend dd(make_config({NsaImpl::sparse_bf16, true}, P, pool, kv.buffers(0), {.num_steps = S, .topk = K}));
  DraftCase c = draft_case(g, pool, 2, K, S);
  c.slots[std::size_t(K * S + 0)] += 1;  // request 1, branch 0, step 0: off its page offset
  EXPECT_THROW(
      {
        try {
          dd.init_forward_metadata(c.spec(pool.view()));
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("draft_slots[1, 0, 0]"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  const int D = 16;
  SparseBackend ver(
      make_config({NsaImpl::sparse_bf16, true}, P, pool, kv.buffers(0), {.draft_token_num = D, .topk = K}));
  VerifyCase v = verify_case(g, 2, D, {});
  v.seq[1] = kCtx - D + 1;  // prefix + tree exceed max_context_len
  EXPECT_THROW(ver.init_forward_metadata(v.spec(pool.view(), false)), Error);
  v.seq[1] = 3;
  v.parents[std::size_t(D + 2)] = 5;  // request 1: tokens 2 and 5 are each other's parent (a cycle)
  v.parents[std::size_t(D + 5)] = 2;
  EXPECT_THROW(ver.init_forward_metadata(v.spec(pool.view(), false)), Error);
  HostTensor narrow(DType::f32, {2 * D, 4});  // fewer columns than the rows score
  const VerifyCase ok = verify_case(g, 2, D, {});
  ver.init_forward_metadata(ok.spec(pool.view(), false));
  EXPECT_THROW(ver.topk_transform(narrow.view, kTopk), Error);
}

// topk_transform's row_starts (each row's logits at its own offset) moves the path logits of the right
// columns: the same slots as contiguous rows.
TEST(SparseDraftTree, RowStartsGiveTheSameSlots) {
  auto g = rng_for_test();
  const int P = 4, D = 12;
  TestPool pool(kPoolRows, kCtx, P, g);
  KvPair kv = KvPair::mla_pools(1, pool_slots(pool), MlaCacheFormat::bf16, g);
  SparseBackend be(
      make_config({NsaImpl::sparse_bf16, true}, P, pool, kv.buffers(0), {.draft_token_num = D, .topk = 3}));
  const VerifyCase c = verify_case(g, 3, D, {});
  be.init_forward_metadata(c.spec(pool.view(), false));
  const int64_t rows = 3 * D, shift = 7;
  HostTensor plain = random_tensor(DType::f32, {rows, kCtx}, g, 3.0);
  HostTensor shifted(DType::f32, {rows, kCtx + shift});
  std::vector<int32_t> starts;
  for (int64_t i = 0; i < rows; ++i) {
    starts.push_back(int32_t(i % (shift + 1)));
    std::memcpy(shifted.ptr<float>() + i * (kCtx + shift) + starts.back(), plain.ptr<float>() + i * kCtx,
                kCtx * sizeof(float));
  }
  const HostTensor st = i32_tensor(starts);
  const std::vector<int32_t> a = read_i32(be.topk_transform(plain.view, kTopk));
  const std::vector<int32_t> b = read_i32(be.topk_transform(shifted.view, kTopk, {}, st.view));
  for (int64_t i = 0; i < rows; ++i) EXPECT_EQ(row_set(a, i), row_set(b, i)) << "row " << i;
}
