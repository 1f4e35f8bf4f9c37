// Draft trees (spec.topk > 1) in the sparse backend on the GPU (scripts/gpu_check.sh; skipped without a
// GPU). The engine's step as it would run it: the paged indexer over the backend's real page table and
// expanded lengths (every draft row scores its request's prefix and whole tree), topk_transform (the
// tree rows' path logits moved into place, top-k over the causal set, slots), sparse MLA / the gather
// path. Tree verify (random, chain and star trees) and tree draft decode (one row per branch):
//   - the CUDA backend against the CPU backend on the GPU's own logits: the indexer's logits (same
//     -inf positions, rel_l2 <= 1e-5), the top-k slot sets (equal), the output (bf16 rounding);
//   - a real CUDA graph over indexer -> topk_transform -> forward, replayed for new batches and trees,
//     equals the eager step bit for bit (deterministic mode).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "attnserve/cache_formats.h"
#include "attnserve/ops.h"
#include "backend_gpu_util.h"
#include "cpu/test_backend_util.h"
#include "cpu/test_indexer_util.h"
#include "cpu/tree_test_util.h"
#include "test_sparse_gpu_util.h"

using namespace attnserve;
using namespace attnserve::test;
using namespace attnserve::test::dsa_gpu;

namespace {

constexpr int kPage = 64, kTopk = 128, kCtx = 640, kPoolRows = 8, kMaxBs = 4, kIndexHeads = 16, kHeads = 16;
constexpr int kDraft = 16, kBranches = 4, kSteps = 3;

SparseBackendConfig config(NsaImpl impl, TensorView table, TensorView cache, Device device, ForwardMode mode) {
  SparseBackendConfig c =
      sparse_backend_config(impl, kHeads, kTopk, kPage, table, {KvLayerBuffers{.k = cache}}, device);
  c.spec = mode == ForwardMode::target_verify ? SpeculativeConfig{.draft_token_num = kDraft, .topk = kBranches}
                                              : SpeculativeConfig{.num_steps = kSteps, .step_id = 1, .topk = kBranches};
  c.capacity = {.max_bs = kMaxBs, .max_num_tokens = kMaxBs * kDraft, .max_context_len = kCtx};
  c.deterministic = true;
  return c;
}

// The indexer-key pool [pages, kPage * 132] u8 with random keys.
HostTensor index_key_pool(int64_t pages, std::mt19937_64& g) {
  HostTensor ik(DType::u8, {pages, int64_t(IndexerKeyLayout::bytes_per_page(kPage))});
  for (int64_t slot = 0; slot < pages * kPage; ++slot) {
    const QuantizedKey k = random_key(g);
    std::memcpy(ik.bytes.data() + IndexerKeyLayout::key_offset(slot, kPage), k.bytes, kIdxDim);
    std::memcpy(ik.bytes.data() + IndexerKeyLayout::scale_offset(slot, kPage), &k.scale, 4);
  }
  return ik;
}

// A random tree batch of `mode` over `pool` (bs requests): the host arrays a BatchSpec views.
struct TreeBatch {
  ForwardMode mode;
  std::vector<int32_t> seq, rows, parents, slots;
  BatchSpec spec(const TensorView& r2t) const {
    BatchSpec b;
    b.mode = mode;
    b.seq_lens = seq;
    b.req_pool_indices = rows;
    b.tree_parents = parents;
    b.draft_slots = slots;
    b.req_to_token = r2t;
    return b;
  }
};
TreeBatch tree_batch(ForwardMode mode, int bs, const TestPool& pool, std::mt19937_64& g) {
  TreeBatch t{mode, {}, {}, {}, {}};
  for (int r = 0; r < bs; ++r) {
    t.seq.push_back(rand_int(g, 1, kCtx - kDraft - 1));
    t.rows.push_back(int32_t((r * 3 + 1) % kPoolRows));
    if (mode == ForwardMode::target_verify) {
      const std::vector<int32_t> p = r % 3 == 0   ? random_tree(kDraft, g)
                                     : r % 3 == 1 ? shuffled_tree(random_tree(kDraft, g), g)
                                                  : (r % 2 ? chain_tree(kDraft) : star_tree(kDraft));
      t.parents.insert(t.parents.end(), p.begin(), p.end());
    } else {
      for (int b = 0; b < kBranches; ++b)
        for (int s = 0; s < kSteps; ++s)  // page aligned: the slot of position seq + s in some table row
          t.slots.push_back(pool.slot(rand_int(g, 0, kPoolRows - 1), t.seq.back() + s));
    }
  }
  return t;
}

int64_t rows_of(ForwardMode mode, int bs) {
  return int64_t(bs) * (mode == ForwardMode::target_verify ? kDraft : kBranches);
}

// indexer_paged over the backend's metadata: one request per row (next_n 1), its table row and length.
void run_indexer(SparseBackend& be, const TensorView& q, const TensorView& w, const TensorView& index_k,
                 const TensorView& logits, Stream st) {
  indexer_paged({.q = q,
                 .weights = w,
                 .index_k_cache = index_k,
                 .page_table = be.get_page_table_64(),
                 .seqlens = be.get_seqlens_expanded(),
                 .logits = logits,
                 .page_size = kPage,
                 .next_n = 1},
                {}, st);
}

}  // namespace

