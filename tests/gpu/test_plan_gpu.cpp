// Planners on the GPU against the same planners on the CPU: eager plans of every mode and graph
// replays give identical metadata; the device index transform equals the host one; replays keep
// their addresses. Run on the device machine (scripts/gpu_check.sh); skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "backend_gpu_util.h"
#include "common/test_util.h"
#include "cpu/plan_test_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

#define REQUIRE_GPU() \
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device"

// The pool's table on the GPU (re-uploaded after each random_batch, which edits the table).
struct DeviceTable {
  Buffer buf;
  TensorView view;
  void upload(const TestPool& p, Stream st) {
    if (!buf.data()) buf = Buffer(p.table.size() * sizeof(int32_t), Device::cuda(0));
    view = TensorView::contiguous(buf.data(), DType::i32, {p.pool_size, p.max_ctx}, Device::cuda(0));
    copy_async(view, TensorView::contiguous(const_cast<int32_t*>(p.table.data()), DType::i32, {p.pool_size, p.max_ctx}),
               st);
  }
};

std::vector<int64_t> everything(const DenseMetadata& m, Stream st) {
  std::vector<int64_t> v{int(m.mode),
                         m.batch_size,
                         m.num_q_rows,
                         m.max_seq_len_q,
                         m.max_seq_len_k,
                         m.window_left,
                         m.has_local_attn,
                         m.local_attn_metadata.num_virtual_batches,
                         m.local_attn_metadata.local_max_query_len,
                         m.local_attn_metadata.local_max_seq_len};
  for (const TensorView* t : {&m.cache_seqlens_int32, &m.cu_seqlens_q, &m.cu_seqlens_k, &m.page_table,
                              &m.local_attn_metadata.local_query_start_loc, &m.local_attn_metadata.local_seqused_k,
                              &m.local_attn_metadata.local_block_table}) {
    for (int d = 0; d < t->ndim; ++d) v.push_back(t->shape[std::size_t(d)]);
    for (int32_t x : read_i32(*t, st)) v.push_back(x);
  }
  return v;
}
std::vector<int64_t> everything(const SparseMetadata& m, Stream st) {
  std::vector<int64_t> v{int(m.mode), m.batch_size, m.num_rows, m.max_seq_len_q, m.max_seq_len_k};
  v.insert(v.end(), m.nsa_extend_seq_lens_list.begin(), m.nsa_extend_seq_lens_list.end());
  for (const TensorView* t :
       {&m.cache_seqlens_int32, &m.cu_seqlens_q, &m.cu_seqlens_k, &m.page_table_1, &m.real_page_table,
        &m.nsa_seqlens_expanded, &m.nsa_cache_seqlens_int32, &m.nsa_cu_seqlens_q, &m.nsa_cu_seqlens_k}) {
    for (int d = 0; d < t->ndim; ++d) v.push_back(t->shape[std::size_t(d)]);
    for (int32_t x : read_i32(*t, st)) v.push_back(x);
  }
  return v;
}

const SpeculativeConfig kSpec{.draft_token_num = 4, .num_steps = 4, .step_id = 2};
const ForwardMode kModes[] = {ForwardMode::decode,        ForwardMode::extend,       ForwardMode::draft_decode,
                              ForwardMode::target_verify, ForwardMode::draft_extend, ForwardMode::idle};
constexpr int kCtx = 700;
const PlanCapacity kCap{.max_bs = 32, .max_num_tokens = 2048, .max_context_len = kCtx};

}  // namespace

TEST(PlanGpu, DenseEagerMatchesCpu) {
  REQUIRE_GPU();
  auto g = rng_for_test();
  GpuStream stream;
  for (int P : {1, 16, 64})
    for (int chunk : {0, 2 * P})
      for (ForwardMode mode : kModes) {
        SCOPED_TRACE(std::string(to_string(mode)) + " page " + std::to_string(P) + " chunk " + std::to_string(chunk));
        DensePlanConfig cfg{.page_size = P, .attention_chunk_size = chunk, .spec = kSpec};
        DensePlanner cpu(cfg, Device::cpu()), gpu(cfg, Device::cuda(0));
        cpu.init(kCap);
        gpu.init(kCap, stream.get());
        TestPool pool(40, kCtx, P, g);
        DeviceTable dt;
        for (int iter = 0; iter < 3; ++iter) {
          const int bs = mode == ForwardMode::idle ? 0 : rand_int(g, 1, 32);
          TestBatch b =
              random_batch(g, mode, bs, {.max_ctx = kCtx, .max_q = 60, .prefix = iter != 1, .spec = kSpec}, pool);
          dt.upload(pool, stream.get());
          const DenseMetadata& mg = gpu.plan(b.spec(dt.view), stream.get());
          const DenseMetadata& mc = cpu.plan(b.spec(pool.view()));
          ASSERT_EQ(everything(mg, stream.get()), everything(mc, {}));
          check_dense(mg, b, pool, cfg, stream.get());
        }
      }
}

