// CUDA graphs: decode, draft decode, target verify and draft extend are captured once over
// capacity-sized device buffers (max batch, max pages, max query rows), then replayed for 20
// different live batches written into those buffers. Each replay must equal eager execution of
// the same buffers bit for bit, match the CPU oracle on the live batch, and - in deterministic
// mode - equal the eager run of the live batch alone (launch shapes from the live sizes).
//
// Planner-driven capture (plan.h graph state) is separate: this test drives the kernels directly.
#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>

#include "gpu_attention_case.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

struct Mode {
  const char* name;
  int q_min, q_max;  // query rows per request (uniform for decode/verify, varlen for draft extend)
  int page_size;
  bool deterministic;
};

struct Capacity {
  int b = 12, q_max = 4, max_pages = 0, num_pages = 0;
  int h_q = 16, h_kv = 4, d = 128, ctx_max = 1200;
};

void fill_random(HostTensor& t, std::mt19937_64& g, float r) { fill_uniform(t, g, -r, r); }

void run_mode(const Mode& m, std::mt19937_64& g) {
  Capacity cap;
  cap.q_max = m.q_max;
  cap.max_pages = (cap.ctx_max + m.page_size - 1) / m.page_size;
  cap.num_pages = cap.b * cap.max_pages + 1;
  const int total_q_cap = cap.b * cap.q_max;
  // Capacity buffers (host mirrors, then device).
  HostTensor q(DType::bf16, {total_q_cap, cap.h_q, cap.d});
  HostTensor kc(DType::bf16, {cap.num_pages, m.page_size, cap.h_kv, cap.d}), vc = kc;
  fill_random(kc, g, 1.f);
  fill_random(vc, g, 1.f);
  HostTensor pt(DType::i32, {cap.b, cap.max_pages}), sl(DType::i32, {cap.b}), cu(DType::i32, {cap.b + 1});
  HostTensor out_h(DType::bf16, {total_q_cap, cap.h_q, cap.d}), lse_h(DType::f32, {total_q_cap, cap.h_q});
  DeviceTensor dq(q), dk(kc), dv(vc), dpt(pt), dsl(sl), dcu(cu), dout(out_h), dlse(lse_h);
  PagedAttentionArgs a{.q = dq.view,
                       .k_cache = dk.view,
                       .v_cache = dv.view,
                       .page_table = dpt.view,
                       .cache_seqlens = dsl.view,
                       .cu_seqlens_q = dcu.view,
                       .out = dout.view};
  a.lse = dlse.view;
  a.max_seqlen_q = cap.q_max;
  a.softmax_scale = 1.f / std::sqrt(float(cap.d));
  a.deterministic = m.deterministic;
  const std::size_t ws_bytes = paged_attention_workspace_size(a, query_device_caps(Device::cuda()));
  Buffer ws(std::max<std::size_t>(ws_bytes, 256), Device::cuda());
  const Workspace w{ws.data(), ws.bytes()};

  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  // Fill the buffers with a first live batch (capture needs valid contents only for the warm-up).
  auto write_batch = [&](int live_b) -> std::vector<std::pair<int, int>> {
    std::vector<int> ids(static_cast<size_t>(cap.num_pages));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), g);
    std::uniform_int_distribution<int> ql(m.q_min, m.q_max), kl(1, cap.ctx_max);
    std::vector<std::pair<int, int>> lens;  // (q_len, k_len) of the live requests
    cu.ptr<int32_t>()[0] = 0;
    int next = 0;
    for (int r = 0; r < cap.b; ++r) {
      int qlen = 0, klen = 0;
      if (r < live_b) {
        qlen = ql(g);
        klen = std::max(qlen, kl(g));
        lens.push_back({qlen, klen});
      }
      sl.ptr<int32_t>()[r] = klen;
      cu.ptr<int32_t>()[r + 1] = cu.ptr<int32_t>()[r] + qlen;
      for (int i = 0; i < cap.max_pages; ++i)
        pt.ptr<int32_t>()[r * cap.max_pages + i] = i * m.page_size < klen ? ids[size_t(next++)] : 0;
    }
    fill_random(q, g, 2.f);
    dq.upload(q);
    dpt.upload(pt);
    dsl.upload(sl);
    dcu.upload(cu);
    return lens;
  };
  write_batch(cap.b);
  paged_attention(a, w, Stream{stream});  // warm-up (module load, attributes) outside capture
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  paged_attention(a, w, Stream{stream});
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  std::uniform_int_distribution<int> live(1, cap.b);
  for (int replay = 0; replay < 20; ++replay) {
    SCOPED_TRACE(std::string(m.name) + " replay " + std::to_string(replay));
    const auto lens = write_batch(live(g));
    const int live_b = int(lens.size());
    const int live_rows = cu.ptr<int32_t>()[live_b];
    dout.poison();
    dlse.poison();
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    HostTensor g_out = dout.download(out_h), g_lse = dlse.download(lse_h);

    dout.poison();
    dlse.poison();
    paged_attention(a, w, Stream{stream});
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    HostTensor e_out = dout.download(out_h), e_lse = dlse.download(lse_h);
    const size_t row_bytes = size_t(cap.h_q) * cap.d * 2;
    EXPECT_EQ(std::memcmp(g_out.bytes.data(), e_out.bytes.data(), live_rows * row_bytes), 0) << "graph != eager";
    EXPECT_EQ(std::memcmp(g_lse.bytes.data(), e_lse.bytes.data(), size_t(live_rows) * cap.h_q * 4), 0);

    // The CPU oracle on the live batch (host mirrors hold the same contents).
    HostTensor ref(DType::bf16, {total_q_cap, cap.h_q, cap.d}), ref64(DType::f32, {total_q_cap, cap.h_q, cap.d});
    PagedAttentionArgs h{.q = q.view,
                         .k_cache = kc.view,
                         .v_cache = vc.view,
                         .page_table = pt.view,
                         .cache_seqlens = sl.view,
                         .cu_seqlens_q = cu.view,
                         .out = ref.view};
    h.max_seqlen_q = cap.q_max;
    h.softmax_scale = a.softmax_scale;
    paged_attention(h);
    HostTensor q32 = widen(q), k32 = widen(kc), v32 = widen(vc);
    PagedAttentionArgs h64 = h;
    h64.q = q32.view;
    h64.k_cache = k32.view;
    h64.v_cache = v32.view;
    h64.out = ref64.view;
    cpu::paged_attention(h64, true);
    const auto r64 = rows_as_doubles(ref64, 0, live_rows);
    const double tol = tolerance_by_rule(rel_l2(rows_as_doubles(ref, 0, live_rows), r64), DType::bf16);
    EXPECT_LE(rel_l2(rows_as_doubles(g_out, 0, live_rows), r64), tol);

    if (m.deterministic) {  // batch-size invariance: the live batch alone, eager, live shapes
      TensorView pt_live = dpt.view.slice(0, 0, live_b), sl_live = dsl.view.slice(0, 0, live_b),
                 cu_live = dcu.view.slice(0, 0, live_b + 1);
      int live_max_q = 0, live_max_k = 0;
      for (auto [ql, kl] : lens) {
        live_max_q = std::max(live_max_q, ql);
        live_max_k = std::max(live_max_k, kl);
      }
      // A page-table view as narrow as this batch needs (another split count than the capture's).
      const int live_pages = (live_max_k + m.page_size - 1) / m.page_size;
      pt_live = pt_live.slice(1, 0, live_pages);
      PagedAttentionArgs l = a;
      l.q = dq.view.slice(0, 0, live_rows);
      l.out = dout.view.slice(0, 0, live_rows);
      l.lse = dlse.view.slice(0, 0, live_rows);
      l.page_table = pt_live;
      l.cache_seqlens = sl_live;
      l.cu_seqlens_q = cu_live;
      l.max_seqlen_q = live_max_q;
      dout.poison();
      paged_attention(l, w, Stream{stream});
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      HostTensor l_out = dout.download(out_h);
      EXPECT_EQ(std::memcmp(g_out.bytes.data(), l_out.bytes.data(), live_rows * row_bytes), 0)
          << "deterministic: bits depend on the batch capacity";
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace

TEST(GpuGraph, DecodeCapturedReplays20Batches) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  run_mode({"decode", 1, 1, 16, false}, g);
  run_mode({"decode_deterministic", 1, 1, 16, true}, g);
}

TEST(GpuGraph, DraftDecodeCapturedReplays20Batches) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  run_mode({"draft_decode", 1, 1, 1, false}, g);
}

TEST(GpuGraph, TargetVerifyCapturedReplays20Batches) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  run_mode({"target_verify", 4, 4, 16, false}, g);
  run_mode({"target_verify_deterministic", 4, 4, 16, true}, g);
}

TEST(GpuGraph, DraftExtendCapturedReplays20Batches) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  run_mode({"draft_extend", 1, 4, 64, false}, g);
}