TEST(SparseTreeGpu, VerifyAndDraftDecodeMatchCpuBackend) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  GpuStream stream;
  const Stream st = stream.get();
  for (NsaImpl impl : {NsaImpl::sparse_bf16, NsaImpl::sparse_fp8, NsaImpl::gather})
    for (ForwardMode mode : {ForwardMode::target_verify, ForwardMode::draft_decode}) {
      SCOPED_TRACE(std::string(to_string(impl)) + " " + to_string(mode));
      TestPool pool(kPoolRows, kCtx, kPage, g);
      const int64_t pages = pool_slots(pool) / kPage;
      KvPair kv = KvPair::mla_pools(1, pool_slots(pool),
                                    impl == NsaImpl::sparse_fp8 ? MlaCacheFormat::fp8_656 : MlaCacheFormat::bf16, g);
      const HostTensor ik = index_key_pool(pages, g);
      DeviceMirror d_table(pool.view(), st), d_cache(kv.mla[0]->cache(0), st), d_ik(ik.view, st);
      SparseBackend cpu(config(impl, pool.view(), kv.mla[0]->cache(0), Device::cpu(), mode));
      SparseBackend gpu(config(impl, d_table.view, d_cache.view, Device::cuda(0), mode), st);
      for (int rep = 0; rep < 3; ++rep) {
        const int bs = rand_int(g, 1, kMaxBs);
        const TreeBatch t = tree_batch(mode, bs, pool, g);
        const int64_t rows = rows_of(mode, bs);
        cpu.init_forward_metadata(t.spec(pool.view()));
        gpu.init_forward_metadata(t.spec(d_table.view), st);
        const HostTensor iq = random_fp8_q(rows, kIndexHeads, g), iw = random_weights(rows, kIndexHeads, g);
        HostTensor logits(DType::f32, {rows, kCtx});
        const DeviceMirror d_iq(iq.view, st), d_iw(iw.view, st), d_logits(logits.view, st);
        run_indexer(gpu, d_iq.view, d_iw.view, d_ik.view, d_logits.view, st);
        run_indexer(cpu, iq.view, iw.view, ik.view, logits.view, {});
        HostTensor g_logits = logits;
        d_logits.download(g_logits.view, st);
        {
          const std::vector<double> got = to_doubles(g_logits), want = to_doubles(logits);
          ASSERT_EQ(nonfinite_mismatches(got, want), 0) << "indexer logits: -inf positions differ";
          std::vector<double> gf, wf;
          for (std::size_t i = 0; i < got.size(); ++i)
            if (std::isfinite(want[i])) gf.push_back(got[i]), wf.push_back(want[i]);
          EXPECT_LE(rel_l2(gf, wf), 1e-5) << "indexer logits";
        }
        // Top-k of the GPU's logits on both (topk_transform moves path columns in place: copies).
        HostTensor c_logits = g_logits;
        const DeviceMirror d_logits2(g_logits.view, st);
        const std::vector<int32_t> ci = read_i32(cpu.topk_transform(c_logits.view, kTopk));
        const TensorView gi_view = gpu.topk_transform(d_logits2.view, kTopk, st);
        const std::vector<int32_t> gi = read_i32(gi_view, st);
        EXPECT_TRUE(same_index_sets(gi, ci, rows, kTopk)) << "top-k slots";
        const HostTensor q = random_tensor(DType::bf16, {rows, kHeads, 576}, g);
        HostTensor out_cpu = poisoned(DType::bf16, {rows, kHeads, 512});
        const DeviceMirror d_q(q.view, st), d_out(out_cpu.view, st);
        cpu.forward({.q = q.view, .out = out_cpu.view, .topk_indices = i32_tensor(ci).view.reshape({rows, kTopk})},
                    {.layer_id = 0});
        gpu.forward({.q = d_q.view, .out = d_out.view, .topk_indices = gi_view}, {.layer_id = 0}, st);
        HostTensor out_gpu = out_cpu;
        d_out.download(out_gpu.view, st);
        EXPECT_LE(rel_l2(to_doubles(out_gpu), to_doubles(out_cpu)), 2 * unit_roundoff(DType::bf16)) << "rep " << rep;
        if (::testing::Test::HasFailure()) return;
      }
    }
}

