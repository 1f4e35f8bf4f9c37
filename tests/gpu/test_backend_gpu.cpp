// Backends on the GPU (run on the device machine through scripts/gpu_check.sh; skipped without a GPU):
//   - every forward mode: the CUDA backend's output and stored KV match the CPU backend (the oracle);
//   - a real CUDA graph captured over the forward calls, replayed for new batches, equals the eager
//     step (bit for bit in deterministic mode, within bf16 rounding otherwise);
//   - multi-step draft decoding equals single-step backends, bit for bit;
//   - the sparse backend's paths the same way (skipped while its CUDA kernels are pending).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "backend_gpu_util.h"
#include "cpu/test_backend_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

#define REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

// Ops whose CUDA kernels are not written yet report it; their tests skip instead of failing.
#define SKIP_IF_PENDING(stmt)                                                                             \
  try {                                                                                                   \
    stmt;                                                                                                 \
  } catch (const Error& e) {                                                                              \
    if (std::string(e.what()).find("not implemented yet") != std::string::npos) GTEST_SKIP() << e.what(); \
    throw;                                                                                                \
  }

// A device copy of a host tensor (contiguous, same shape and dtype).
struct DevTensor {
  Buffer buf;
  TensorView view;
  DevTensor() = default;
  DevTensor(const HostTensor& h, Stream st) : buf(std::max<std::size_t>(1, h.view.nbytes()), Device::cuda(0)) {
    view = TensorView::contiguous(buf.data(), h.view.dtype, h.view.shape.data(), h.view.ndim, Device::cuda(0));
    upload(h, st);
  }
  void upload(const HostTensor& h, Stream st) {
    if (h.view.nbytes()) copy_async(view, h.view, st);
  }
  // The first rows of `h` into the first rows of this tensor.
  void upload_rows(const HostTensor& h, Stream st) {
    if (h.view.nbytes()) copy_async(view.slice(0, 0, h.view.shape[0]), h.view, st);
  }
  HostTensor download(Stream st) const {
    HostTensor h;
    h.bytes.assign(view.nbytes() + 1, 0);
    h.view = TensorView::contiguous(h.bytes.data(), view.dtype, view.shape.data(), view.ndim);
    if (view.nbytes()) copy_async(h.view, view, st);
    stream_synchronize(st);
    return h;
  }
  void poison(Stream st) { memset_async(view, 0xff, st); }
};
TensorView dev_or_empty(const DevTensor& t) { return t.buf.data() ? t.view : TensorView{}; }

// The pool's table on the GPU (re-uploaded after each random_batch, which edits it).
struct DevTable {
  Buffer buf;
  TensorView view;
  void upload(TestPool& p, Stream st) {
    if (!buf.data()) buf = Buffer(p.table.size() * sizeof(int32_t), Device::cuda(0));
    view = TensorView::contiguous(buf.data(), DType::i32, {p.pool_size, p.max_ctx}, Device::cuda(0));
    copy_async(view, p.view(), st);
  }
};

constexpr int kCtx = 256, kPoolRows = 8, kLayers = 2, kMaxBs = 8;
const SpeculativeConfig kSpec{.draft_token_num = 4, .num_steps = 4, .step_id = 2};
const PlanCapacity kCap{.max_bs = kMaxBs, .max_num_tokens = 512, .max_context_len = kCtx};
BatchShape batch_shape() { return {.max_ctx = kCtx, .max_q = 32, .spec = kSpec}; }
int rows_per_request(ForwardMode m) {
  return m == ForwardMode::target_verify || m == ForwardMode::draft_extend ? kSpec.draft_token_num : 1;
}

// ---- Dense -----------------------------------------------------------------------------------------

struct DenseCase {
  bool mla;
  int h_q, h_kv, d, d_v;
};
const DenseCase kMha{false, 8, 2, 128, 128}, kMla{true, 16, 1, 576, 512};