TEST(PlanGpu, SparseEagerMatchesCpu) {
  REQUIRE_GPU();
  auto g = rng_for_test();
  GpuStream stream;
  for (int P : {1, 64})
    for (ForwardMode mode : kModes) {
      SCOPED_TRACE(std::string(to_string(mode)) + " page " + std::to_string(P));
      SparsePlanConfig cfg{.page_size = P, .topk = 96, .spec = kSpec};
      SparsePlanner cpu(cfg, Device::cpu()), gpu(cfg, Device::cuda(0));
      cpu.init(kCap);
      gpu.init(kCap, stream.get());
      TestPool pool(40, kCtx, P, g);
      DeviceTable dt;
      for (int iter = 0; iter < 3; ++iter) {
        const int bs = mode == ForwardMode::idle ? 0 : rand_int(g, 1, 32);
        TestBatch b =
            random_batch(g, mode, bs, {.max_ctx = kCtx, .max_q = 60, .prefix = iter != 1, .spec = kSpec}, pool);
        dt.upload(pool, stream.get());
        const SparseMetadata& mg = gpu.plan(b.spec(dt.view), stream.get());
        const SparseMetadata& mc = cpu.plan(b.spec(pool.view()));
        ASSERT_EQ(everything(mg, stream.get()), everything(mc, {}));
        check_sparse(mg, b, pool, cfg, stream.get());
      }
    }
}

TEST(PlanGpu, GraphReplayMatchesCpuAndKeepsAddresses) {
  REQUIRE_GPU();
  auto g = rng_for_test();
  GpuStream stream;
  for (ForwardMode mode :
       {ForwardMode::decode, ForwardMode::draft_decode, ForwardMode::target_verify, ForwardMode::draft_extend}) {
    SCOPED_TRACE(to_string(mode));
    const int P = 16;
    DensePlanConfig dcfg{.page_size = P, .attention_chunk_size = 64, .spec = kSpec};
    SparsePlanConfig scfg{.page_size = P, .topk = 50, .spec = kSpec};
    DensePlanner dc(dcfg, Device::cpu()), dg(dcfg, Device::cuda(0));
    SparsePlanner sc(scfg, Device::cpu()), sg(scfg, Device::cuda(0));
    dc.init(kCap), sc.init(kCap);
    dg.init(kCap, stream.get()), sg.init(kCap, stream.get());
    TestPool pool(40, kCtx, P, g);
    DeviceTable dt;
    const DenseMetadata& dcap = dg.capture(24, mode, stream.get());
    const SparseMetadata& scap = sg.capture(24, mode, stream.get());
    dc.capture(24, mode), sc.capture(24, mode);
    const void* dptr = dcap.page_table.data;
    const void* sptr = scap.nsa_cu_seqlens_k.data;
    for (int live : {24, 5, 17}) {
      TestBatch b = random_batch(g, mode, live, {.max_ctx = kCtx, .spec = kSpec}, pool);
      dt.upload(pool, stream.get());
      const DenseMetadata& dgm = dg.replay(24, mode, b.spec(dt.view), stream.get());
      const SparseMetadata& sgm = sg.replay(24, mode, b.spec(dt.view), stream.get());
      const DenseMetadata& dcm = dc.replay(24, mode, b.spec(pool.view()));
      const SparseMetadata& scm = sc.replay(24, mode, b.spec(pool.view()));
      EXPECT_EQ(dgm.page_table.data, dptr);
      EXPECT_EQ(sgm.nsa_cu_seqlens_k.data, sptr);
      const int per = mode == ForwardMode::target_verify ? kSpec.draft_token_num : 1;
      ASSERT_EQ(live_contents(dgm, live, P, stream.get()), live_contents(dcm, live, P));
      ASSERT_EQ(live_contents(sgm, live, per, stream.get()), live_contents(scm, live, per));
      check_dense(dgm, b, pool, dcfg, stream.get());
      check_sparse(sgm, b, pool, scfg, stream.get());
    }
  }
}