TEST(SparseTreeGpu, GraphReplayEqualsEager) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  GpuStream stream;
  const Stream st = stream.get();
  const int G = kMaxBs;
  for (NsaImpl impl : {NsaImpl::sparse_bf16, NsaImpl::gather})
    for (ForwardMode mode : {ForwardMode::target_verify, ForwardMode::draft_decode}) {
      SCOPED_TRACE(std::string(to_string(impl)) + " " + to_string(mode));
      TestPool pool(kPoolRows, kCtx, kPage, g);
      const int64_t pages = pool_slots(pool) / kPage;
      KvPair kv = KvPair::mla_pools(1, pool_slots(pool), MlaCacheFormat::bf16, g);
      const HostTensor ik = index_key_pool(pages, g);
      DeviceMirror d_table(pool.view(), st), d_cache(kv.mla[0]->cache(0), st), d_ik(ik.view, st);
      SparseBackend graph(config(impl, d_table.view, d_cache.view, Device::cuda(0), mode), st);
      SparseBackend eager(config(impl, d_table.view, d_cache.view, Device::cuda(0), mode), st);
      const int64_t graph_rows = rows_of(mode, G);
      graph.init_cuda_graph_state(G, int(graph_rows), st);
      graph.init_forward_metadata_capture_cuda_graph(G, int(graph_rows), mode, st);
      HostTensor iq = random_fp8_q(graph_rows, kIndexHeads, g), iw = random_weights(graph_rows, kIndexHeads, g);
      HostTensor q = random_tensor(DType::bf16, {graph_rows, kHeads, 576}, g);
      HostTensor logits(DType::f32, {graph_rows, kCtx}), out = poisoned(DType::bf16, {graph_rows, kHeads, 512});
      DeviceMirror d_iq(iq.view, st), d_iw(iw.view, st), d_q(q.view, st), d_logits(logits.view, st),
          d_out(out.view, st);
      auto step = [&](SparseBackend& be, const TensorView& l, const TensorView& o, const TensorView& qq,
                      const TensorView& a, const TensorView& b) {
        run_indexer(be, a, b, d_ik.view, l, st);
        const TensorView idx = be.topk_transform(l, kTopk, st);
        be.forward({.q = qq, .out = o, .topk_indices = idx}, {.layer_id = 0}, st);
        return idx;
      };
      step(graph, d_logits.view, d_out.view, d_q.view, d_iq.view, d_iw.view);  // warm-up outside capture
      CapturedGraph cg;
      TensorView graph_idx;
      ASSERT_NO_FATAL_FAILURE(capture_graph(
          cg, stream.s, [&] { graph_idx = step(graph, d_logits.view, d_out.view, d_q.view, d_iq.view, d_iw.view); }));
      for (int rep = 0; rep < 4; ++rep) {
        SCOPED_TRACE("replay " + std::to_string(rep));
        const int bs = rand_int(g, 1, G);
        const TreeBatch t = tree_batch(mode, bs, pool, g);
        const int64_t rows = rows_of(mode, bs);
        iq = random_fp8_q(graph_rows, kIndexHeads, g), iw = random_weights(graph_rows, kIndexHeads, g);
        q = random_tensor(DType::bf16, {graph_rows, kHeads, 576}, g);
        d_iq.upload(iq.view, st), d_iw.upload(iw.view, st), d_q.upload(q.view, st);
        graph.init_forward_metadata_replay_cuda_graph(G, t.spec(d_table.view), st);
        d_out.poison(st);
        ASSERT_EQ(cudaGraphLaunch(cg.exec, stream.s), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream.s), cudaSuccess);
        const std::vector<int32_t> gi = read_i32(graph_idx, st);
        const std::vector<uint8_t> go = d_out.bytes(st);
        // Eager over the live rows: row-prefix views of the same inputs.
        eager.init_forward_metadata(t.spec(d_table.view), st);
        HostTensor el(DType::f32, {rows, kCtx}), eo = poisoned(DType::bf16, {rows, kHeads, 512});
        DeviceMirror de_l(el.view, st), de_o(eo.view, st);
        const TensorView ei = step(eager, de_l.view, de_o.view, d_q.view.slice(0, 0, rows), d_iq.view.slice(0, 0, rows),
                                   d_iw.view.slice(0, 0, rows));
        const std::vector<int32_t> eiv = read_i32(ei, st);
        EXPECT_EQ(std::vector<int32_t>(gi.begin(), gi.begin() + rows * kTopk), eiv) << "top-k slots";
        for (int64_t i = rows * kTopk; i < graph_rows * kTopk; ++i) ASSERT_EQ(gi[std::size_t(i)], -1) << "padding row";
        const std::vector<uint8_t> eob = de_o.bytes(st);
        EXPECT_TRUE(std::equal(eob.begin(), eob.end(), go.begin())) << "output: graph != eager";
      }
    }
}