DenseBackendConfig dense_config(const DenseCase& c, int page, int chunk, TensorView table,
                                std::vector<KvLayerBuffers> kv, Device device, bool deterministic = false,
                                const SpeculativeConfig& spec = kSpec) {
  DenseBackendConfig cfg;
  cfg.arch = c.mla ? AttentionArch::mla : AttentionArch::mha;
  cfg.num_q_heads = c.h_q, cfg.num_kv_heads = c.h_kv, cfg.head_dim = c.d, cfg.v_head_dim = c.d_v;
  cfg.softmax_scale = c.mla ? 0.0417f : 0.0884f;
  cfg.page_size = page;
  cfg.attention_chunk_size = chunk;
  cfg.deterministic = deterministic;
  cfg.spec = spec;
  cfg.capacity = kCap;
  cfg.device = device;
  cfg.req_to_token = table;
  cfg.kv_buffers = std::move(kv);
  return cfg;
}
const LayerSpec kPlain{.layer_id = 0};
const LayerSpec kCustom{.layer_id = 1, .logit_cap = 30.f, .sliding_window_size = 40, .use_irope = true};

// A GPU copy of a host pool pair's backend pool.
struct DevPools {
  std::unique_ptr<MhaKvPool> mha;
  std::unique_ptr<MlaKvPool> mla;
  DevPools(const KvPair& host, Stream st) {
    if (host.mha[0]) {
      const MhaKvPool& h = *host.mha[0];
      mha = std::make_unique<MhaKvPool>(h.num_layers(), h.num_slots(), h.h_kv(), h.head_dim(), h.head_dim_v(),
                                        h.dtype(), Device::cuda(0));
      for (int64_t l = 0; l < h.num_layers(); ++l) copy_async(mha->k(l), h.k(l), st), copy_async(mha->v(l), h.v(l), st);
    } else {
      const MlaKvPool& h = *host.mla[0];
      mla = std::make_unique<MlaKvPool>(h.num_layers(), h.num_slots(), h.format(), Device::cuda(0));
      for (int64_t l = 0; l < h.num_layers(); ++l) copy_async(mla->cache(l), h.cache(l), st);
    }
  }
  std::vector<KvLayerBuffers> buffers() const { return mha ? kv_buffers_of(*mha) : kv_buffers_of(*mla); }
  // Same bytes as the host pool [0] of `host`.
  bool same_as(const KvPair& host, Stream st) const {
    auto same = [&](const TensorView& d, const TensorView& h) {
      std::vector<uint8_t> got(d.nbytes());
      copy_async(TensorView::contiguous(got.data(), DType::u8, {int64_t(got.size())}),
                 TensorView::contiguous(d.data, DType::u8, {int64_t(got.size())}, Device::cuda(0)), st);
      stream_synchronize(st);
      return got == bytes_of(h);
    };
    for (int64_t l = 0; l < kLayers; ++l) {
      if (mha && (!same(mha->k(l), host.mha[0]->k(l)) || !same(mha->v(l), host.mha[0]->v(l)))) return false;
      if (mla && !same(mla->cache(l), host.mla[0]->cache(l))) return false;
    }
    return true;
  }
};

// One step's inputs on the host and the device.
struct DenseInputs {
  HostTensor q, k, v, k_rope, loc;
  DevTensor dq, dk, dv, dk_rope, dloc;
  DenseInputs(const DenseCase& c, int64_t rows, const std::vector<int32_t>& slots, std::mt19937_64& g, Stream st) {
    q = random_tensor(DType::bf16, {rows, c.h_q, c.d}, g, c.mla ? 1.0 : 2.0);
    k = c.mla ? random_tensor(DType::bf16, {rows, 512}, g) : random_tensor(DType::bf16, {rows, c.h_kv, c.d}, g, 1.5);
    if (c.mla) k_rope = random_tensor(DType::bf16, {rows, 64}, g);
    else v = random_tensor(DType::bf16, {rows, c.h_kv, c.d_v}, g);
    loc = i32_tensor(slots);
    dq = DevTensor(q, st), dk = DevTensor(k, st), dloc = DevTensor(loc, st);
    if (c.mla) dk_rope = DevTensor(k_rope, st);
    else dv = DevTensor(v, st);
  }
  ForwardArgs host_args(const HostTensor& out) const {
    return {.q = q.view,
            .out = out.view,
            .k = k.view,
            .v = v.bytes.empty() ? TensorView{} : v.view,
            .k_rope = k_rope.bytes.empty() ? TensorView{} : k_rope.view,
            .out_cache_loc = loc.view};
  }
  ForwardArgs dev_args(const DevTensor& out) const {
    return {.q = dq.view,
            .out = out.view,
            .k = dk.view,
            .v = dev_or_empty(dv),
            .k_rope = dev_or_empty(dk_rope),
            .out_cache_loc = dloc.view};
  }
};

