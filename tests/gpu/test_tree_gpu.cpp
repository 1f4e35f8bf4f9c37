// Draft trees (spec.topk > 1) on the GPU (scripts/gpu_check.sh; skipped without a GPU):
//   - the CUDA tree_attention kernels against the CPU oracle on the same bf16 inputs (MHA/GQA, MLA's
//     576/512 with q_rope, softcap, empty rows; every tree shape: tests/gpu/test_tree_kernels_gpu.cpp);
//   - the dense backend's tree verify and tree draft decode on CUDA against the CPU backend and the
//     double brute force (tolerance by rule, DESIGN.md);
//   - a real CUDA graph captured over tree verify / tree draft decode, replayed for new batches and
//     trees, equals the eager step bit for bit (deterministic mode).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>

#include "attnserve/ops.h"
#include "gpu/tree_gpu_util.h"

namespace attnserve::test {
namespace {

// ---- The kernel ----------------------------------------------------------------------------------------

struct OpCase {
  int h_q, h_kv, d, d_rope, dv;
  float softcap;
};

TEST(TreeGpu, KernelMatchesCpuOracle) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  // Each kernel: tensor cores (d 128 / 64, softcap), staged (MLA 576 / 512, d 256), per-row (d 100).
  for (const OpCase& c :
       {OpCase{8, 2, 128, 0, 128, 0.f}, OpCase{4, 4, 64, 0, 64, 0.f}, OpCase{8, 2, 128, 0, 128, 20.f},
        OpCase{16, 1, 512, 64, 512, 0.f}, OpCase{8, 1, 256, 0, 256, 10.f}, OpCase{6, 3, 100, 0, 100, 0.f}}) {
    SCOPED_TRACE("d " + std::to_string(c.d) + " rope " + std::to_string(c.d_rope));
    const int b = 5, max_keys = 64;
    const int64_t slots = 512;
    std::vector<int32_t> cu = {0};
    std::vector<int32_t> nkeys;
    for (int r = 0; r < b; ++r) {
      cu.push_back(cu.back() + int32_t(g() % 65));
      nkeys.push_back(int32_t(g() % 65));
    }
    const int64_t rows = cu.back();
    HostTensor q = bf16_random({rows, c.h_q, c.d}, g, 2.0),
               qr = bf16_random({rows, c.h_q, std::max(1, c.d_rope)}, g, 2.0);
    HostTensor k = bf16_random({slots, c.h_kv, c.d + c.d_rope}, g, 1.5), v = bf16_random({slots, c.h_kv, c.dv}, g, 1.0);
    HostTensor ks(DType::i32, {b, max_keys}), nk(DType::i32, {b}), cuq(DType::i32, {b + 1}), mask(DType::i64, {rows});
    std::vector<int32_t> perm(slots);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), g);
    for (int i = 0; i < b * max_keys; ++i) ks.ptr<int32_t>()[i] = perm[std::size_t(i) % perm.size()];
    std::memcpy(nk.bytes.data(), nkeys.data(), nkeys.size() * 4);
    std::memcpy(cuq.bytes.data(), cu.data(), cu.size() * 4);
    for (int64_t i = 0; i < rows; ++i) mask.ptr<int64_t>()[i] = (i % 7 == 3) ? 0 : int64_t(g());
    HostTensor out(DType::bf16, {rows, c.h_q, c.dv}), lse(DType::f32, {rows, c.h_q});
    poison(out);
    TreeAttentionArgs a{.q = q.view,
                        .k_cache = k.view,
                        .v_cache = v.view,
                        .key_slots = ks.view,
                        .num_keys = nk.view,
                        .cu_seqlens_q = cuq.view,
                        .mask = mask.view,
                        .out = out.view,
                        .lse = lse.view,
                        .max_seqlen_q = 64,
                        .softmax_scale = 1.f / std::sqrt(float(c.d + c.d_rope)),
                        .softcap = c.softcap};
    if (c.d_rope) a.q_rope = qr.view;
    tree_attention(a);  // CPU oracle (double inside, bf16 out)

