// One-off device check of the ws kernel's batched epilogue (kWsBatched), built on the build machine and run on
// the device without the library: the ragged ws kernel in modes 0 (measured and tested against the CPU oracle
// at 00dd511), 3, 4 (batched) and 7 (batched + ping-pong + split) on random FP8 inputs; the batched forms must
// give the same bits as mode 0 (the same arithmetic per row) on a causal 8K prefill and on random windows with
// a partial last row group; then the median time of each on the causal 8K case (CUDA events).
// Build: nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr
//   -DATTNSERVE_WITH_CUDA=1 -DATTNSERVE_HAVE_SM90=1 -Iinclude -Isrc bench/experiments/ws_epilogue_check.cu
//   src/cuda/indexer/plan.cpp -o bin/ws_epilogue_check
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/indexer/plan.h"
#include "cuda/indexer/sm90/launch_shape.cuh"

using namespace attnserve;
using namespace attnserve::cuda;

#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t e = (x);                                                                  \
    if (e != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      std::exit(2);                                                                       \
    }                                                                                     \
  } while (0)

template <int kMode>
void run(const indexer::Params& p, const indexer::Plan& plan) {
  indexer90::launch_ws_kernel<indexer90::kWsRaggedRows, false, false, true, kMode>(p, plan, nullptr);
}
using Fn = void (*)(const indexer::Params&, const indexer::Plan&);
const int kModes[] = {0, 3, 4, 7};
const Fn kFns[] = {run<0>, run<3>, run<4>, run<7>};

struct Case {
  int64_t rows, cols;
  std::vector<int32_t> ks, ke;
};

