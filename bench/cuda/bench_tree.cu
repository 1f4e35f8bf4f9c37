// Tree verify (EAGLE topk > 1) against linear verify with the same query rows, through DenseBackend's
// forward on CUDA (a benchmark, not a test). Tree: paged attention over the prefix without a mask + the
// tree part, which merges the prefix state into out (tree_attention's prefix_out / prefix_lse); linear: one causal
// paged attention over prefix + draft tokens. Both read the same K/V (the prefix once per request, and the draft
// tokens), so the issue's target is tree GB/s >= 90 % of linear GB/s (issue 18). Median of CUDA-event timed runs; K/V
// far larger than L2.
//
// Usage: bench_tree [--quick] [filter-substring]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnserve/backend.h"
#include "attnserve/ops.h"
#include "bench_spin.cuh"

using namespace attnserve;

#define CK(x)                                                                                                 \
  do {                                                                                                        \
    cudaError_t e = (x);                                                                                      \
    if (e != cudaSuccess)                                                                                     \
      throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorString(e) + " at " + __FILE__ + ":" + \
                               std::to_string(__LINE__));                                                     \
  } while (0)

namespace {

bool g_quick = false;
std::string g_filter;

__global__ void fill_random_kernel(uint16_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    const float x = float(h & 0xffffff) / 16777216.f * 2.f - 1.f;
    uint32_t u;
    std::memcpy(&u, &x, 4);
    p[i] = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // bf16 RNE
  }
}
void fill_bf16(const TensorView& t, uint32_t seed) {
  fill_random_kernel<<<1024, 256>>>(static_cast<uint16_t*>(t.data), size_t(t.numel()), seed);
  CK(cudaGetLastError());
}