    DeviceTensor dq(q), dqr(qr), dk(k), dv(v), dks(ks), dnk(nk), dcu(cuq), dmask(mask), dout(out), dlse(lse);
    dout.poison();
    TreeAttentionArgs da = a;
    da.q = dq.view, da.k_cache = dk.view, da.v_cache = dv.view, da.key_slots = dks.view, da.num_keys = dnk.view;
    da.cu_seqlens_q = dcu.view, da.mask = dmask.view, da.out = dout.view, da.lse = dlse.view;
    da.q_rope = c.d_rope ? dqr.view : TensorView{};
    dout.poison();
    tree_attention(da);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const HostTensor gout = dout.download(out), glse = dlse.download(lse);
    // Both round f32-accurate values to bf16 (the tensor-core kernel rounds P to bf16 too).
    EXPECT_LT(rel_l2(to_doubles(gout), to_doubles(out)), 2 * unit_roundoff(DType::bf16));
    EXPECT_LT(rel_l2(to_doubles(glse), to_doubles(lse)), 1e-5);
  }
}

// The kernels' epilogue: the prefix part's state merged in place (prefix_out = out), against the CPU oracle
// doing the same; MHA with separate K/V (the tensor-core kernel) and MLA with V the first 512 columns of the
// latent (the staged kernel, V read from the staged K rows); prefix states without keys (lse -inf / +inf) and rows
// without tree keys.
TEST(TreeGpu, KernelMergesThePrefixStateInPlace) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool mla : {false, true}) {
    SCOPED_TRACE(mla ? "mla" : "mha");
    const int h_q = mla ? 16 : 8, h_kv = mla ? 1 : 2, d = mla ? 512 : 128, d_rope = mla ? 64 : 0, d_v = d;
    const int b = 6, max_keys = 64;
    const int64_t slots = 700;
    std::vector<int32_t> cu = {0}, nkeys;
    for (int r = 0; r < b; ++r) {
      cu.push_back(cu.back() + int32_t(g() % 65));
      nkeys.push_back(int32_t(g() % 65));
    }
    const int64_t rows = cu.back();
    HostTensor q = bf16_random({rows, h_q, d}, g, 2.0), qr = bf16_random({rows, h_q, std::max(1, d_rope)}, g, 2.0);
    HostTensor k = bf16_random({slots, h_kv, d + d_rope}, g, 1.5), v = bf16_random({slots, h_kv, d_v}, g, 1.0);
    HostTensor ks(DType::i32, {b, max_keys}), nk(DType::i32, {b}), cuq(DType::i32, {b + 1}), mask(DType::i64, {rows});
    for (int i = 0; i < b * max_keys; ++i) ks.ptr<int32_t>()[i] = int32_t(g() % uint64_t(slots));
    std::memcpy(nk.bytes.data(), nkeys.data(), nkeys.size() * 4);
    std::memcpy(cuq.bytes.data(), cu.data(), cu.size() * 4);
    for (int64_t i = 0; i < rows; ++i) mask.ptr<int64_t>()[i] = (i % 5 == 2) ? 0 : int64_t(g());
    HostTensor out = bf16_random({rows, h_q, d_v}, g, 1.0), lse(DType::f32, {rows, h_q}), plse(DType::f32, {rows, h_q});
    fill_view(plse.view, g, 4.0);
    for (int64_t i = 0; i < rows * h_q; i += 11) plse.set(i, (i / 11) % 2 ? INFINITY : -INFINITY);
    const HostTensor prefix = out;
    DeviceTensor dq(q), dqr(qr), dk(k), dv(v), dks(ks), dnk(nk), dcu(cuq), dmask(mask), dout(out), dlse(lse),
        dplse(plse);
    TreeAttentionArgs a{.q = q.view,
                        .k_cache = k.view,
                        .v_cache = mla ? k.view.slice(2, 0, d_v) : v.view,
                        .key_slots = ks.view,
                        .num_keys = nk.view,
                        .cu_seqlens_q = cuq.view,
                        .mask = mask.view,
                        .out = out.view,
                        .lse = lse.view,
                        .q_rope = mla ? qr.view : TensorView{},
                        .prefix_out = out.view,
                        .prefix_lse = plse.view,
                        .max_seqlen_q = 64,
                        .softmax_scale = 1.f / std::sqrt(float(d + d_rope))};
    tree_attention(a);  // CPU oracle, in place
    TreeAttentionArgs da = a;
    da.q = dq.view, da.k_cache = dk.view, da.v_cache = mla ? dk.view.slice(2, 0, d_v) : dv.view;
    da.key_slots = dks.view, da.num_keys = dnk.view, da.cu_seqlens_q = dcu.view, da.mask = dmask.view;
    da.out = dout.view, da.lse = dlse.view, da.q_rope = mla ? dqr.view : TensorView{};
    da.prefix_out = dout.view, da.prefix_lse = dplse.view;
    dout.upload(prefix);
    tree_attention(da);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const HostTensor gout = dout.download(out), glse = dlse.download(lse);
    EXPECT_LT(rel_l2(to_doubles(gout), to_doubles(out)), 2 * unit_roundoff(DType::bf16));
    int64_t inf_mismatch = 0;
    for (int64_t i = 0; i < rows * h_q; ++i) inf_mismatch += std::isinf(lse.get(i)) != std::isinf(glse.get(i));
    EXPECT_EQ(inf_mismatch, 0);
    std::vector<double> gl = to_doubles(glse), cl = to_doubles(lse);
    for (std::size_t i = 0; i < gl.size(); ++i)
      if (std::isinf(cl[i])) gl[i] = cl[i] = 0;
    EXPECT_LT(rel_l2(gl, cl), 1e-5);
    EXPECT_NE(to_doubles(out), to_doubles(prefix));  // the merge changed the output
  }
}

