// Context-parallel attention on the CPU, ranks as threads (InProcessGroup): every rank plans its
// share (plan_context_parallel), holds a copy of the caches in which every page another rank owns
// is NaN (reading one poisons the result), runs cp_paged_attention / cp_mla_attention /
// cp_sparse_mla, and must give the single-rank result: against the fp64 brute force by the
// tolerance rule (DESIGN.md), lse included, the same bits on every rank. Random inputs, page sizes
// 1 / 4 / 16 (64 for sparse), 2 / 3 / 4 ranks, requests shorter than one page per rank (ranks with
// no local keys: lse -inf parts), decode, draft_decode and target_verify.
#include <gtest/gtest.h>

#include <exception>
#include <mutex>
#include <numeric>
#include <random>
#include <span>
#include <thread>

#include "attnserve/context_parallel.h"
#include "cpu/attention_cases.h"
#include "cpu/reference_attention.h"
#include "cpu/sparse_mla_problem.h"

namespace attnserve::test {
namespace {

// Runs f(rank, comm) on one thread per rank; rethrows the first rank's exception.
template <class F>
void run_ranks(int world_size, F&& f) {
  InProcessGroup group(world_size);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < world_size; ++r) comms.push_back(group.communicator(r));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world_size));
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r)
    threads.emplace_back([&, r] {
      try {
        f(r, *comms[size_t(r)]);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
        group.abort();  // the other ranks must not wait for this one
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// The copy of a paged cache [num_pages, ...] that rank `rank` holds: pages other ranks own are NaN.
HostTensor rank_cache(const HostTensor& cache, const std::vector<int32_t>& table, int width,
                      const std::vector<int>& k_lens, int P, int W, int rank) {
  HostTensor mine = cache;
  const int64_t page_elems = cache.view.numel() / cache.view.size(0);
  for (size_t r = 0; r < k_lens.size(); ++r)
    for (int g = 0; g * P < k_lens[r]; ++g) {
      if (g % W == rank) continue;
      const int64_t page = table[r * size_t(width) + size_t(g)];
      for (int64_t e = 0; e < page_elems; ++e) mine.set(page * page_elems + e, NAN);
    }
  return mine;
}

struct DenseCpCase {
  ForwardMode mode = ForwardMode::decode;
  int W = 2, P = 4;
  std::vector<int> seq_lens;
  SpeculativeConfig spec{};
  DType dtype = DType::f32;
  bool mla = false;
  bool softcap = false;
  bool by_head = false;   // the head-sliced exchange: rank k gets heads slice k
  int h_q = 8, h_kv = 2;  // h_kv: dense only
};

// The reference's heads [h0, h0 + n) (rows unchanged).
ReferenceAttention head_slice_of(const ReferenceAttention& r, int64_t h_q, int64_t d_v, int64_t h0, int64_t n) {
  ReferenceAttention o;
  o.row_in_batch = r.row_in_batch;
  const int64_t rows = int64_t(r.row_in_batch.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t h = h0; h < h0 + n; ++h) {
      o.lse.push_back(r.lse[size_t(i * h_q + h)]);
      for (int64_t c = 0; c < d_v; ++c) o.out.push_back(r.out[size_t((i * h_q + h) * d_v + c)]);
    }
  return o;
}

int q_len_of(const DenseCpCase& c) { return c.mode == ForwardMode::target_verify ? c.spec.draft_token_num : 1; }
int extra_keys_of(const DenseCpCase& c) {
  if (c.mode == ForwardMode::target_verify) return c.spec.draft_token_num;
  if (c.mode == ForwardMode::draft_decode) return c.spec.step_id + 1;
  return 0;
}

void check_dense_cp(const DenseCpCase& cc, std::mt19937_64& g, const std::string& label) {
  PagedSpec s;
  for (int len : cc.seq_lens) {
    s.q_lens.push_back(q_len_of(cc));
    s.k_lens.push_back(len + extra_keys_of(cc));
  }
  s.q_lens.erase(s.q_lens.begin());  // PagedSpec's defaults hold one request
  s.k_lens.erase(s.k_lens.begin());
  s.page_size = cc.P;
  s.dtype = cc.dtype;
  s.rows_before = 0;
  s.rows_after = 0;
  s.spare_table_cols = 1;
  s.softcap = cc.softcap ? 3.f : 0.f;
  if (cc.mla) {
    s.h_q = cc.h_q, s.h_kv = 1, s.d = 64 + 16, s.d_v = 64;
  } else {
    s.h_q = cc.h_q, s.h_kv = cc.h_kv, s.d = 32, s.d_v = 48;
  }
  const int64_t out_heads = cc.by_head ? s.h_q / cc.W : s.h_q;
  PagedCase c = make_paged_case(s, g);
  const ReferenceAttention ref64 =
      cc.mla ? reference_mla_attention<double>(mla_args_of(c)) : reference_paged_attention<double>(c.args);
  const ReferenceAttention ref32 =
      cc.mla ? reference_mla_attention<float>(mla_args_of(c)) : reference_paged_attention<float>(c.args);

  const int width = int(c.page_table.view.size(1)), rows = int(c.q.view.size(0));
  const std::vector<int32_t> table(c.page_table.ptr<int32_t>(), c.page_table.ptr<int32_t>() + c.page_table.numel());
  const CpConfig config{.world_size = cc.W, .page_size = cc.P};
  const std::vector<int32_t> seq(cc.seq_lens.begin(), cc.seq_lens.end());
  const CpBatch b{.mode = cc.mode, .seq_lens = seq, .page_table = table, .page_table_width = width, .spec = cc.spec};

  std::vector<HostTensor> outs(size_t(cc.W)), lses(size_t(cc.W));
  run_ranks(cc.W, [&](int rank, Communicator& comm) {
    const CpRankPlan p = plan_context_parallel(config, b, rank);
    EXPECT_EQ(p.num_rows, rows);
    HostTensor pt(DType::i32, {p.num_rows, p.local_width}), cs(DType::i32, {p.num_rows}),
        cu(DType::i32, {p.num_rows + 1});
    std::copy(p.page_table.begin(), p.page_table.end(), pt.ptr<int32_t>());
    std::copy(p.cache_seqlens.begin(), p.cache_seqlens.end(), cs.ptr<int32_t>());
    std::copy(p.cu_seqlens_q.begin(), p.cu_seqlens_q.end(), cu.ptr<int32_t>());
    const HostTensor k = rank_cache(c.k_cache, table, width, s.k_lens, cc.P, cc.W, rank);
    const HostTensor v = rank_cache(c.v_cache, table, width, s.k_lens, cc.P, cc.W, rank);
    HostTensor& out = outs[size_t(rank)];
    HostTensor& lse = lses[size_t(rank)];
    out = HostTensor(c.out.view.dtype, {rows, out_heads, c.out.view.size(2)});
    lse = HostTensor(DType::f32, {rows, out_heads});
    poison(out);
    poison(lse);
    PagedAttentionArgs a = c.args;
    a.k_cache = k.view, a.v_cache = v.view;
    a.page_table = pt.view, a.cache_seqlens = cs.view, a.cu_seqlens_q = cu.view;
    a.out = out.view, a.lse = lse.view, a.max_seqlen_q = 1;
    if (cc.mla) {
      MlaAttentionArgs m = mla_args_of(c);
      m.kv_cache = k.view;
      m.page_table = pt.view, m.cache_seqlens = cs.view, m.cu_seqlens_q = cu.view;
      m.out = out.view, m.lse = lse.view, m.max_seqlen_q = 1;
      if (cc.by_head) {
        Buffer ws(cp_mla_attention_by_head_workspace_size(m, DeviceCaps::cpu(), cc.W), Device::cpu());
        cp_mla_attention_by_head(m, comm, {ws.data(), ws.bytes()});
      } else {
        Buffer ws(cp_mla_attention_workspace_size(m, DeviceCaps::cpu(), cc.W), Device::cpu());
        cp_mla_attention(m, comm, {ws.data(), ws.bytes()});
      }
    } else if (cc.by_head) {
      Buffer ws(cp_paged_attention_by_head_workspace_size(a, DeviceCaps::cpu(), cc.W), Device::cpu());
      cp_paged_attention_by_head(a, comm, {ws.data(), ws.bytes()});
    } else {
      Buffer ws(cp_paged_attention_workspace_size(a, DeviceCaps::cpu(), cc.W), Device::cpu());
      cp_paged_attention(a, comm, {ws.data(), ws.bytes()});
    }
  });
  const int64_t d_v = c.out.view.size(2);
  for (int rank = 0; rank < cc.W; ++rank) {
    const std::string l = label + " rank " + std::to_string(rank);
    if (cc.by_head) {  // rank k: heads [k * h / W, (k + 1) * h / W)
      expect_outputs_match(outs[size_t(rank)].view, lses[size_t(rank)].view,
                           head_slice_of(ref64, s.h_q, d_v, rank * out_heads, out_heads),
                           head_slice_of(ref32, s.h_q, d_v, rank * out_heads, out_heads), l);
      continue;
    }
    expect_outputs_match(outs[size_t(rank)].view, lses[size_t(rank)].view, ref64, ref32, l);
    EXPECT_TRUE(same_bits(outs[size_t(rank)], outs[0])) << l << ": out differs from rank 0's";
    EXPECT_TRUE(same_bits(lses[size_t(rank)], lses[0])) << l << ": lse differs from rank 0's";
  }
}

// seq_lens with short requests (fewer keys than one page per rank) and longer ones.
std::vector<int> random_seq_lens(std::mt19937_64& g, int bs, int W, int P) {
  std::uniform_int_distribution<int> len(1, 4 * W * P + 5);
  std::vector<int> v{1, std::max(1, P / 2)};
  while (int(v.size()) < bs) v.push_back(len(g));
  return v;
}

std::string label_of(const DenseCpCase& c) {
  return std::string(c.mla ? "mla " : "dense ") + (c.by_head ? "by_head " : "") + to_string(c.mode) +
         " W=" + std::to_string(c.W) + " P=" + std::to_string(c.P) + " " + std::string(dtype_name(c.dtype));
}

TEST(ContextParallelAttention, DenseDecodeEqualsSingleRank) {
  std::mt19937_64 g(1911);
  for (int W : {2, 3, 4})
    for (int P : {1, 4, 16}) {
      DenseCpCase c{.mode = ForwardMode::decode, .W = W, .P = P, .seq_lens = random_seq_lens(g, 6, W, P)};
      check_dense_cp(c, g, label_of(c));
    }
}

TEST(ContextParallelAttention, DenseVerifyAndDraftDecodeEqualSingleRank) {
  std::mt19937_64 g(1912);
  for (int W : {2, 3, 4})
    for (int P : {1, 4, 16}) {
      DenseCpCase v{.mode = ForwardMode::target_verify,
                    .W = W,
                    .P = P,
                    .seq_lens = random_seq_lens(g, 4, W, P),
                    .spec = {.draft_token_num = 3, .num_steps = 0, .step_id = 0}};
      check_dense_cp(v, g, label_of(v));
      DenseCpCase d{.mode = ForwardMode::draft_decode,
                    .W = W,
                    .P = P,
                    .seq_lens = random_seq_lens(g, 4, W, P),
                    .spec = {.draft_token_num = 0, .num_steps = 3, .step_id = 1}};
      check_dense_cp(d, g, label_of(d));
    }
}

TEST(ContextParallelAttention, Bf16AndSoftcap) {
  std::mt19937_64 g(1913);
  for (int W : {2, 4}) {
    DenseCpCase c{.mode = ForwardMode::target_verify,
                  .W = W,
                  .P = 4,
                  .seq_lens = random_seq_lens(g, 4, W, 4),
                  .spec = {.draft_token_num = 2, .num_steps = 0, .step_id = 0},
                  .dtype = DType::bf16,
                  .softcap = true};
    check_dense_cp(c, g, label_of(c) + " softcap");
  }
}

TEST(ContextParallelAttention, MlaEqualsSingleRank) {
  std::mt19937_64 g(1914);
  for (int W : {2, 3, 4})
    for (int P : {1, 16}) {
      DenseCpCase d{.mode = ForwardMode::decode, .W = W, .P = P, .seq_lens = random_seq_lens(g, 5, W, P), .mla = true};
      check_dense_cp(d, g, label_of(d));
      DenseCpCase v{.mode = ForwardMode::target_verify,
                    .W = W,
                    .P = P,
                    .seq_lens = random_seq_lens(g, 3, W, P),
                    .spec = {.draft_token_num = 2, .num_steps = 0, .step_id = 0},
                    .mla = true};
      check_dense_cp(v, g, label_of(v));
    }
}

TEST(ContextParallelAttention, HeadSlicedExchangeEqualsSingleRank) {
  std::mt19937_64 g(1917);
  for (int W : {2, 3, 4})
    for (int P : {1, 16}) {
      DenseCpCase d{.mode = ForwardMode::decode,
                    .W = W,
                    .P = P,
                    .seq_lens = random_seq_lens(g, 5, W, P),
                    .by_head = true,
                    .h_q = 24,
                    .h_kv = 12};
      check_dense_cp(d, g, label_of(d));
      DenseCpCase v{.mode = ForwardMode::target_verify,
                    .W = W,
                    .P = P,
                    .seq_lens = random_seq_lens(g, 3, W, P),
                    .spec = {.draft_token_num = 2, .num_steps = 0, .step_id = 0},
                    .by_head = true,
                    .h_q = 24,
                    .h_kv = 12};
      check_dense_cp(v, g, label_of(v));
      DenseCpCase m{.mode = ForwardMode::decode,
                    .W = W,
                    .P = P,
                    .seq_lens = random_seq_lens(g, 4, W, P),
                    .mla = true,
                    .by_head = true,
                    .h_q = 12};
      check_dense_cp(m, g, label_of(m));
    }
}

TEST(ContextParallelAttention, HeadSlicedExchangeNeedsDivisibleHeads) {
  std::mt19937_64 g(1918);
  PagedSpec s;
  s.rows_after = 0, s.h_q = 6, s.h_kv = 3;
  PagedCase c = make_paged_case(s, g);
  PagedAttentionArgs a = c.args;
  a.max_seqlen_q = 1;
  EXPECT_THROW(cp_paged_attention_by_head_workspace_size(a, DeviceCaps::cpu(), 2), Error);  // h_kv 3 on 2 ranks
  EXPECT_THROW(cp_paged_attention_by_head_workspace_size(a, DeviceCaps::cpu(), 3), Error);  // out holds 6 heads
}

// -inf positions must match exactly; the finite rest by the tolerance rule.
void expect_sparse_match(const std::vector<double>& got, const std::vector<double>& ref64,
                         const std::vector<double>& ref32, DType dtype, const std::string& label) {
  ASSERT_EQ(got.size(), ref64.size());
  std::vector<double> g, r64, r32;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(ref64[i])) {
      EXPECT_EQ(got[i], ref64[i]) << label << " element " << i;
      continue;
    }
    g.push_back(got[i]), r64.push_back(ref64[i]), r32.push_back(ref32[i]);
  }
  EXPECT_LE(rel_l2(g, r64), tolerance_by_rule(rel_l2(r32, r64), dtype)) << label;
}

TEST(ContextParallelAttention, SparseMlaEqualsSingleRank) {
  std::mt19937_64 g(1915);
  for (int W : {2, 3, 4})
    for (int P : {1, 16, 64})
      for (bool sink : {false, true}) {
        const std::string label =
            "sparse W=" + std::to_string(W) + " P=" + std::to_string(P) + (sink ? " attn_sink" : "");
        // Three requests, rows per request 1 / 2 / 3 (verify-like), positions in [-1, kv_len).
        const std::vector<int32_t> kv_lens{std::max(1, P / 2), 3 * P + 1, 2 * W * P + 7};
        const std::vector<int32_t> row_request{0, 1, 1, 2, 2, 2};
        const int bs = 3, rows = 6, topk = 24;
        int width = 0, pages = 0;
        for (int kv : kv_lens) width = std::max(width, (kv + P - 1) / P), pages += (kv + P - 1) / P;
        std::vector<int32_t> ids(size_t(pages) + 4);
        std::iota(ids.begin(), ids.end(), 1);
        std::shuffle(ids.begin(), ids.end(), g);
        std::vector<int32_t> table(size_t(bs * width), 0);
        size_t next = 0;
        for (int r = 0; r < bs; ++r)
          for (int p = 0; p * P < kv_lens[size_t(r)]; ++p) table[size_t(r * width + p)] = ids[next++];
        SparseMlaCase sc{.rows = rows, .h_q = 4, .num_slots = int64_t(pages + 6) * P, .topk = topk, .with_sink = sink};
        SparseMlaProblem prob = make_sparse_mla_problem(sc, g);
        std::vector<int32_t> pos(size_t(rows * topk));
        for (int i = 0; i < rows; ++i) {
          std::uniform_int_distribution<int> u(-1, kv_lens[size_t(row_request[size_t(i)])] - 1);
          for (int j = 0; j < topk; ++j) pos[size_t(i * topk + j)] = i == 0 && j > 0 ? -1 : u(g);
        }
        // The single-rank problem: positions -> global slots (all ranks' pages in one pool).
        const CpTopkRouting routing{.topk_positions = pos,
                                    .topk = topk,
                                    .row_request = row_request,
                                    .kv_lens = kv_lens,
                                    .page_table = table,
                                    .page_table_width = width};
        {
          std::span<int32_t> global(prob.index_ptr(), size_t(rows * topk));
          cp_route_topk({.world_size = 1, .page_size = P}, 0, routing, global);
        }
        SparseMlaArgs global_args = prob.args();
        global_args.max_logits = {};
        const SparseMlaReference ref64 = reference_sparse_mla<double>(global_args);
        const SparseMlaReference ref32 = reference_sparse_mla<float>(global_args);

        const bool with_lse = !(sink && P == 16);  // the sink without lse: one extra part, no second merge
        std::vector<int> k_lens(kv_lens.begin(), kv_lens.end());
        std::vector<HostTensor> outs(static_cast<size_t>(W)), lses(static_cast<size_t>(W));
        const CpConfig config{.world_size = W, .page_size = P};
        run_ranks(W, [&](int rank, Communicator& comm) {
          HostTensor idx(DType::i32, {rows, topk});
          cp_route_topk(config, rank, routing, std::span<int32_t>(idx.ptr<int32_t>(), size_t(rows * topk)));
          // The pool viewed as pages [num_slots / P, P * 576] for the poisoning.
          HostTensor paged = prob.kv;
          paged.view = paged.view.reshape({sc.num_slots / P, P * 576});
          HostTensor kv = rank_cache(paged, table, width, k_lens, P, W, rank);
          kv.view = kv.view.reshape({sc.num_slots, 576});
          HostTensor& out = outs[size_t(rank)];
          HostTensor& lse = lses[size_t(rank)];
          out = HostTensor(DType::f32, {rows, sc.h_q, 512});
          lse = HostTensor(DType::f32, {rows, sc.h_q});
          poison(out);
          poison(lse);
          SparseMlaArgs a = global_args;
          a.kv = kv.view, a.indices = idx.view, a.out = out.view, a.lse = with_lse ? lse.view : TensorView{};
          Buffer ws(cp_sparse_mla_workspace_size(a, DeviceCaps::cpu(), W), Device::cpu());
          cp_sparse_mla(a, comm, {ws.data(), ws.bytes()});
        });
        for (int rank = 0; rank < W; ++rank) {
          const std::string l = label + " rank " + std::to_string(rank);
          expect_sparse_match(to_doubles(outs[size_t(rank)]), ref64.out, ref32.out, DType::f32, l + " out");
          if (with_lse)
            expect_sparse_match(to_doubles(lses[size_t(rank)]), ref64.lse, ref32.lse, DType::f32, l + " lse");
          EXPECT_TRUE(same_bits(outs[size_t(rank)], outs[0])) << l;
        }
      }
}

TEST(ContextParallelAttention, UnsupportedOptionsAndBadWorkspacesAreErrors) {
  std::mt19937_64 g(1916);
  PagedSpec s;
  s.rows_after = 0;
  PagedCase c = make_paged_case(s, g);
  PagedAttentionArgs a = c.args;
  a.max_seqlen_q = 1;
  InProcessGroup group(1);
  auto comm = group.communicator(0);
  Buffer ws(cp_paged_attention_workspace_size(a, DeviceCaps::cpu(), 1), Device::cpu());
  EXPECT_NO_THROW(cp_paged_attention(a, *comm, {ws.data(), ws.bytes()}));
  auto expect_error = [&](PagedAttentionArgs bad, Workspace w, const char* needle) {
    try {
      cp_paged_attention(bad, *comm, w);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  PagedAttentionArgs bad = a;
  bad.window_left = 8;
  expect_error(bad, {ws.data(), ws.bytes()}, "sliding windows");
  bad = a;
  bad.max_seqlen_q = 2;
  expect_error(bad, {ws.data(), ws.bytes()}, "max_seqlen_q");
  expect_error(a, {ws.data(), 16}, "workspace holds 16 bytes");
  EXPECT_THROW(group.communicator(0), Error);  // taken
  EXPECT_THROW(group.communicator(1), Error);  // outside the group

  SparseMlaCase sc;
  SparseMlaProblem p = make_sparse_mla_problem(sc, g);
  SparseMlaArgs sa = p.args();  // max_logits given
  Buffer sws(cp_sparse_mla_workspace_size(sa, DeviceCaps::cpu(), 1), Device::cpu());
  EXPECT_THROW(cp_sparse_mla(sa, *comm, {sws.data(), sws.bytes()}), Error);
}

TEST(ContextParallelAttention, InProcessAllGatherMismatchFailsOnEveryRank) {
  int failures = 0;
  std::mutex m;
  InProcessGroup group(3);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < 3; ++r) comms.push_back(group.communicator(r));
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      std::vector<uint8_t> send(size_t(4 + (r == 2)), uint8_t(r)), recv(3 * 5);
      try {
        comms[size_t(r)]->all_gather(send.data(), recv.data(), send.size(), {});
      } catch (const Error&) {
        std::lock_guard<std::mutex> lock(m);
        ++failures;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 3);
  // The group still works afterwards, in place and not.
  threads.clear();
  std::vector<std::vector<uint8_t>> recvs(3, std::vector<uint8_t>(3 * 4, 0));
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      std::vector<uint8_t> send(4);
      for (int i = 0; i < 4; ++i) send[size_t(i)] = uint8_t(10 * r + i);
      uint8_t* recv = recvs[size_t(r)].data();
      if (r == 1) {  // in place
        std::copy(send.begin(), send.end(), recv + 4);
        comms[1]->all_gather(recv + 4, recv, 4, {});
      } else {
        comms[size_t(r)]->all_gather(send.data(), recv, 4, {});
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r)
    for (int s = 0; s < 3; ++s)
      for (int i = 0; i < 4; ++i) EXPECT_EQ(recvs[size_t(r)][size_t(4 * s + i)], 10 * s + i);
}

TEST(ContextParallelAttention, AbortReleasesTheWaitingRanks) {
  // Rank 0 fails before its exchange; ranks 1 and 2 wait in all_gather and must be released.
  EXPECT_THROW(run_ranks(3,
                         [](int rank, Communicator& comm) {
                           if (rank == 0) ATTNSERVE_FAIL("rank 0 fails before its exchange");
                           uint8_t b[2] = {1, 2}, recv[6];
                           comm.all_gather(b, recv, 2, {});
                         }),
               Error);
}

}  // namespace
}  // namespace attnserve::test