double median_us(const std::function<void()>& fn, int warm = 3, int reps = 30) {
  if (g_quick) reps = std::min(reps, 8);
  for (int i = 0; i < warm; ++i) fn();
  CK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> v;
  for (int i = 0; i < reps; ++i) {
    attnserve::bench::hide_host_launch();  // device time (bench_spin.cuh)
    CK(cudaEventRecord(a));
    fn();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    v.push_back(ms * 1000.0);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// bs requests of `prefix` cached keys and n draft tokens, h_q / h_kv / d 128, page 16.
void bench_case(int bs, int prefix, int n, int h_q, int h_kv) {
  const std::string name = "tree-vs-linear verify" + std::to_string(n) + " b" + std::to_string(bs) + "x" +
                           std::to_string(prefix) + " hq" + std::to_string(h_q) + " hkv" + std::to_string(h_kv);
  if (!g_filter.empty() && name.find(g_filter) == std::string::npos) return;
  const int d = 128, P = 16, ctx = prefix + n, pages_per_req = (ctx + P - 1) / P;
  const int64_t slots = int64_t(bs * pages_per_req + 1) * P;
  MhaKvPool pool(1, slots, h_kv, d, d, DType::bf16, Device::cuda());
  fill_bf16(pool.k(0), 1);
  fill_bf16(pool.v(0), 2);
  std::vector<int32_t> table(static_cast<std::size_t>(bs) * ctx), rows(static_cast<std::size_t>(bs));
  std::vector<int32_t> seqs(static_cast<std::size_t>(bs), prefix);
  for (int r = 0; r < bs; ++r) {
    rows[std::size_t(r)] = r;
    for (int j = 0; j < ctx; ++j) table[std::size_t(r) * ctx + j] = (1 + r * pages_per_req + j / P) * P + j % P;
  }
  Buffer dtable(table.size() * 4, Device::cuda());
  CK(cudaMemcpy(dtable.data(), table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  const TensorView tv = TensorView::contiguous(dtable.data(), DType::i32, {bs, ctx}, Device::cuda());
  std::mt19937 g(7);
  std::vector<int32_t> parents;
  for (int r = 0; r < bs; ++r)
    for (int i = 0; i < n; ++i) parents.push_back(i == 0 ? -1 : int32_t(g() % uint32_t(std::min(i, 8))));  // bushy
  const int64_t q_rows = int64_t(bs) * n;
  Buffer q(size_t(q_rows) * h_q * d * 2, Device::cuda()), out(size_t(q_rows) * h_q * d * 2, Device::cuda());
  const TensorView qv = TensorView::contiguous(q.data(), DType::bf16, {q_rows, h_q, d}, Device::cuda());
  const TensorView ov = TensorView::contiguous(out.data(), DType::bf16, {q_rows, h_q, d}, Device::cuda());
  fill_bf16(qv, 3);

  // The three parts of a tree verify, timed alone with the tree backend's metadata (the breakdown).
  double us_prefix = 0, us_part = 0, us_merge = 0, us_fused = 0;
  auto parts = [&](const DenseMetadata& m) {
    const int64_t rows = m.num_q_rows;
    Buffer o1(size_t(rows) * h_q * d * 2, Device::cuda()), o2(size_t(rows) * h_q * d * 2, Device::cuda());
    Buffer l1(size_t(rows) * h_q * 4, Device::cuda()), l2(size_t(rows) * h_q * 4, Device::cuda());
    auto v3 = [&](Buffer& b) { return TensorView::contiguous(b.data(), DType::bf16, {rows, h_q, d}, Device::cuda()); };
    auto v2 = [&](Buffer& b) { return TensorView::contiguous(b.data(), DType::f32, {rows, h_q}, Device::cuda()); };
    const PagedAttentionArgs pa{.q = qv,
                                .k_cache = pool.k_paged(0, P),
                                .v_cache = pool.v_paged(0, P),
                                .page_table = m.page_table,
                                .cache_seqlens = m.cache_seqlens_int32,
                                .cu_seqlens_q = m.cu_seqlens_q,
                                .out = v3(o1),
                                .lse = v2(l1),
                                .max_seqlen_q = m.max_seq_len_q,
                                .softmax_scale = 0.088f,
                                .causal = false};
    Buffer ws(std::max<std::size_t>(1, paged_attention_workspace_size(pa, query_device_caps(Device::cuda()))),
              Device::cuda());
    us_prefix = median_us([&] { paged_attention(pa, Workspace{ws.data(), ws.bytes()}); });
    const TreeAttentionArgs ta{.q = qv,
                               .k_cache = pool.k(0),
                               .v_cache = pool.v(0),
                               .key_slots = m.tree.key_slots,
                               .num_keys = m.tree.num_keys,
                               .cu_seqlens_q = m.cu_seqlens_q,
                               .mask = m.tree.mask,
                               .out = v3(o2),
                               .lse = v2(l2),
                               .max_seqlen_q = m.max_seq_len_q,
                               .softmax_scale = 0.088f};
    us_part = median_us([&] { tree_attention(ta); });
    TreeAttentionArgs fused = ta;  // the backend's tree part: the merge with the prefix state fused
    fused.out = ov, fused.lse = {}, fused.prefix_out = v3(o1), fused.prefix_lse = v2(l1);
    us_fused = median_us([&] { tree_attention(fused); });
    us_merge =
        median_us([&] { merge_state({.v_a = v3(o1), .s_a = v2(l1), .v_b = v3(o2), .s_b = v2(l2), .v_out = ov}); });
  };
  auto run = [&](int topk) {
    DenseBackendConfig c{.arch = AttentionArch::mha,
                         .num_q_heads = h_q,
                         .num_kv_heads = h_kv,
                         .head_dim = d,
                         .v_head_dim = d,
                         .softmax_scale = 0.088f,
                         .page_size = P,
                         .spec = {.draft_token_num = n, .topk = topk},
                         .capacity = {.max_bs = bs, .max_num_tokens = int(q_rows), .max_context_len = ctx},
                         .device = Device::cuda(),
                         .req_to_token = tv,
                         .kv_buffers = kv_buffers_of(pool)};
    DenseBackend be(c);
    BatchSpec b{.mode = ForwardMode::target_verify, .seq_lens = seqs, .req_pool_indices = rows};
    if (topk > 1) b.tree_parents = parents;
    be.init_forward_metadata(b);
    const double us = median_us([&] { be.forward_extend({.q = qv, .out = ov}, LayerSpec{.layer_id = 0}); });
    if (topk > 1) parts(be.forward_metadata());
    return us;
  };
  const double us_tree = run(4), us_linear = run(1);
  // The fused tree part's bytes: q, the prefix output and LSE, out, and the draft tokens' K/V once.
  const double part_bytes =
      3.0 * double(q_rows) * h_q * d * 2 + double(q_rows) * h_q * 4 + double(bs) * n * h_kv * 2 * d * 2;
  // Bytes either path must move: K+V of every key once per request, q and out.
  const double bytes = double(bs) * ctx * h_kv * 2 * d * 2 + 2.0 * double(q_rows) * h_q * d * 2;
  std::printf("%-52s tree %8.1f us %6.0f GB/s | linear %8.1f us %6.0f GB/s | tree/linear GB/s %5.1f%%\n", name.c_str(),
              us_tree, bytes / us_tree * 1e-3, us_linear, bytes / us_linear * 1e-3, 100.0 * us_linear / us_tree);
  std::printf(
      "%-52s   parts: prefix (causal off) %8.1f us, tree_attention %8.1f us, merge_state %8.1f us, "
      "tree_attention + merge fused %8.1f us (%5.0f GB/s of its %.1f MB)\n",
      "", us_prefix, us_part, us_merge, us_fused, part_bytes / us_fused * 1e-3, part_bytes * 1e-6);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) try {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) g_quick = true;
    else g_filter = argv[i];
  }
  for (int n : {16, 64}) {
    bench_case(64, 4096, n, 32, 8);
    bench_case(16, 8192, n, 32, 8);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_tree: %s\n", e.what());
  return 1;
}