// ---- The backend ---------------------------------------------------------------------------------------

TEST(TreeGpu, BackendVerifyMatchesCpuBackend) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  for (bool mla : {false, true})
    for (int n : {16, 64}) {
      SCOPED_TRACE(std::string(mla ? "mla" : "mha") + " n " + std::to_string(n));
      TreeSetup s({300, 17, 1000, 64}, n, 16, 1200, g, mla ? 16 : 8, mla ? 1 : 2, mla ? 576 : 128, mla ? 512 : 128,
                  DType::bf16);
      HostTensor latent;
      DenseBackendConfig c = s.backend_config({.draft_token_num = n, .topk = 4});
      if (mla) {
        latent = bf16_random({s.num_slots, 576}, g, 1.0);
        c.arch = AttentionArch::mla;
        c.kv_buffers = {KvLayerBuffers{.k = latent.view}};
      }
      BackendPair p(s, c, mla ? &latent : nullptr);
      const auto parents = s.random_parents(g);
      const BatchSpec b = s.verify_batch(parents);
      const HostTensor q = bf16_random({int64_t(s.bs) * n, s.h_q, s.d}, g, 2.0);
      EXPECT_LT(gpu_vs_cpu(p, b, q), 3 * unit_roundoff(DType::bf16));
    }
}

TEST(TreeGpu, BackendDraftDecodeMatchesCpuBackend) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  const int topk = 8, steps = 5;
  TreeSetup s({500, 9, 77}, 0, 16, 600, g, 8, 2, 128, 128, DType::bf16);
  std::vector<int32_t> draft;
  for (int i = 0; i < s.bs * topk * steps; ++i) draft.push_back(int32_t(s.num_slots - 1 - 3 * i));
  for (int step = 0; step + 1 < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    BackendPair p(s, s.backend_config({.num_steps = steps, .step_id = step, .topk = topk}), nullptr);
    BatchSpec b;
    b.mode = ForwardMode::draft_decode;
    b.seq_lens = s.seq_lens;
    b.req_pool_indices = s.pool_rows;
    b.draft_slots = draft;
    const HostTensor q = bf16_random({int64_t(s.bs) * topk, s.h_q, s.d}, g, 2.0);
    EXPECT_LT(gpu_vs_cpu(p, b, q), 3 * unit_roundoff(DType::bf16));
  }
}

// A batch large enough that the prefix part runs the plan of production shapes (256 packed rows per
// request and kv head, one split: the Hopper kernel on sm_90) with the causal mask off and LSE out.
TEST(TreeGpu, BackendVerifyMatchesCpuBackendAtHopperKernelShapes) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  const int n = 64, bs = 40;
  std::vector<int32_t> seqs;
  for (int r = 0; r < bs; ++r) seqs.push_back(int32_t(g() % 300));
  seqs[0] = 0;  // an empty prefix: the prefix part sees no key (lse -inf)
  TreeSetup s(seqs, n, 16, 384, g, 8, 2, 128, 128, DType::bf16);
  BackendPair p(s, s.backend_config({.draft_token_num = n, .topk = 8}), nullptr);
  const auto parents = s.random_parents(g);
  const BatchSpec b = s.verify_batch(parents);
  const HostTensor q = bf16_random({int64_t(bs) * n, s.h_q, s.d}, g, 2.0);
  EXPECT_LT(gpu_vs_cpu(p, b, q), 3 * unit_roundoff(DType::bf16));
}

