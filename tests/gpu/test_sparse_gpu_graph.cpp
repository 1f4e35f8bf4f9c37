// CUDA graphs of the sparse (DeepSeek NSA) backend's attention step: the SparsePlanner's captured
// metadata drives indexer -> top-k (fused slot transform) -> sparse MLA on the FP8-656 cache, captured
// once per mode (decode, target verify, draft extend) over capacity-sized buffers, then replayed for 12
// live batches written into those buffers. Each replay must equal an eager run of the same buffers bit
// for bit, and each stage must agree with the CPU oracle run on the GPU's own inputs: indexer logits
// (same -inf positions, rel_l2 <= 1e-5), top-k (same sets), sparse MLA (rel_l2 within bf16 rounding;
// lse within 1e-5, same -inf positions). Every mode runs with 16 sparse MLA heads (the portable kernel) and
// 64 (the Hopper kernel on sm_90 devices).
//   decode         rows = requests; indexer_paged(next_n 1) over real_page_table; top-k decode transform
//   target verify  rows = requests x 4 draft tokens; indexer_paged(next_n 4) over the request's table
//                  (every row of a request holds a copy: a stride-4 view); top-k decode transform
//   draft extend   rows = accepted tokens (1 .. 4 per request, packed); indexer_ragged over the request's
//                  keys gathered into a fixed per-request stretch of a key buffer; top-k prefill transform
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "attnserve/cache_formats.h"
#include "attnserve/ops.h"
#include "attnserve/plan.h"
#include "cpu/plan_test_util.h"
#include "cpu/test_indexer_util.h"
#include "cpu/test_topk_util.h"
#include "test_sparse_gpu_util.h"

using namespace attnserve;
using namespace attnserve::test;
using namespace attnserve::test::dsa_gpu;