TEST(PlanGpu, TransformIndexMatchesCpu) {
  REQUIRE_GPU();
  auto g = rng_for_test();
  GpuStream stream;
  for (int iter = 0; iter < 20; ++iter) {
    const int R = rand_int(g, 1, 40), W = rand_int(g, 1, 3000), k = rand_int(g, 1, 2048);
    const bool prefill = iter % 2 == 1;
    std::vector<int32_t> table(std::size_t(R) * W), cu{0};
    for (auto& v : table) v = rand_int(g, 0, 1 << 30);
    for (int r = 0; r < R && prefill; ++r) cu.push_back(cu.back() + rand_int(g, 0, 9));
    const int rows = prefill ? cu.back() + 2 : R;
    std::vector<int32_t> idx(std::size_t(rows) * k), out_cpu(idx.size()), out_gpu(idx.size());
    for (auto& v : idx) v = rand_int(g, -2, W + 2);
    TransformIndexArgs a{.page_table_1 = TensorView::contiguous(table.data(), DType::i32, {R, W}),
                         .topk_indices = TensorView::contiguous(idx.data(), DType::i32, {rows, k}),
                         .out = TensorView::contiguous(out_cpu.data(), DType::i32, {rows, k})};
    if (prefill) a.cu_seqlens_q = TensorView::contiguous(cu.data(), DType::i32, {R + 1});
    transform_index_page_table(a);

    auto to_gpu = [&](const TensorView& h, Buffer& b) {
      b = Buffer(std::max<std::size_t>(h.nbytes(), 4), Device::cuda(0));
      TensorView d = TensorView::contiguous(b.data(), DType::i32, h.shape.data(), h.ndim, Device::cuda(0));
      copy_async(d, h, stream.get());
      return d;
    };
    Buffer bt, bi, bo, bc;
    TransformIndexArgs d{.page_table_1 = to_gpu(a.page_table_1, bt),
                         .topk_indices = to_gpu(a.topk_indices, bi),
                         .out = to_gpu(a.out, bo)};
    if (prefill) d.cu_seqlens_q = to_gpu(a.cu_seqlens_q, bc);
    memset_async(d.out, 0x7f, stream.get());
    transform_index_page_table(d, stream.get());
    ASSERT_EQ(read_i32(d.out, stream.get()), out_cpu);
    transform_index_page_table(d, stream.get());  // twice: identical bits
    ASSERT_EQ(read_i32(d.out, stream.get()), out_cpu);
  }
}

// Host cost of planning on the GPU (printed, not asserted): the time plan()/replay() take to return,
// including launching the copies and gathers, without waiting for them.
TEST(PlanGpu, HostCostPrinted) {
  REQUIRE_GPU();
  auto g = rng_for_test();
  GpuStream stream;
  const int ctx = 8192;
  TestPool pool(300, ctx, 1, g);
  DeviceTable dt;
  dt.upload(pool, stream.get());
  PlanCapacity cap{.max_bs = 256, .max_num_tokens = 16384, .max_context_len = ctx};
  DensePlanner dense(DensePlanConfig{.page_size = 1}, Device::cuda(0));
  SparsePlanner sparse(SparsePlanConfig{.page_size = 64, .topk = 2048}, Device::cuda(0));
  dense.init(cap, stream.get());
  sparse.init(cap, stream.get());
  TestBatch dec = random_batch(g, ForwardMode::decode, 256, {.max_ctx = 4096}, pool);
  TestBatch ext = random_batch(g, ForwardMode::extend, 64, {.max_ctx = 4096, .max_q = 256}, pool);
  dt.upload(pool, stream.get());
  auto time_us = [&](auto&& fn) {
    for (int i = 0; i < 20; ++i) fn();
    stream_synchronize(stream.get());
    const auto t0 = std::chrono::steady_clock::now();
    const int n = 200;
    for (int i = 0; i < n; ++i) fn();
    const auto t1 = std::chrono::steady_clock::now();
    stream_synchronize(stream.get());
    return std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
  };
  dense.capture(256, ForwardMode::decode, stream.get());
  std::printf(
      "[plan host cost, GPU] dense decode 256: %.1f us, dense replay 256: %.1f us, sparse decode 256: %.1f us,"
      " dense extend 64: %.1f us, sparse extend 64: %.1f us\n",
      time_us([&] { dense.plan(dec.spec(dt.view), stream.get()); }),
      time_us([&] { dense.replay(256, ForwardMode::decode, dec.spec(dt.view), stream.get()); }),
      time_us([&] { sparse.plan(dec.spec(dt.view), stream.get()); }),
      time_us([&] { dense.plan(ext.spec(dt.view), stream.get()); }),
      time_us([&] { sparse.plan(ext.spec(dt.view), stream.get()); }));
}
