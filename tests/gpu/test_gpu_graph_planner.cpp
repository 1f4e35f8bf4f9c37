// Planner-driven CUDA graphs: DensePlanner::capture() gives the static metadata, paged attention is
// captured once over it, then 20 different live batches are replayed (DensePlanner::replay()
// rewrites the buffers in place). Each replay is compared with eager execution of the same batch
// (DensePlanner::plan(), launch shapes from the live batch): bit for bit in deterministic mode
// (batch invariance), within bf16 rounding otherwise. Modes: decode, draft decode, target verify,
// draft extend.
#include <cuda_runtime.h>

#include <algorithm>

#include "attnserve/plan.h"
#include "cpu/plan_test_util.h"
#include "gpu_attention_case.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

constexpr int kHq = 16, kHkv = 4, kD = 128, kPage = 16, kCtx = 700, kBsCap = 24;
const SpeculativeConfig kSpecCfg{.draft_token_num = 4, .num_steps = 4, .step_id = 2};

void run_planner_graph(ForwardMode mode, bool deterministic, std::mt19937_64& g) {
  cudaStream_t cs;
  ASSERT_EQ(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), cudaSuccess);
  const Stream st{cs};
  const PlanCapacity cap{.max_bs = kBsCap, .max_num_tokens = kBsCap * 4, .max_context_len = kCtx};
  DensePlanner planner(DensePlanConfig{.page_size = kPage, .spec = kSpecCfg}, Device::cuda());
  planner.init(cap, st);
  TestPool pool(40, kCtx, kPage, g);
  const int pages_per_row = (kCtx + kPage - 1) / kPage, num_pages = pool.pool_size * pages_per_row + 1;

  HostTensor kc(DType::bf16, {num_pages, kPage, kHkv, kD}), vc(DType::bf16, {num_pages, kPage, kHkv, kD});
  fill_uniform(kc, g);
  fill_uniform(vc, g);
  DeviceTensor dk(kc), dv(vc);
  HostTensor q_h(DType::bf16, {cap.max_num_tokens, kHq, kD}), out_h(DType::bf16, {cap.max_num_tokens, kHq, kD});
  DeviceTensor dq(q_h), dout(out_h);
  Buffer table(pool.table.size() * 4, Device::cuda());
  const TensorView table_view =
      TensorView::contiguous(table.data(), DType::i32, {pool.pool_size, pool.max_ctx}, Device::cuda());
  auto upload_table = [&] {
    copy_async(table_view, pool.view(), st);
    stream_synchronize(st);
  };
  auto args_of = [&](const DenseMetadata& m) {
    PagedAttentionArgs a{.q = dq.view.slice(0, 0, m.num_q_rows),
                         .k_cache = dk.view,
                         .v_cache = dv.view,
                         .page_table = m.page_table,
                         .cache_seqlens = m.cache_seqlens_int32,
                         .cu_seqlens_q = m.cu_seqlens_q,
                         .out = dout.view.slice(0, 0, m.num_q_rows)};
    a.max_seqlen_q = m.max_seq_len_q;
    a.softmax_scale = 1.f / std::sqrt(float(kD));
    a.deterministic = deterministic;
    return a;
  };

  // Capture: metadata first (outside stream capture), then the attention launch.
  TestBatch first = random_batch(g, mode, kBsCap, {.max_ctx = kCtx, .spec = kSpecCfg}, pool);
  upload_table();
  const DenseMetadata& cap_md = planner.capture(kBsCap, mode, st);
  planner.replay(kBsCap, mode, first.spec(table_view), st);
  const PagedAttentionArgs ga = args_of(cap_md);
  Buffer ws(std::max<std::size_t>(paged_attention_workspace_size(ga, query_device_caps(Device::cuda())), 256),
            Device::cuda());
  const Workspace w{ws.data(), ws.bytes()};
  paged_attention(ga, w, st);  // warm-up outside capture
  ASSERT_EQ(cudaStreamSynchronize(cs), cudaSuccess);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  paged_attention(ga, w, st);
  ASSERT_EQ(cudaStreamEndCapture(cs, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  const void* pt_addr = cap_md.page_table.data;

  for (int replay = 0; replay < 20; ++replay) {
    SCOPED_TRACE(std::string(to_string(mode)) + (deterministic ? " deterministic" : "") + " replay " +
                 std::to_string(replay));
    const int live = rand_int(g, 1, kBsCap);
    TestBatch b = random_batch(g, mode, live, {.max_ctx = kCtx, .spec = kSpecCfg}, pool);
    upload_table();
    fill_uniform(q_h, g, -2.f, 2.f);
    dq.upload(q_h);
    const DenseMetadata& rm = planner.replay(kBsCap, mode, b.spec(table_view), st);
    EXPECT_EQ(rm.page_table.data, pt_addr) << "replay moved the captured buffers";
    dout.poison();
    ASSERT_EQ(cudaGraphLaunch(exec, cs), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(cs), cudaSuccess);
    HostTensor g_out = dout.download(out_h);

    const DenseMetadata& em = planner.plan(b.spec(table_view), st);  // eager: live shapes
    const int rows = em.num_q_rows;
    const PagedAttentionArgs ea = args_of(em);
    Buffer ews(std::max<std::size_t>(paged_attention_workspace_size(ea, query_device_caps(Device::cuda())), 256),
               Device::cuda());
    dout.poison();
    paged_attention(ea, Workspace{ews.data(), ews.bytes()}, st);
    ASSERT_EQ(cudaStreamSynchronize(cs), cudaSuccess);
    HostTensor e_out = dout.download(out_h);
    if (deterministic) {
      EXPECT_EQ(std::memcmp(g_out.bytes.data(), e_out.bytes.data(), size_t(rows) * kHq * kD * 2), 0)
          << "graph replay != eager (deterministic mode)";
    } else {
      const double err = rel_l2(rows_as_doubles(g_out, 0, rows), rows_as_doubles(e_out, 0, rows));
      EXPECT_LE(err, 2 * unit_roundoff(DType::bf16)) << "graph replay vs eager rel_l2 " << err;
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(cs);
}

const ForwardMode kGraphModes[] = {ForwardMode::decode, ForwardMode::draft_decode, ForwardMode::target_verify,
                                   ForwardMode::draft_extend};

}  // namespace

TEST(GpuGraphPlanner, CapturedOnceReplays20BatchesDeterministic) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (ForwardMode m : kGraphModes) run_planner_graph(m, true, g);
}

TEST(GpuGraphPlanner, CapturedOnceReplays20Batches) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (ForwardMode m : kGraphModes) run_planner_graph(m, false, g);
}