// ---- CUDA graphs ---------------------------------------------------------------------------------------

TEST(TreeGpu, GraphReplayEqualsEagerBitForBit) {
  ATTNSERVE_REQUIRE_GPU();
  auto g = rng_for_test();
  const int n = 16, topk = 4, steps = 3, G = 4;
  TreeSetup s({100, 200, 5, 340}, n, 16, 400, g, 8, 2, 128, 128, DType::bf16);
  for (ForwardMode mode : {ForwardMode::target_verify, ForwardMode::draft_decode}) {
    SCOPED_TRACE(to_string(mode));
    const SpeculativeConfig spec{.draft_token_num = n, .num_steps = steps, .step_id = 1, .topk = topk};
    BackendPair eager(s, s.backend_config(spec, G), nullptr, /*deterministic_gpu=*/true);
    BackendPair graph(s, s.backend_config(spec, G), nullptr, true);
    TreeStream stream;
    const Stream st = stream.get();
    const int per = mode == ForwardMode::target_verify ? n : topk, rows = G * per;
    HostTensor q_like(DType::bf16, {rows, s.h_q, s.d}), out_like(DType::bf16, {rows, s.h_q, s.dv});
    DeviceTensor dq(q_like), dout(out_like);
    graph.gpu.init_cuda_graph_state(G, rows, st);
    graph.gpu.init_forward_metadata_capture_cuda_graph(G, rows, mode, st);
    const LayerSpec layer{.layer_id = 0};
    graph.gpu.forward({.q = dq.view, .out = dout.view}, layer, st);  // warm-up outside capture
    ASSERT_EQ(cudaStreamSynchronize(stream.s), cudaSuccess);
    cudaGraph_t cg;
    cudaGraphExec_t exec;
    ASSERT_EQ(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    graph.gpu.forward({.q = dq.view, .out = dout.view}, layer, st);
    ASSERT_EQ(cudaStreamEndCapture(stream.s, &cg), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&exec, cg, 0), cudaSuccess);
    for (int rep = 0; rep < 4; ++rep) {
      SCOPED_TRACE("replay " + std::to_string(rep));
      const int bs = 1 + int(g() % G);
      std::vector<int32_t> seqs, rows_of;
      for (int r = 0; r < bs; ++r) {
        seqs.push_back(int32_t(1 + g() % 380));
        rows_of.push_back(s.pool_rows[std::size_t(r)]);
      }
      std::vector<int32_t> parents;
      for (int r = 0; r < bs; ++r) {
        const auto p = shuffled_tree(random_tree(n, g), g);
        parents.insert(parents.end(), p.begin(), p.end());
      }
      std::vector<int32_t> draft;
      for (int i = 0; i < bs * topk * steps; ++i) draft.push_back(int32_t(g() % uint64_t(s.num_slots)));
      BatchSpec b;
      b.mode = mode;
      b.seq_lens = seqs;
      b.req_pool_indices = rows_of;
      b.req_to_token = graph.dtable.view;
      if (mode == ForwardMode::target_verify) b.tree_parents = parents;
      else b.draft_slots = draft;
      const HostTensor q = bf16_random({int64_t(bs) * per, s.h_q, s.d}, g, 2.0);
      copy_async(dq.view.slice(0, 0, int64_t(bs) * per), q.view, st);
      graph.gpu.init_forward_metadata_replay_cuda_graph(G, b, st);
      ASSERT_EQ(cudaGraphLaunch(exec, stream.s), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream.s), cudaSuccess);
      const HostTensor got = dout.download(out_like);
      BatchSpec eb = b;
      eb.req_to_token = eager.dtable.view;
      const auto want = forward_device(eager.gpu, eb, q, s.h_q, s.dv);
      const auto got_live = rows_as_doubles(got, 0, int64_t(bs) * per);
      ASSERT_EQ(got_live.size(), want.size());
      EXPECT_EQ(got_live, want);  // same kernels, same plans per row: identical bits
      const auto pad = rows_as_doubles(got, int64_t(bs) * per, rows);
      for (double x : pad) ASSERT_EQ(x, 0.0);  // padding requests see no key
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(cg);
  }
}

}  // namespace
}  // namespace attnserve::test