double bf16_close() { return 2 * unit_roundoff(DType::bf16); }

}  // namespace

TEST(BackendGpu, DenseEveryModeMatchesCpuBackend) {
  REQUIRE_GPU();
  auto g = rng_for_test();
  GpuStream stream;
  const Stream st = stream.get();
  for (const DenseCase& c : {kMha, kMla})
    for (int P : {1, 16})
      for (int chunk : {0, 64}) {
        SCOPED_TRACE(std::string(c.mla ? "mla" : "mha") + " page " + std::to_string(P) + " chunk " +
                     std::to_string(chunk));
        TestPool pool(kPoolRows, kCtx, P, g);
        KvPair kv = c.mla ? KvPair::mla_pools(kLayers, pool_slots(pool), MlaCacheFormat::bf16, g)
                          : KvPair::mha_pools(kLayers, pool_slots(pool), c.h_kv, c.d, c.d_v, DType::bf16, g);
        DevPools dev(kv, st);
        DevTable table;
        table.upload(pool, st);
        DenseBackend cpu(dense_config(c, P, chunk, pool.view(), kv.buffers(0), Device::cpu()));
        DenseBackend gpu(dense_config(c, P, chunk, table.view, dev.buffers(), Device::cuda(0)), st);
        for (ForwardMode mode : kAllModes) {
          SCOPED_TRACE(to_string(mode));
          const TestBatch b =
              random_batch(g, mode, mode == ForwardMode::idle ? 0 : rand_int(g, 1, kMaxBs), batch_shape(), pool);
          table.upload(pool, st);
          const int64_t rows = batch_rows(b, kSpec);
          cpu.init_forward_metadata(b.spec(pool.view()));
          gpu.init_forward_metadata(b.spec(table.view), st);
          for (const LayerSpec& layer : {kPlain, kCustom}) {
            const DenseInputs in(c, rows, new_token_slots(b, pool, kSpec), g, st);
            HostTensor out_cpu = poisoned(DType::bf16, {rows, c.h_q, c.d_v});
            DevTensor out_gpu(out_cpu, st);
            cpu.forward(in.host_args(out_cpu), layer);
            gpu.forward(in.dev_args(out_gpu), layer, st);
            const HostTensor got = out_gpu.download(st);
            EXPECT_LE(rel_l2(to_doubles(got), to_doubles(out_cpu)), bf16_close()) << "layer " << layer.layer_id;
            gpu.forward(in.dev_args(out_gpu), layer, st);  // again: the same bits
            EXPECT_EQ(bytes_of(out_gpu.download(st).view), bytes_of(got.view)) << "run twice";
          }
          EXPECT_TRUE(dev.same_as(kv, st)) << "stored K/V";
        }
      }
}

