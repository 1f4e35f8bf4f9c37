// Tree verify (EAGLE topk > 1) against linear verify with the same query rows, through DenseBackend's
// forward on CUDA (a benchmark, not a test). Tree: paged attention over the prefix without a mask + the
// tree part + merge_state; linear: one causal paged attention over prefix + draft tokens. Both read the
// same K/V (the prefix once per request, and the draft tokens), so the issue's target is tree GB/s >= 90 %
// of linear GB/s (issue 18). Median of CUDA-event timed runs; K/V far larger than L2.
//
// Usage: bench_tree [--quick] [filter-substring]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnserve/backend.h"

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
    return median_us([&] { be.forward_extend({.q = qv, .out = ov}, LayerSpec{.layer_id = 0}); });
  };
  const double us_tree = run(4), us_linear = run(1);
  // Bytes either path must move: K+V of every key once per request, q and out.
  const double bytes = double(bs) * ctx * h_kv * 2 * d * 2 + 2.0 * double(q_rows) * h_q * d * 2;
  std::printf("%-52s tree %8.1f us %6.0f GB/s | linear %8.1f us %6.0f GB/s | tree/linear GB/s %5.1f%%\n", name.c_str(),
              us_tree, bytes / us_tree * 1e-3, us_linear, bytes / us_linear * 1e-3, 100.0 * us_linear / us_tree);
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
