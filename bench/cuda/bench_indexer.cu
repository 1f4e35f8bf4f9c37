// Lightning-indexer speed (a benchmark, not a test): paged decode / verify scores over the indexer-key
// pool (pages shuffled, pool far larger than L2) and ragged causal prefill scores. CUDA events, median
// of many after warm-up. FLOPs = 2 * rows * heads * 128 * visible keys; bytes = keys read once
// (132 B each: 128 fp8 + f32 scale) + logits written (4 B per (row, column)) + q.
// Each shape runs on the portable kernel and, where they apply, on the Hopper ones (FP8 wgmma); the line
// names the kernel that ran (the plan's kernel_name).
//
// Usage: bench_indexer [--quick] [filter-substring]
#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attnserve/cache_formats.h"
#include "bench_sparse_util.cuh"
#include "cuda/indexer/plan.h"
#include "cuda/indexer/sm90/config.h"

using namespace attnserve;
using namespace dsa_bench;

namespace {

// Runs `time_one(kernel name)` once per kernel that can run the problem: the portable one, then the Hopper
// ones the plan takes under Tuning{.sm90 = 1} (ragged: the session-4 kernel and the warp-specialized one;
// paged: the ws kernel); the ws kernel's quad form (four math warpgroups) where it exists; the ws kernel in each
// of its overlap modes; then the ws kernel again at each forced
// column span of `spans` (against the plan's).
template <typename F>
void for_each_kernel(const cuda::indexer::Problem& problem, F&& time_one, const std::vector<int64_t>& spans = {}) {
  const DeviceCaps caps = query_device_caps(Device::cuda());
  int previous = -1;
  for (int form : {0, 1, 2}) {
    cuda::indexer::op_tuning() = {.sm90 = form == 0 ? 0 : 1, .sm90_ws = form == 2 ? 1 : 0};
    const auto plan = cuda::indexer::make_plan(problem, caps, cuda::indexer::op_tuning());
    if (form > 0 && !cuda::indexer::is_sm90(plan.kernel)) continue;
    if (int(plan.kernel) == previous) continue;  // paged: one Hopper kernel
    previous = int(plan.kernel);
    const std::string kernel = cuda::indexer::kernel_name(plan.kernel);
    time_one(" [" + kernel + (cuda::indexer::is_sm90_ws(plan.kernel) ? " mode " + std::to_string(plan.ws_mode) : "") +
             "]");
    // The four-math-warpgroup kernel (mode kWsQuadMode = 12, the paged default) where it exists and the plan's
    // choice is another mode, next to it (A/B).
    if (cuda::indexer::is_sm90_ws(plan.kernel) && plan.ws_mode != cuda::indexer90::kWsQuadMode) {
      cuda::indexer::op_tuning().ws_mode = cuda::indexer90::kWsQuadMode;
      if (cuda::indexer::make_plan(problem, caps, cuda::indexer::op_tuning()).ws_mode == cuda::indexer90::kWsQuadMode)
        time_one(" [" + kernel + " mode " + std::to_string(cuda::indexer90::kWsQuadMode) + " quad]");
      cuda::indexer::op_tuning().ws_mode = -1;
    }
    // The ws kernel's other modes where it has them (bits: 1 ping-pong, 2 split commit groups, 4 the batched
    // epilogue; 0 lockstep): 0..7 ragged and paged next_n 2, 4 with 16-byte keys, 0 and 4 elsewhere.
    if (cuda::indexer::is_sm90_ws(plan.kernel))
      for (int mode = 0; mode < cuda::indexer90::kWsModes; ++mode) {
        if (mode == plan.ws_mode) continue;
        cuda::indexer::op_tuning().ws_mode = mode;
        if (cuda::indexer::make_plan(problem, caps, cuda::indexer::op_tuning()).ws_mode != mode) continue;  // none
        time_one(" [" + kernel + " mode " + std::to_string(mode) + "]");
      }
    cuda::indexer::op_tuning().ws_mode = -1;
    if (cuda::indexer::is_sm90_ws(plan.kernel))
      for (const int64_t span : spans) {
        cuda::indexer::op_tuning().ws_cols_per_cta = span;
        time_one(std::string(" [") + cuda::indexer::kernel_name(plan.kernel) + " span " + std::to_string(span) + "]");
      }
  }
  cuda::indexer::op_tuning() = {};
}

void bench_paged(int64_t b, int64_t ctx, int64_t heads, int next_n, int page_size,
                 const std::vector<int64_t>& spans = {}) {
  const std::string name = "indexer paged b " + std::to_string(b) + " ctx " + std::to_string(ctx >> 10) + "K heads " +
                           std::to_string(heads) + " next_n " + std::to_string(next_n) + " page " +
                           std::to_string(page_size);
  if (!selected(name)) return;
  const int64_t rows = b * next_n, pages_per = (ctx + page_size - 1) / page_size, num_pages = b * pages_per;
  const std::size_t pool_bytes = std::size_t(num_pages) * IndexerKeyLayout::bytes_per_page(page_size);
  Buffer pool(pool_bytes, Device::cuda());
  fill_fp8(pool.data(), pool_bytes, 11);
  // Scales: overwrite every page's scale block with 2^-4 (the fill above wrote fp8 codes there).
  {  // one strided copy (a copy per page took seconds at page size 1)
    std::vector<float> scales(static_cast<std::size_t>(num_pages * page_size), 0.0625f);
    DSA_CK(cudaMemcpy2D(static_cast<uint8_t*>(pool.data()) + std::size_t(page_size) * 128,
                        IndexerKeyLayout::bytes_per_page(page_size), scales.data(), std::size_t(page_size) * 4,
                        std::size_t(page_size) * 4, std::size_t(num_pages), cudaMemcpyHostToDevice));
  }
  std::vector<int32_t> ids(static_cast<std::size_t>(num_pages)), seq(static_cast<std::size_t>(b), int32_t(ctx));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937_64(5));
  Buffer pt(ids.size() * 4, Device::cuda()), sl(seq.size() * 4, Device::cuda());
  DSA_CK(cudaMemcpy(pt.data(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  DSA_CK(cudaMemcpy(sl.data(), seq.data(), seq.size() * 4, cudaMemcpyHostToDevice));
  const int sets = 2;
  Buffer q(std::size_t(rows * heads * 128) * sets, Device::cuda()), w(std::size_t(rows * heads) * 4, Device::cuda());
  Buffer logits(std::size_t(rows * ctx) * 4, Device::cuda());
  fill_fp8(q.data(), std::size_t(rows * heads * 128) * sets, 12);
  fill_f32(w.data(), std::size_t(rows * heads), 13, 0.2f);
  IndexerPagedArgs a{
      .q = TensorView::contiguous(q.data(), DType::fp8_e4m3, {rows, heads, 128}, Device::cuda()),
      .weights = TensorView::contiguous(w.data(), DType::f32, {rows, heads}, Device::cuda()),
      .index_k_cache = TensorView::contiguous(
          pool.data(), DType::u8, {num_pages, int64_t(IndexerKeyLayout::bytes_per_page(page_size))}, Device::cuda()),
      .page_table = TensorView::contiguous(pt.data(), DType::i32, {b, pages_per}, Device::cuda()),
      .seqlens = TensorView::contiguous(sl.data(), DType::i32, {b}, Device::cuda()),
      .logits = TensorView::contiguous(logits.data(), DType::f32, {rows, ctx}, Device::cuda()),
      .page_size = page_size,
      .next_n = next_n};
  double visible = 0;
  for (int t = 0; t < next_n; ++t) visible += double(b) * double(ctx - next_n + t + 1);
  const double flops = 2.0 * double(heads) * 128 * visible;
  const double bytes = double(b) * ctx * 132 + double(rows) * ctx * 4 + double(rows) * heads * 132;
  for_each_kernel(
      cuda::indexer::problem_of(a),
      [&](const std::string& kernel) {
        const double us = median_us([&](int i) {
          IndexerPagedArgs r = a;
          r.q.data = static_cast<uint8_t*>(q.data()) + std::size_t(i % sets) * rows * heads * 128;
          indexer_paged(r);
        });
        report(name + kernel, us, flops, bytes, "floor: bytes at the copy ceiling");
      },
      spans);
}

void bench_ragged_prefill(int64_t tokens, int64_t heads, const std::vector<int64_t>& spans = {}) {
  const std::string name =
      "indexer ragged causal prefill " + std::to_string(tokens) + " tokens heads " + std::to_string(heads);
  if (!selected(name)) return;
  Buffer q(std::size_t(tokens * heads * 128), Device::cuda()), w(std::size_t(tokens * heads) * 4, Device::cuda());
  Buffer k(std::size_t(tokens) * 128, Device::cuda()), ks(std::size_t(tokens) * 4, Device::cuda()),
      ke(std::size_t(tokens) * 4, Device::cuda()), scale(std::size_t(tokens) * 4, Device::cuda());
  Buffer logits(std::size_t(tokens * tokens) * 4, Device::cuda());
  fill_fp8(q.data(), std::size_t(tokens * heads * 128), 21);
  fill_fp8(k.data(), std::size_t(tokens) * 128, 22);
  fill_f32(w.data(), std::size_t(tokens * heads), 23, 0.2f);
  fill_f32(scale.data(), std::size_t(tokens), 24, 0.1f);
  std::vector<int32_t> lo(static_cast<std::size_t>(tokens), 0), hi(static_cast<std::size_t>(tokens));
  std::iota(hi.begin(), hi.end(), 1);
  DSA_CK(cudaMemcpy(ks.data(), lo.data(), lo.size() * 4, cudaMemcpyHostToDevice));
  DSA_CK(cudaMemcpy(ke.data(), hi.data(), hi.size() * 4, cudaMemcpyHostToDevice));
  IndexerRaggedArgs a{.q = TensorView::contiguous(q.data(), DType::fp8_e4m3, {tokens, heads, 128}, Device::cuda()),
                      .weights = TensorView::contiguous(w.data(), DType::f32, {tokens, heads}, Device::cuda()),
                      .k = TensorView::contiguous(k.data(), DType::fp8_e4m3, {tokens, 128}, Device::cuda()),
                      .k_scale = TensorView::contiguous(scale.data(), DType::f32, {tokens}, Device::cuda()),
                      .ks = TensorView::contiguous(ks.data(), DType::i32, {tokens}, Device::cuda()),
                      .ke = TensorView::contiguous(ke.data(), DType::i32, {tokens}, Device::cuda()),
                      .logits = TensorView::contiguous(logits.data(), DType::f32, {tokens, tokens}, Device::cuda())};
  const double flops = 2.0 * double(heads) * 128 * double(tokens) * double(tokens + 1) / 2;
  const double bytes = double(tokens) * tokens * 4 + double(tokens) * 132 * 2;
  for_each_kernel(
      cuda::indexer::problem_of(a),
      [&](const std::string& kernel) {
        const double us = median_us([&](int) { indexer_ragged(a); }, 2, 10);
        report(name + kernel, us, flops, bytes, "causal: half the square computed, all of it written");
      },
      spans);
}

}  // namespace

int main(int argc, char** argv) try {
  if (!bench_start(argc, argv, "== bench_indexer (median; pools far larger than L2)")) return 0;
  bench_paged(128, 32 << 10, 64, 1, 64, {2048, 16384});
  bench_paged(128, 8 << 10, 64, 1, 64);
  bench_paged(64, 32 << 10, 64, 2, 64);
  bench_paged(128, 32 << 10, 64, 2, 64);
  bench_paged(128, 32 << 10, 64, 4, 64, {2048});
  bench_paged(128, 32 << 10, 64, 1, 1);
  bench_ragged_prefill(4096, 64);
  bench_ragged_prefill(8192, 64, {1024, 2048});
  return 0;
} catch (const std::exception& e) {  // CUDA errors (DSA_CK) and attnserve::Error from the ops
  std::fprintf(stderr, "%s: %s\n", "bench_indexer", e.what());
  return 1;
}