TEST(BackendGpu, DenseCudaGraphReplayEqualsEager) {
  REQUIRE_GPU();
  auto g = rng_for_test();
  GpuStream stream;
  const Stream st = stream.get();
  constexpr int G = kMaxBs;
  for (const DenseCase& c : {kMha, kMla})
    for (bool deterministic : {false, true}) {
      SCOPED_TRACE(std::string(c.mla ? "mla" : "mha") + (deterministic ? " deterministic" : ""));
      const int P = 16, chunk = 64;
      TestPool pool(kPoolRows, kCtx, P, g);
      KvPair kv = c.mla ? KvPair::mla_pools(kLayers, pool_slots(pool), MlaCacheFormat::bf16, g)
                        : KvPair::mha_pools(kLayers, pool_slots(pool), c.h_kv, c.d, c.d_v, DType::bf16, g);
      DevPools dev(kv, st);  // shared: both backends store the same live tokens; padding rows go to slot 0
      DevTable table;
      table.upload(pool, st);
      DenseBackend graph(dense_config(c, P, chunk, table.view, dev.buffers(), Device::cuda(0), deterministic), st);
      DenseBackend eager(dense_config(c, P, chunk, table.view, dev.buffers(), Device::cuda(0), deterministic), st);
      graph.init_cuda_graph_state(G, kCap.max_num_tokens, st);
      for (ForwardMode mode : kGraphModes) {
        SCOPED_TRACE(to_string(mode));
        const int64_t graph_rows = int64_t(G) * rows_per_request(mode);
        graph.init_forward_metadata_capture_cuda_graph(G, int(graph_rows), mode, st);
        DenseInputs gin(c, graph_rows, std::vector<int32_t>(std::size_t(graph_rows), 0), g, st);
        HostTensor out_like = poisoned(DType::bf16, {graph_rows, c.h_q, c.d_v});
        DevTensor out_graph[2] = {DevTensor(out_like, st), DevTensor(out_like, st)};
        const LayerSpec layers[2] = {kPlain, kCustom};
        auto record = [&] {
          for (int l = 0; l < 2; ++l) graph.forward(gin.dev_args(out_graph[l]), layers[l], st);
        };
        record();  // warm-up
        CapturedGraph cg;
        ASSERT_NO_FATAL_FAILURE(capture_graph(cg, stream.s, record));
        for (int rep = 0; rep < 5; ++rep) {
          SCOPED_TRACE("replay " + std::to_string(rep));
          const TestBatch b = random_batch(g, mode, rand_int(g, 1, G), batch_shape(), pool);
          table.upload(pool, st);
          const int64_t rows = batch_rows(b, kSpec);
          std::vector<int32_t> slots = new_token_slots(b, pool, kSpec);
          const DenseInputs in(c, rows, slots, g, st);
          slots.resize(std::size_t(graph_rows), 0);  // padding rows store into the padding page
          gin.dq.upload_rows(in.q, st), gin.dk.upload_rows(in.k, st), gin.dloc.upload(i32_tensor(slots), st);
          if (c.mla) gin.dk_rope.upload_rows(in.k_rope, st);
          else gin.dv.upload_rows(in.v, st);
          graph.init_forward_metadata_replay_cuda_graph(G, b.spec(table.view), st);
          ASSERT_EQ(cudaGraphLaunch(cg.exec, stream.s), cudaSuccess);
          eager.init_forward_metadata(b.spec(table.view), st);
          for (int l = 0; l < 2; ++l) {
            HostTensor like = poisoned(DType::bf16, {rows, c.h_q, c.d_v});
            DevTensor out_eager(like, st);
            eager.forward(in.dev_args(out_eager), layers[l], st);
            const HostTensor e = out_eager.download(st), gr = out_graph[l].download(st);
            const std::vector<uint8_t> live = row_bytes(gr.view, 0, rows);
            if (deterministic) {
              EXPECT_EQ(live, bytes_of(e.view)) << "layer " << l << ": deterministic graph != eager";
            } else {
              std::vector<double> gd = to_doubles(gr);
              gd.resize(std::size_t(e.numel()));
              EXPECT_LE(rel_l2(gd, to_doubles(e)), bf16_close()) << "layer " << l;
            }
          }
        }
      }
    }
}

TEST(BackendGpu, DenseMultiStepEqualsSingleSteps) {
  REQUIRE_GPU();
  auto g = rng_for_test();
  GpuStream stream;
  const Stream st = stream.get();
  for (const DenseCase& c : {kMha, kMla}) {
    SCOPED_TRACE(c.mla ? "mla" : "mha");
    const int P = 16, bs = 5;
    TestPool pool(kPoolRows, kCtx, P, g);
    KvPair kv = c.mla ? KvPair::mla_pools(kLayers, pool_slots(pool), MlaCacheFormat::bf16, g)
                      : KvPair::mha_pools(kLayers, pool_slots(pool), c.h_kv, c.d, c.d_v, DType::bf16, g);
    DevPools dev(kv, st);
    DevTable table;
    const TestBatch b = random_batch(g, ForwardMode::draft_decode, bs, batch_shape(), pool);
    table.upload(pool, st);
    DenseMultiStepBackend multi(dense_config(c, P, 0, table.view, dev.buffers(), Device::cuda(0)), st);
    multi.init_forward_metadata(b.spec(table.view), st);
    for (int i = 0; i < multi.num_backends(); ++i) {
      SCOPED_TRACE("step " + std::to_string(i));
      SpeculativeConfig s = kSpec;
      s.step_id = i;
      DenseBackend single(dense_config(c, P, 0, table.view, dev.buffers(), Device::cuda(0), false, s), st);
      single.init_forward_metadata(b.spec(table.view), st);
      std::vector<int32_t> step_slots;
      for (int r = 0; r < bs; ++r) step_slots.push_back(b.drafts[std::size_t(r * kSpec.num_steps + i)]);
      const DenseInputs in(c, bs, step_slots, g, st);
      HostTensor like = poisoned(DType::bf16, {bs, c.h_q, c.d_v});
      DevTensor om(like, st), os(like, st);
      multi.step(i).forward_decode(in.dev_args(om), kPlain, st);
      single.forward_decode(in.dev_args(os), kPlain, st);
      EXPECT_EQ(bytes_of(om.download(st).view), bytes_of(os.download(st).view));
    }
  }
}

