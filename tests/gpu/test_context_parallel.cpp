// Context-parallel paged attention on one GPU: ranks as threads over InProcessGroup (CUDA memory),
// each with its own copy of the caches in which other ranks' pages are NaN, against the fp64 brute
// force by the tolerance rule, the same bits on every rank; and the NCCL communicator with one rank
// (all a one-GPU machine allows; skipped in builds without NCCL).
// Written in a session with no GPU time for it: not yet executed when committed (docs/context_parallel.md).
#include <exception>
#include <functional>
#include <random>
#include <thread>

#include "attnserve/context_parallel.h"
#include "cpu/attention_cases.h"
#include "gpu_test_util.h"

using namespace attnserve;
using namespace attnserve::test;

namespace {

struct GpuCpCase {
  int W = 2, P = 16;
  ForwardMode mode = ForwardMode::decode;
  int draft_token_num = 0;
  std::vector<int> seq_lens;
};

// Runs the case with communicators from make_comm(rank) (one thread per rank); checks the result.
// abort(): called when a rank fails, so the others do not wait for it in the exchange.
template <class MakeComms>
void check_gpu_cp(
    const GpuCpCase& cc, MakeComms&& make_comms, std::mt19937_64& g, const std::function<void()>& abort = [] {}) {
  const int q_len = cc.mode == ForwardMode::target_verify ? cc.draft_token_num : 1;
  PagedSpec s;
  s.q_lens.clear();
  s.k_lens.clear();
  for (int len : cc.seq_lens) {
    s.q_lens.push_back(q_len);
    s.k_lens.push_back(len + (q_len > 1 ? q_len : 0));
  }
  s.h_q = 8, s.h_kv = 2, s.d = 128, s.d_v = 128;
  s.page_size = cc.P;
  s.dtype = DType::bf16;
  s.rows_before = 0, s.rows_after = 0, s.spare_table_cols = 1;
  PagedCase c = make_paged_case(s, g);
  const ReferenceAttention ref64 = reference_paged_attention<double>(c.args);
  const ReferenceAttention ref32 = reference_paged_attention<float>(c.args);
  const int width = int(c.page_table.view.size(1)), rows = int(c.q.view.size(0));
  const std::vector<int32_t> table(c.page_table.ptr<int32_t>(), c.page_table.ptr<int32_t>() + c.page_table.numel());
  const std::vector<int32_t> seq(cc.seq_lens.begin(), cc.seq_lens.end());
  const CpBatch batch{.mode = cc.mode,
                      .seq_lens = seq,
                      .page_table = table,
                      .page_table_width = width,
                      .spec = {.draft_token_num = cc.draft_token_num, .num_steps = 0, .step_id = 0}};
  const DeviceTensor q(c.q);
  HostTensor out_like(DType::bf16, {rows, s.h_q, s.d_v}), lse_like(DType::f32, {rows, s.h_q});
  std::vector<HostTensor> outs(size_t(cc.W)), lses(size_t(cc.W));
  std::vector<std::unique_ptr<Communicator>> comms = make_comms(cc.W);
  std::vector<std::exception_ptr> errors(size_t(cc.W));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < cc.W; ++rank)
    threads.emplace_back([&, rank] {
      try {
        const CpRankPlan p = plan_context_parallel({.world_size = cc.W, .page_size = cc.P}, batch, rank);
        HostTensor pt(DType::i32, {p.num_rows, p.local_width}), cs(DType::i32, {p.num_rows}),
            cu(DType::i32, {p.num_rows + 1});
        std::copy(p.page_table.begin(), p.page_table.end(), pt.ptr<int32_t>());
        std::copy(p.cache_seqlens.begin(), p.cache_seqlens.end(), cs.ptr<int32_t>());
        std::copy(p.cu_seqlens_q.begin(), p.cu_seqlens_q.end(), cu.ptr<int32_t>());
        HostTensor k = c.k_cache, v = c.v_cache;  // other ranks' pages: NaN
        const int64_t page_elems = k.view.numel() / k.view.size(0);
        for (size_t r = 0; r < s.k_lens.size(); ++r)
          for (int gp = 0; gp * cc.P < s.k_lens[r]; ++gp)
            if (gp % cc.W != rank)
              for (int64_t e = 0; e < page_elems; ++e) {
                k.set(int64_t(table[r * size_t(width) + size_t(gp)]) * page_elems + e, NAN);
                v.set(int64_t(table[r * size_t(width) + size_t(gp)]) * page_elems + e, NAN);
              }
        const DeviceTensor dk(k), dv(v), dpt(pt), dcs(cs), dcu(cu);
        DeviceTensor dout(out_like), dlse(lse_like);
        dout.poison();
        dlse.poison();
        PagedAttentionArgs a = c.args;
        a.q = q.view, a.k_cache = dk.view, a.v_cache = dv.view;
        a.page_table = dpt.view, a.cache_seqlens = dcs.view, a.cu_seqlens_q = dcu.view;
        a.out = dout.view, a.lse = dlse.view, a.max_seqlen_q = 1;
        Buffer ws(cp_paged_attention_workspace_size(a, query_device_caps(Device::cuda()), cc.W), Device::cuda());
        cp_paged_attention(a, *comms[size_t(rank)], {ws.data(), ws.bytes()});
        stream_synchronize({});
        outs[size_t(rank)] = dout.download(out_like);
        lses[size_t(rank)] = dlse.download(lse_like);
      } catch (...) {
        errors[size_t(rank)] = std::current_exception();
        abort();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (int rank = 0; rank < cc.W; ++rank) {
    const std::string label = "W=" + std::to_string(cc.W) + " P=" + std::to_string(cc.P) + " " + to_string(cc.mode) +
                              " rank " + std::to_string(rank);
    expect_outputs_match(outs[size_t(rank)].view, lses[size_t(rank)].view, ref64, ref32, label);
    EXPECT_TRUE(same_bytes(outs[size_t(rank)], outs[0])) << label;
  }
}

std::vector<int> seq_lens_for(std::mt19937_64& g, int W, int P) {
  std::uniform_int_distribution<int> len(1, 6 * W * P);
  std::vector<int> v{1, P / 2 + 1};  // shorter than one page per rank: empty local parts
  for (int i = 0; i < 4; ++i) v.push_back(len(g));
  return v;
}

TEST(ContextParallelGpu, InProcessRanksOnOneGpuEqualSingleRank) {
  ATTNSERVE_REQUIRE_GPU();
  std::mt19937_64 g(1921);
  std::vector<std::unique_ptr<InProcessGroup>> groups;  // outlive their communicators
  for (int W : {2, 3})
    for (int P : {1, 16}) {
      auto make = [&groups](int n) {
        groups.push_back(std::make_unique<InProcessGroup>(n, Device::cuda()));
        std::vector<std::unique_ptr<Communicator>> comms;
        for (int r = 0; r < n; ++r) comms.push_back(groups.back()->communicator(r));
        return comms;
      };
      auto abort = [&groups] { groups.back()->abort(); };
      check_gpu_cp({.W = W, .P = P, .mode = ForwardMode::decode, .seq_lens = seq_lens_for(g, W, P)}, make, g, abort);
      check_gpu_cp(
          {.W = W, .P = P, .mode = ForwardMode::target_verify, .draft_token_num = 3, .seq_lens = seq_lens_for(g, W, P)},
          make, g, abort);
    }
}

TEST(ContextParallelGpu, NcclOneRankEqualsSingleRank) {
  ATTNSERVE_REQUIRE_GPU();
  if (!nccl_available()) GTEST_SKIP() << "built without NCCL";
  std::mt19937_64 g(1922);
  std::unique_ptr<NcclCommunicator> nccl;
  try {  // a sandbox without NCCL's transports fails here: reported as a skip, with NCCL's reason
    nccl = NcclCommunicator::create(NcclCommunicator::new_unique_id(), 0, 1);
  } catch (const Error& e) {
    GTEST_SKIP() << "NCCL could not start one rank here: " << e.what();
  }
  auto make = [&nccl](int) {
    std::vector<std::unique_ptr<Communicator>> comms;
    comms.push_back(std::move(nccl));
    return comms;
  };
  check_gpu_cp({.W = 1, .P = 16, .mode = ForwardMode::decode, .seq_lens = seq_lens_for(g, 1, 16)}, make, g);
}

}  // namespace