int main() {
  std::mt19937_64 g(7);
  Case causal{8192, 8192, {}, {}}, causal4{4096, 4096, {}, {}}, rnd{1001, 3000, {}, {}};
  for (int64_t r = 0; r < causal.rows; ++r) causal.ks.push_back(0), causal.ke.push_back(int32_t(r + 1));
  for (int64_t r = 0; r < causal4.rows; ++r) causal4.ks.push_back(0), causal4.ke.push_back(int32_t(r + 1));
  for (int64_t r = 0; r < rnd.rows; ++r) {
    int a = int(g() % 3100), b = int(g() % 3100);
    if (r % 97 == 0) b = a;  // empty windows
    rnd.ks.push_back(std::min(a, b)), rnd.ke.push_back(std::max(a, b));
  }
  int bad = 0;
  Case* const cases[] = {&rnd, &causal4, &causal};
  for (Case* c : cases) {
    const int64_t rows = c->rows, cols = c->cols;
    std::vector<uint8_t> q(static_cast<size_t>(rows * 64 * 128)), k(static_cast<size_t>(cols * 128));
    for (auto& x : q) x = uint8_t(g()) & 0x77;  // FP8 e4m3 codes, never NaN (0x7f / 0xff)
    for (auto& x : k) x = uint8_t(g()) & 0x77;
    std::vector<float> w(static_cast<size_t>(rows * 64)), sc(static_cast<size_t>(cols));
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (auto& x : w) x = u(g);
    for (auto& x : sc) x = 0.01f + 0.1f * std::abs(u(g));
    uint8_t *dq, *dk;
    float *dw, *ds, *dl;
    int32_t *dks, *dke;
    CK(cudaMalloc(&dq, q.size()));
    CK(cudaMalloc(&dk, k.size()));
    CK(cudaMalloc(&dw, w.size() * 4));
    CK(cudaMalloc(&ds, sc.size() * 4));
    CK(cudaMalloc(&dks, rows * 4));
    CK(cudaMalloc(&dke, rows * 4));
    CK(cudaMalloc(&dl, size_t(rows * cols) * 4));
    CK(cudaMemcpy(dq, q.data(), q.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dk, k.data(), k.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ds, sc.data(), sc.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dks, c->ks.data(), rows * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dke, c->ke.data(), rows * 4, cudaMemcpyHostToDevice));
    const indexer::Problem prob{.rows = rows, .heads = 64, .num_cols = cols};
    const DeviceCaps caps{.num_sms = 132, .smem_per_block = 227 * 1024, .arch = 90};
    const indexer::Plan plan = indexer::make_plan(prob, caps, {.sm90 = 1, .sm90_ws = 1}, {.sm90a = true});
    indexer::Params p{};
    p.q = dq, p.q_row_stride = 64 * 128, p.q_head_stride = 128;
    p.w = dw, p.w_row_stride = 64, p.w_head_stride = 1;
    p.heads = 64, p.rows = rows;
    p.logits = dl, p.logit_row_stride = cols, p.logit_col_stride = 1, p.num_cols = cols;
    p.num_groups = plan.num_groups, p.rows_per_group = plan.rows_per_group, p.col_blocks = plan.col_blocks;
    p.cols_per_cta = plan.cols_per_cta, p.key_vec16 = true;
    p.k = dk, p.k_row_stride = 128, p.k_scale = ds, p.k_scale_stride = 1;
    p.ks = dks, p.ks_stride = 1, p.ke = dke, p.ke_stride = 1;
    std::printf("case rows %lld cols %lld: plan %s, %lld CTAs, span %lld\n", (long long)rows, (long long)cols,
                indexer::kernel_name(plan.kernel), (long long)plan.ctas(), (long long)plan.cols_per_cta);
    std::vector<uint32_t> ref(size_t(rows * cols)), out(ref.size());
    for (int m = 0; m < 4; ++m) {
      CK(cudaMemset(dl, 0xff, size_t(rows * cols) * 4));  // NaN sentinel: every logit must be written
      kFns[m](p, plan);
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(m == 0 ? ref.data() : out.data(), dl, ref.size() * 4, cudaMemcpyDeviceToHost));
      if (m == 0) {
        size_t unwritten = 0, finite = 0;
        for (uint32_t v : ref) unwritten += v == 0xffffffffu, finite += (v & 0x7f800000u) != 0x7f800000u;
        std::printf("  mode 0: %zu unwritten, %zu finite of %zu\n", unwritten, finite, ref.size());
        if (unwritten) ++bad;
        continue;
      }
      const size_t diff = size_t(std::mismatch(ref.begin(), ref.end(), out.begin()).first - ref.begin());
      size_t ndiff = 0;
      for (size_t i = 0; i < ref.size(); ++i) ndiff += ref[i] != out[i];
      std::printf("  mode %d vs mode 0: %zu logits differ%s\n", kModes[m], ndiff,
                  ndiff ? " (BITS DIFFER)" : " (same bits)");
      if (ndiff) {
        float a, b;
        std::memcpy(&a, &ref[diff], 4), std::memcpy(&b, &out[diff], 4);
        std::printf("    first at row %zu col %zu: %g vs %g\n", diff / size_t(cols), diff % size_t(cols), a, b);
        ++bad;
      }
    }
    if (c != &rnd) {
      const double flops = 2.0 * 64 * 128 * double(rows) * double(rows + 1) / 2;
      cudaEvent_t e0, e1;
      CK(cudaEventCreate(&e0));
      CK(cudaEventCreate(&e1));
      // The session-4 kernel (the ragged default) on the same inputs, as m = 4.
      const indexer::Plan plan4 = indexer::make_plan(prob, caps, {.sm90 = 1, .sm90_ws = 0}, {.sm90a = true});
      indexer::Params p4 = p;
      p4.num_groups = plan4.num_groups, p4.rows_per_group = plan4.rows_per_group, p4.col_blocks = plan4.col_blocks;
      p4.cols_per_cta = plan4.cols_per_cta;
      for (int rep = 0; rep < 2; ++rep)
        for (int m = 0; m < 5; ++m) {
          std::vector<float> t;
          for (int it = 0; it < 12; ++it) {
            CK(cudaEventRecord(e0));
            if (m < 4) kFns[m](p, plan);
            else indexer90::launch_ragged<false>(p4, plan4, nullptr);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (it >= 2) t.push_back(ms);
          }
          std::sort(t.begin(), t.end());
          const double us = 1e3 * t[t.size() / 2];
          if (m < 4)
            std::printf("ragged causal %lld ws mode %d (pass %d): %.1f us, %.1f TFLOP/s\n", (long long)rows, kModes[m],
                        rep, us, flops / us * 1e-6);
          else
            std::printf("ragged causal %lld session-4 kernel (pass %d): %.1f us, %.1f TFLOP/s\n", (long long)rows, rep,
                        us, flops / us * 1e-6);
        }
    }
    cudaFree(dq), cudaFree(dk), cudaFree(dw), cudaFree(ds), cudaFree(dks), cudaFree(dke), cudaFree(dl);
  }
  std::printf("%s\n", bad ? "CHECK FAILED" : "CHECK PASSED");
  return bad ? 1 : 0;
}