// ---- Sparse ----------------------------------------------------------------------------------------

namespace {
constexpr int kTopk = 64, kSparseHeads = 16;

SparseBackendConfig sparse_config(NsaImpl impl, int page, TensorView table, std::vector<KvLayerBuffers> kv,
                                  Device device) {
  SparseBackendConfig c = sparse_backend_config(impl, kSparseHeads, kTopk, page, table, std::move(kv), device);
  c.spec = kSpec;
  c.capacity = kCap;
  return c;
}

struct SparseInputs {
  HostTensor q, k, k_rope, loc, logits;
  DevTensor dq, dk, dk_rope, dloc, dlogits;
  SparseInputs(int64_t rows, const std::vector<int32_t>& slots, std::mt19937_64& g, Stream st)
      : q(random_tensor(DType::bf16, {rows, kSparseHeads, 576}, g)),
        k(random_tensor(DType::bf16, {rows, 512}, g)),
        k_rope(random_tensor(DType::bf16, {rows, 64}, g)),
        loc(i32_tensor(slots)),
        logits(random_tensor(DType::f32, {rows, kCtx}, g, 3.0)),
        dq(q, st),
        dk(k, st),
        dk_rope(k_rope, st),
        dloc(loc, st),
        dlogits(logits, st) {}
};

}  // namespace

TEST(BackendGpu, SparseEveryModeMatchesCpuBackend) {
  REQUIRE_GPU();
  auto g = rng_for_test();
  GpuStream stream;
  const Stream st = stream.get();
  for (NsaImpl impl : {NsaImpl::gather, NsaImpl::sparse_bf16, NsaImpl::sparse_fp8}) {
    SCOPED_TRACE(to_string(impl));
    const int P = 64;
    TestPool pool(kPoolRows, kCtx, P, g);
    const MlaCacheFormat format = impl == NsaImpl::sparse_fp8 ? MlaCacheFormat::fp8_656 : MlaCacheFormat::bf16;
    KvPair kv = KvPair::mla_pools(kLayers, pool_slots(pool), format, g);
    DevPools dev(kv, st);
    DevTable table;
    table.upload(pool, st);
    SparseBackend cpu(sparse_config(impl, P, pool.view(), kv.buffers(0), Device::cpu()));
    SparseBackend gpu(sparse_config(impl, P, table.view, dev.buffers(), Device::cuda(0)), st);
    for (ForwardMode mode : kAllModes) {
      SCOPED_TRACE(to_string(mode));
      const TestBatch b =
          random_batch(g, mode, mode == ForwardMode::idle ? 0 : rand_int(g, 1, kMaxBs), batch_shape(), pool);
      table.upload(pool, st);
      const int64_t rows = batch_rows(b, kSpec);
      cpu.init_forward_metadata(b.spec(pool.view()));
      gpu.init_forward_metadata(b.spec(table.view), st);
      const SparseInputs in(rows, new_token_slots(b, pool, kSpec), g, st);
      const TensorView ci = cpu.topk_transform(in.logits.view, kTopk);
      TensorView gi;
      SKIP_IF_PENDING(gi = gpu.topk_transform(in.dlogits.view, kTopk, st));
      EXPECT_TRUE(same_index_sets(read_i32(gi, st), read_i32(ci), rows, kTopk)) << "top-k slots";
      HostTensor out_cpu = poisoned(DType::bf16, {rows, kSparseHeads, 512});
      DevTensor out_gpu(out_cpu, st);
      cpu.forward({.q = in.q.view,
                   .out = out_cpu.view,
                   .k = in.k.view,
                   .k_rope = in.k_rope.view,
                   .out_cache_loc = in.loc.view,
                   .topk_indices = ci},
                  kPlain);
      SKIP_IF_PENDING(gpu.forward({.q = in.dq.view,
                                   .out = out_gpu.view,
                                   .k = in.dk.view,
                                   .k_rope = in.dk_rope.view,
                                   .out_cache_loc = in.dloc.view,
                                   .topk_indices = gi},
                                  kPlain, st));
      EXPECT_LE(rel_l2(to_doubles(out_gpu.download(st)), to_doubles(out_cpu)), bf16_close());
      EXPECT_TRUE(dev.same_as(kv, st)) << "stored latent";
    }
  }
}

