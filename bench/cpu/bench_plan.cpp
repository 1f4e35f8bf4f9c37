// Host cost of planning (CPU device, so the page-table gathers run in host code too):
//   256 decode requests, and a 64-request mixed extend batch (cached prefixes + new tokens).
// The *_short variants keep every request within 16 keys, so the gather is negligible and the time
// is the planner's own bookkeeping (validation, staging, one copy) - what a GPU plan costs the host
// besides its kernel launches.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "attnserve/plan.h"

using namespace attnserve;

namespace {

constexpr int kCtx = 8192;

struct Setup {
  int pool_size = 300;
  std::vector<int32_t> r2t, seq, pool, ext, pre;
  Setup(ForwardMode mode, int bs, int max_kv, int max_new, uint64_t seed = 42) : r2t(std::size_t(pool_size) * kCtx) {
    std::mt19937_64 g(seed);
    std::iota(r2t.begin(), r2t.end(), 0);
    std::vector<int32_t> rows(static_cast<std::size_t>(pool_size));
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), g);
    for (int r = 0; r < bs; ++r) {
      pool.push_back(rows[std::size_t(r)]);
      if (mode == ForwardMode::decode) {
        seq.push_back(std::uniform_int_distribution<int>(1, max_kv)(g));
      } else {
        const int q = std::uniform_int_distribution<int>(1, max_new)(g);
        const int p = std::uniform_int_distribution<int>(0, max_kv - q)(g);
        ext.push_back(q), pre.push_back(p), seq.push_back(p + q);
      }
    }
    spec.mode = mode;
    spec.seq_lens = seq;
    spec.req_pool_indices = pool;
    spec.extend_seq_lens = ext;
    spec.extend_prefix_lens = pre;
    spec.req_to_token = TensorView::contiguous(r2t.data(), DType::i32, {pool_size, kCtx});
  }
  BatchSpec spec;
};

const PlanCapacity kCap{.max_bs = 256, .max_num_tokens = 16384, .max_context_len = kCtx};

template <class Planner, class Config>
void run_plan(benchmark::State& state, const Config& cfg, const Setup& s) {
  Planner p(cfg, Device::cpu());
  p.init(kCap);
  for (auto _ : state) benchmark::DoNotOptimize(&p.plan(s.spec));
  state.SetItemsProcessed(state.iterations() * int64_t(s.seq.size()));
}

void BM_DenseDecode256(benchmark::State& st) {
  run_plan<DensePlanner>(st, DensePlanConfig{.page_size = 1}, Setup(ForwardMode::decode, 256, 4096, 1));
}
void BM_DenseDecode256_short(benchmark::State& st) {
  run_plan<DensePlanner>(st, DensePlanConfig{.page_size = 1}, Setup(ForwardMode::decode, 256, 16, 1));
}
void BM_SparseDecode256(benchmark::State& st) {
  run_plan<SparsePlanner>(st, SparsePlanConfig{.page_size = 64, .topk = 2048},
                          Setup(ForwardMode::decode, 256, 4096, 1));
}
void BM_SparseDecode256_short(benchmark::State& st) {
  run_plan<SparsePlanner>(st, SparsePlanConfig{.page_size = 64, .topk = 2048}, Setup(ForwardMode::decode, 256, 16, 1));
}
void BM_DenseExtend64Mixed(benchmark::State& st) {
  run_plan<DensePlanner>(st, DensePlanConfig{.page_size = 1}, Setup(ForwardMode::extend, 64, 4096, 256));
}
void BM_DenseExtend64Mixed_local(benchmark::State& st) {
  run_plan<DensePlanner>(st, DensePlanConfig{.page_size = 1, .attention_chunk_size = 1024},
                         Setup(ForwardMode::extend, 64, 4096, 256));
}
void BM_DenseExtend64Mixed_short(benchmark::State& st) {
  run_plan<DensePlanner>(st, DensePlanConfig{.page_size = 1}, Setup(ForwardMode::extend, 64, 16, 8));
}
void BM_SparseExtend64Mixed(benchmark::State& st) {
  run_plan<SparsePlanner>(st, SparsePlanConfig{.page_size = 64, .topk = 2048},
                          Setup(ForwardMode::extend, 64, 4096, 256));
}
void BM_SparseExtend64Mixed_short(benchmark::State& st) {
  run_plan<SparsePlanner>(st, SparsePlanConfig{.page_size = 64, .topk = 2048}, Setup(ForwardMode::extend, 64, 16, 8));
}

// Graph replay of a 256-request decode batch (the per-step cost with CUDA graphs).
void BM_DenseReplayDecode256(benchmark::State& state) {
  Setup s(ForwardMode::decode, 256, 4096, 1);
  DensePlanner p(DensePlanConfig{.page_size = 1}, Device::cpu());
  p.init(kCap);
  p.capture(256, ForwardMode::decode);
  for (auto _ : state) benchmark::DoNotOptimize(&p.replay(256, ForwardMode::decode, s.spec));
  state.SetItemsProcessed(state.iterations() * 256);
}
void BM_DenseReplayDecode256_short(benchmark::State& state) {
  Setup s(ForwardMode::decode, 256, 16, 1);
  DensePlanner p(DensePlanConfig{.page_size = 1}, Device::cpu());
  p.init(kCap);
  p.capture(256, ForwardMode::decode);
  for (auto _ : state) benchmark::DoNotOptimize(&p.replay(256, ForwardMode::decode, s.spec));
  state.SetItemsProcessed(state.iterations() * 256);
}

}  // namespace

BENCHMARK(BM_DenseDecode256);
BENCHMARK(BM_DenseDecode256_short);
BENCHMARK(BM_SparseDecode256);
BENCHMARK(BM_SparseDecode256_short);
BENCHMARK(BM_DenseReplayDecode256);
BENCHMARK(BM_DenseReplayDecode256_short);
BENCHMARK(BM_DenseExtend64Mixed);
BENCHMARK(BM_DenseExtend64Mixed_local);
BENCHMARK(BM_DenseExtend64Mixed_short);
BENCHMARK(BM_SparseExtend64Mixed);
BENCHMARK(BM_SparseExtend64Mixed_short);