namespace {

constexpr int kPage = 64, kTopk = 256, kDraft = 4, kMaxBs = 8, kCtx = 1200, kPoolRows = 16;
constexpr int kIndexHeads = 32;
// Sparse MLA heads: 16 runs the portable kernel everywhere; 64 runs the Hopper kernel on sm_90 devices.
constexpr int kHeadCounts[] = {16, 64};
constexpr float kScale = 0.1352337f;
const SpeculativeConfig kSpec{.draft_token_num = kDraft, .num_steps = 3, .step_id = 0};

HostTensor host_copy(const TensorView& dev, Stream s) {
  HostTensor h(dev.dtype, {dev.size(0)});
  if (dev.ndim == 2) h = HostTensor(dev.dtype, {dev.size(0), dev.size(1)});
  if (h.view.numel() > 0) {
    copy_async(h.view, dev, s);
    stream_synchronize(s);
  }
  return h;
}

// A host tensor and its device mirror, kept together.
struct Pair {
  HostTensor h;
  DeviceMirror d;
  Pair() = default;
  explicit Pair(HostTensor t) : h(std::move(t)), d(h.view) {}
  void upload(Stream s) { d.upload(h.view, s); }
  HostTensor fetch(Stream s) const {
    HostTensor out = h;
    d.download(out.view, s);
    return out;
  }
};

struct Caches {
  Pair index_k;  // [pages, kPage * 132] u8
  Pair mla;      // [pages * kPage, 656] u8
  explicit Caches(int num_pages, std::mt19937_64& g) {
    HostTensor ik(DType::u8, {num_pages, int64_t(IndexerKeyLayout::bytes_per_page(kPage))});
    for (int64_t slot = 0; slot < int64_t(num_pages) * kPage; ++slot) {
      const QuantizedKey k = random_key(g);
      std::memcpy(ik.bytes.data() + IndexerKeyLayout::key_offset(slot, kPage), k.bytes, kIdxDim);
      std::memcpy(ik.bytes.data() + IndexerKeyLayout::scale_offset(slot, kPage), &k.scale, 4);
    }
    index_k = Pair(std::move(ik));
    HostTensor kv(DType::u8, {int64_t(num_pages) * kPage, 656});
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> nope(512), rope(64);
    for (int64_t s = 0; s < kv.view.size(0); ++s) {
      for (float& x : nope) x = nd(g);
      for (float& x : rope) x = nd(g);
      encode_fp8_mla_token(nope.data(), rope.data(), kv.ptr<uint8_t>() + s * 656);
    }
    mla = Pair(std::move(kv));
  }
};

struct Buffers {
  int rows = 0, width = 0, heads = 0;  // capacity rows, logits width, sparse MLA heads
  bool ragged = false;
  Pair q_idx, w, q, logits, indices, out, lse, k_rag, k_rag_scale, ks, ke;
  Buffers(int rows_, bool ragged_, int heads_, std::mt19937_64& g)
      : rows(rows_), width(ragged_ ? kMaxBs * kCtx : kCtx), heads(heads_), ragged(ragged_) {
    q_idx = Pair(random_fp8_q(rows, kIndexHeads, g));
    w = Pair(random_weights(rows, kIndexHeads, g));
    HostTensor qh(DType::bf16, {rows, heads, 576});
    fill_uniform(qh, g);
    q = Pair(std::move(qh));
    logits = Pair(HostTensor(DType::f32, {rows, width}));
    indices = Pair(HostTensor(DType::i32, {rows, kTopk}));
    out = Pair(HostTensor(DType::bf16, {rows, heads, 512}));
    lse = Pair(HostTensor(DType::f32, {rows, heads}));
    if (ragged) {
      k_rag = Pair(HostTensor(DType::fp8_e4m3, {int64_t(kMaxBs) * kCtx, kIdxDim}));
      k_rag_scale = Pair(HostTensor(DType::f32, {int64_t(kMaxBs) * kCtx}));
      ks = Pair(HostTensor(DType::i32, {rows}));
      ke = Pair(HostTensor(DType::i32, {rows}));
    }
  }
  void new_queries(std::mt19937_64& g, Stream s) {
    q_idx.h = random_fp8_q(rows, kIndexHeads, g);
    w.h = random_weights(rows, kIndexHeads, g);
    fill_uniform(q.h, g);
    q_idx.upload(s), w.upload(s), q.upload(s);
  }
  void poison_outputs(Stream s) { logits.d.poison(s), indices.d.poison(s), out.d.poison(s), lse.d.poison(s); }
};

// The request's table as the paged indexer wants it: [bs, pages]; in target verify every request owns
// kDraft identical rows, so a view with kDraft times the row stride.
TensorView request_table(const TensorView& real_page_table, ForwardMode mode, int bs) {
  TensorView v = real_page_table;
  if (mode == ForwardMode::target_verify) {
    v.shape[0] = bs;
    v.strides[0] *= kDraft;
  }
  return v;
}

// indexer -> topk -> sparse_mla over the metadata `m` (device views, or host views for the oracle).
struct Stage {
  IndexerPagedArgs paged;
  IndexerRaggedArgs ragged;
  TopkArgs topk;
  SparseMlaArgs mla;
};

Stage stage_args(ForwardMode mode, const SparseMetadata& m, const TensorView& real_table,
                 const TensorView& cache_seqlens, const TensorView& expanded, const TensorView& nsa_seqlens,
                 const TensorView& table1, const TensorView& cu_q, const TensorView& q_idx, const TensorView& w,
                 const TensorView& index_k, const TensorView& k_rag, const TensorView& k_rag_scale,
                 const TensorView& ks, const TensorView& ke, const TensorView& logits, const TensorView& q,
                 const TensorView& mla, const TensorView& indices, const TensorView& out, const TensorView& lse) {
  Stage st{};
  const int bs = m.batch_size;
  if (mode == ForwardMode::draft_extend) {
    st.ragged = {.q = q_idx, .weights = w, .k = k_rag, .k_scale = k_rag_scale, .ks = ks, .ke = ke, .logits = logits};
  } else {
    st.paged = {.q = q_idx,
                .weights = w,
                .index_k_cache = index_k,
                .page_table = request_table(real_table, mode, bs),
                .seqlens = cache_seqlens,
                .logits = logits,
                .page_size = kPage,
                .next_n = mode == ForwardMode::target_verify ? kDraft : 1};
  }
  st.topk = {.scores = logits, .lengths = expanded, .out = indices, .topk = kTopk};
  if (mode == ForwardMode::draft_extend) {
    st.topk.row_starts = ks;
    st.topk.transform = TopkTransform::prefill;
    st.topk.page_table_1 = table1;
    st.topk.cu_seqlens_q = cu_q;
  } else {
    st.topk.transform = TopkTransform::decode;
    st.topk.page_table_1 = table1;
  }
  st.mla = {.q = q, .kv = mla, .indices = indices, .out = out};
  st.mla.topk_length = nsa_seqlens;
  st.mla.lse = lse;
  st.mla.softmax_scale = kScale;
  return st;
}

// mla_ws: sparse MLA's workspace (its split-K partial states at these few rows), sized by its query and
// allocated before capture so every replay sees the same address.
void run_stage(ForwardMode mode, const Stage& st, Workspace mla_ws, Stream s) {
  if (mode == ForwardMode::draft_extend) indexer_ragged(st.ragged, {}, s);
  else indexer_paged(st.paged, {}, s);
  topk(st.topk, {}, s);
  sparse_mla(st.mla, mla_ws, s);
}

struct Outputs {
  HostTensor logits, indices, out, lse;
};
Outputs fetch(const Buffers& b, Stream s) {
  return {b.logits.fetch(s), b.indices.fetch(s), b.out.fetch(s), b.lse.fetch(s)};
}

bool same(const HostTensor& a, const HostTensor& b) { return a.bytes == b.bytes; }

void run_mode(ForwardMode mode, int heads, std::mt19937_64& g) {
  SCOPED_TRACE(std::string(to_string(mode)) + " sparse MLA heads " + std::to_string(heads));
  cudaStream_t cs;
  ASSERT_EQ(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), cudaSuccess);
  const Stream s{cs};
  const int bs = kMaxBs;
  const int rows = mode == ForwardMode::decode ? bs : bs * kDraft;
  const bool ragged = mode == ForwardMode::draft_extend;