TEST(BackendGpu, SparseCudaGraphReplayEqualsEager) {
  REQUIRE_GPU();
  auto g = rng_for_test();
  GpuStream stream;
  const Stream st = stream.get();
  constexpr int G = kMaxBs;
  for (NsaImpl impl : {NsaImpl::gather, NsaImpl::sparse_bf16}) {
    SCOPED_TRACE(to_string(impl));
    const int P = 64;
    TestPool pool(kPoolRows, kCtx, P, g);
    KvPair kv = KvPair::mla_pools(1, pool_slots(pool), MlaCacheFormat::bf16, g);
    DevPools dev(kv, st);
    DevTable table;
    table.upload(pool, st);
    SparseBackend graph(sparse_config(impl, P, table.view, dev.buffers(), Device::cuda(0)), st);
    SparseBackend eager(sparse_config(impl, P, table.view, dev.buffers(), Device::cuda(0)), st);
    graph.init_cuda_graph_state(G, kCap.max_num_tokens, st);
    for (ForwardMode mode : kGraphModes) {
      SCOPED_TRACE(to_string(mode));
      const int64_t graph_rows = int64_t(G) * rows_per_request(mode);
      graph.init_forward_metadata_capture_cuda_graph(G, int(graph_rows), mode, st);
      SparseInputs gin(graph_rows, std::vector<int32_t>(std::size_t(graph_rows), 0), g, st);
      HostTensor like = poisoned(DType::bf16, {graph_rows, kSparseHeads, 512});
      DevTensor out_graph(like, st);
      auto step = [&] {
        const TensorView idx = graph.topk_transform(gin.dlogits.view, kTopk, st);
        graph.forward({.q = gin.dq.view,
                       .out = out_graph.view,
                       .k = gin.dk.view,
                       .k_rope = gin.dk_rope.view,
                       .out_cache_loc = gin.dloc.view,
                       .topk_indices = idx},
                      kPlain, st);
      };
      SKIP_IF_PENDING(step());  // warm-up outside capture
      CapturedGraph cg;
      ASSERT_NO_FATAL_FAILURE(capture_graph(cg, stream.s, step));
      for (int rep = 0; rep < 5; ++rep) {
        const TestBatch b = random_batch(g, mode, rand_int(g, 1, G), batch_shape(), pool);
        table.upload(pool, st);
        const int64_t rows = batch_rows(b, kSpec);
        std::vector<int32_t> slots = new_token_slots(b, pool, kSpec);
        const SparseInputs in(rows, slots, g, st);
        slots.resize(std::size_t(graph_rows), 0);
        gin.dq.upload_rows(in.q, st), gin.dk.upload_rows(in.k, st), gin.dk_rope.upload_rows(in.k_rope, st);
        gin.dlogits.upload_rows(in.logits, st), gin.dloc.upload(i32_tensor(slots), st);
        graph.init_forward_metadata_replay_cuda_graph(G, b.spec(table.view), st);
        ASSERT_EQ(cudaGraphLaunch(cg.exec, stream.s), cudaSuccess);
        eager.init_forward_metadata(b.spec(table.view), st);
        HostTensor elike = poisoned(DType::bf16, {rows, kSparseHeads, 512});
        DevTensor out_eager(elike, st);
        const TensorView idx = eager.topk_transform(in.dlogits.view, kTopk, st);
        eager.forward({.q = in.dq.view,
                       .out = out_eager.view,
                       .k = in.dk.view,
                       .k_rope = in.dk_rope.view,
                       .out_cache_loc = in.dloc.view,
                       .topk_indices = idx},
                      kPlain, st);
        const HostTensor e = out_eager.download(st), gr = out_graph.download(st);
        std::vector<double> gd = to_doubles(gr);
        gd.resize(std::size_t(e.numel()));
        EXPECT_LE(rel_l2(gd, to_doubles(e)), bf16_close()) << "replay " << rep;
      }
    }
  }
}