  TestPool pool(kPoolRows, kCtx, kPage, g);
  const int pages_per_row = (kCtx + kPage - 1) / kPage;
  Caches caches(kPoolRows * pages_per_row + 1, g);
  Buffers buf(rows, ragged, heads, g);
  DeviceMirror r2t(pool.view());

  SparsePlanner planner({.page_size = kPage, .topk = kTopk, .spec = kSpec}, Device::cuda());
  planner.init({.max_bs = kMaxBs, .max_num_tokens = kMaxBs * kDraft, .max_context_len = kCtx}, s);
  const SparseMetadata& m = planner.capture(bs, mode, s);
  ASSERT_EQ(m.num_rows, rows);
  const Stage dev =
      stage_args(mode, m, m.real_page_table, m.cache_seqlens_int32, m.nsa_seqlens_expanded, m.nsa_cache_seqlens_int32,
                 m.page_table_1, m.cu_seqlens_q, buf.q_idx.d.view, buf.w.d.view, caches.index_k.d.view,
                 buf.k_rag.d.view, buf.k_rag_scale.d.view, buf.ks.d.view, buf.ke.d.view, buf.logits.d.view,
                 buf.q.d.view, caches.mla.d.view, buf.indices.d.view, buf.out.d.view, buf.lse.d.view);
  Buffer mla_ws_buf(std::max<std::size_t>(sparse_mla_workspace_size(dev.mla, query_device_caps(Device::cuda())), 16),
                    Device::cuda());
  const Workspace mla_ws{mla_ws_buf.data(), mla_ws_buf.bytes()};
  run_stage(mode, dev, mla_ws, s);  // warm-up outside capture (kernel attributes, module load)
  ASSERT_EQ(cudaStreamSynchronize(cs), cudaSuccess);

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  run_stage(mode, dev, mla_ws, s);
  ASSERT_EQ(cudaStreamEndCapture(cs, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  const BatchShape shape{.max_ctx = kCtx, .max_q = 8, .prefix = true, .spec = kSpec};
  std::uniform_int_distribution<int> live_d(1, bs);
  for (int replay = 0; replay < 12; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay));
    const TestBatch b = random_batch(g, mode, live_d(g), shape, pool);
    r2t.upload(pool.view(), s);
    planner.replay(bs, mode, b.spec(r2t.view), s);
    buf.new_queries(g, s);
    // Host copies of the metadata (the oracle's inputs; draft extend also builds its key buffer).
    const HostTensor h_cache = host_copy(m.cache_seqlens_int32, s), h_exp = host_copy(m.nsa_seqlens_expanded, s),
                     h_nsa = host_copy(m.nsa_cache_seqlens_int32, s), h_t1 = host_copy(m.page_table_1, s),
                     h_real = host_copy(m.real_page_table, s), h_cu = host_copy(m.cu_seqlens_q, s);
    if (ragged) {
      std::memset(buf.k_rag.h.bytes.data(), 0, buf.k_rag.h.bytes.size());
      for (int r = 0; r < bs; ++r) {
        const int kv = h_cache.view.ptr<int32_t>()[r];
        for (int j = 0; j < kv; ++j) {
          const int64_t slot = h_t1.view.ptr<int32_t>()[int64_t(r) * h_t1.view.size(1) + j];
          std::memcpy(buf.k_rag.h.bytes.data() + (int64_t(r) * kCtx + j) * kIdxDim,
                      caches.index_k.h.bytes.data() + IndexerKeyLayout::key_offset(slot, kPage), kIdxDim);
          std::memcpy(buf.k_rag_scale.h.ptr<float>() + int64_t(r) * kCtx + j,
                      caches.index_k.h.bytes.data() + IndexerKeyLayout::scale_offset(slot, kPage), 4);
        }
        for (int row = h_cu.view.ptr<int32_t>()[r]; row < h_cu.view.ptr<int32_t>()[r + 1]; ++row) {
          buf.ks.h.ptr<int32_t>()[row] = r * kCtx;
          buf.ke.h.ptr<int32_t>()[row] = r * kCtx + h_exp.view.ptr<int32_t>()[row];
        }
      }
      for (int row = h_cu.view.ptr<int32_t>()[bs]; row < rows; ++row)
        buf.ks.h.ptr<int32_t>()[row] = buf.ke.h.ptr<int32_t>()[row] = 0;
      buf.k_rag.upload(s), buf.k_rag_scale.upload(s), buf.ks.upload(s), buf.ke.upload(s);
    }

    buf.poison_outputs(s);
    ASSERT_EQ(cudaGraphLaunch(exec, cs), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(cs), cudaSuccess);
    const Outputs gr = fetch(buf, s);
    buf.poison_outputs(s);
    run_stage(mode, dev, mla_ws, s);
    ASSERT_EQ(cudaStreamSynchronize(cs), cudaSuccess);
    const Outputs ea = fetch(buf, s);
    EXPECT_TRUE(same(gr.logits, ea.logits)) << "graph != eager: logits";
    EXPECT_TRUE(same(gr.indices, ea.indices)) << "graph != eager: indices";
    EXPECT_TRUE(same(gr.out, ea.out)) << "graph != eager: out";
    EXPECT_TRUE(same(gr.lse, ea.lse)) << "graph != eager: lse";

    // The CPU oracle, stage by stage, on the GPU's inputs.
    HostTensor c_logits = gr.logits, c_indices = gr.indices, c_out = gr.out, c_lse = gr.lse;
    poison(c_logits), poison_i32(c_indices), poison(c_out), poison(c_lse);
    Stage host = stage_args(mode, m, h_real.view, h_cache.view, h_exp.view, h_nsa.view, h_t1.view, h_cu.view,
                            buf.q_idx.h.view, buf.w.h.view, caches.index_k.h.view, buf.k_rag.h.view,
                            buf.k_rag_scale.h.view, buf.ks.h.view, buf.ke.h.view, c_logits.view, buf.q.h.view,
                            caches.mla.h.view, c_indices.view, c_out.view, c_lse.view);
    if (ragged) indexer_ragged(host.ragged);
    else indexer_paged(host.paged);
    {
      const std::vector<double> got = to_doubles(gr.logits), want = to_doubles(c_logits);
      ASSERT_EQ(count_nan(got), 0) << "logits unwritten";
      ASSERT_EQ(nonfinite_mismatches(got, want), 0) << "logits: -inf positions differ from the CPU";
      EXPECT_LE(rel_l2(got, want), 1e-5) << "logits";
    }
    // Top-k of the GPU's logits on the CPU (draft extend: the live rows, as cu_seqlens_q ends there).
    TopkArgs t = host.topk;
    t.scores = gr.logits.view;
    int live_rows = rows;
    if (ragged) {
      live_rows = h_cu.view.ptr<int32_t>()[bs];
      t.scores = t.scores.slice(0, 0, live_rows);
      t.lengths = t.lengths.slice(0, 0, live_rows);
      t.row_starts = t.row_starts.slice(0, 0, live_rows);
      t.out = t.out.slice(0, 0, live_rows);
    }
    topk(t);
    for (int row = 0; row < rows; ++row) {
      const int32_t* gi = gr.indices.view.ptr<int32_t>() + int64_t(row) * kTopk;
      if (row >= live_rows) {  // padding rows: nothing seen
        for (int c = 0; c < kTopk; ++c) ASSERT_EQ(gi[c], -1) << "padding row " << row;
        continue;
      }
      std::vector<int32_t> a(gi, gi + kTopk),
          c(c_indices.ptr<int32_t>() + int64_t(row) * kTopk, c_indices.ptr<int32_t>() + int64_t(row + 1) * kTopk);
      std::sort(a.begin(), a.end());
      std::sort(c.begin(), c.end());
      ASSERT_EQ(a, c) << "top-k row " << row;
    }
    // Sparse MLA on the CPU with the GPU's indices.
    SparseMlaArgs ma = host.mla;
    ma.indices = gr.indices.view;
    sparse_mla(ma);
    {
      const std::vector<double> got = to_doubles(gr.out), want = to_doubles(c_out);
      ASSERT_EQ(count_nan(got), 0) << "out unwritten";
      EXPECT_LE(rel_l2(got, want), 4 * unit_roundoff(DType::bf16)) << "out";
      const std::vector<double> gl = to_doubles(gr.lse), wl = to_doubles(c_lse);
      ASSERT_EQ(count_nan(gl), 0) << "lse unwritten";
      ASSERT_EQ(nonfinite_mismatches(gl, wl), 0) << "lse: -inf positions differ";
      EXPECT_LE(rel_l2(gl, wl), 1e-5) << "lse";
    }
    if (::testing::Test::HasFailure()) break;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(cs);
}

}  // namespace

TEST(SparseGpuGraph, DecodeCapturedReplays) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int heads : kHeadCounts) run_mode(ForwardMode::decode, heads, g);
}

TEST(SparseGpuGraph, TargetVerifyCapturedReplays) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int heads : kHeadCounts) run_mode(ForwardMode::target_verify, heads, g);
}

TEST(SparseGpuGraph, DraftExtendCapturedReplays) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int heads : kHeadCounts) run_mode(ForwardMode::draft_extend, heads, g);
}
