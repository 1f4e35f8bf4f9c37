// CPU top-k scaling with row length (topk 2048): one row (single thread, latency) and a batch of
// rows (threaded over rows, throughput). The counter "per_row" is the wall time per row.
//   cmake -S . -B build-bench -DATTNSERVE_CUDA=OFF -DATTNSERVE_BENCH=ON && cmake --build build-bench --target
//   bench_topk_cpu OMP_WAIT_POLICY=passive ./build-bench/bench/bench_topk_cpu --benchmark_repetitions=5
//   --benchmark_report_aggregates_only=true
//
// Measured (2-core AMD EPYC VM shared with other builds, load average 2.2-2.9; medians of 5, three runs):
//   one row, N(0,1) scores, topk 2048:  4K 12-18 us | 16K 41-45 us | 64K 154-188 us | 256K 687-791 us
//     -> linear in the length, ~2.7-3 ns per element (two passes over the row + work on one radix bin).
//   64 distinct values (heavy ties):     4K 16-17 us | 16K 43-67 us | 64K 237-262 us | 256K 1.0-1.1 ms
//   all scores equal (worst case):       4K 26-28 us | 16K 94-101 us | 64K 363-377 us | 256K 1.45-1.53 ms
//   32 rows, threaded over 2 cores:      per row 4K 16-19 us | 16K 38-84 us | 64K 99-192 us | 256K 335-659 us
//     (the threaded figures swing with the other jobs on the machine).
// OMP_WAIT_POLICY=passive keeps idle OpenMP threads from spinning on a shared machine.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "attnserve/ops/topk.h"

using namespace attnserve;

namespace {

enum class Dist { normal, ties, all_equal };

struct Inputs {
  std::vector<float> scores;
  std::vector<int32_t> lengths, out;
  TopkArgs args;
  Inputs(int64_t rows, int64_t len, int topk, Dist dist)
      : scores(size_t(rows * len)), lengths(size_t(rows), int32_t(len)), out(size_t(rows * topk)) {
    std::mt19937_64 g(1234);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::uniform_int_distribution<int> level(0, 63);
    for (float& s : scores) s = dist == Dist::normal ? normal(g) : dist == Dist::ties ? float(level(g)) : 1.f;
    args = {.scores = TensorView::contiguous(scores.data(), DType::f32, {rows, len}),
            .lengths = TensorView::contiguous(lengths.data(), DType::i32, {rows}),
            .out = TensorView::contiguous(out.data(), DType::i32, {rows, topk}),
            .topk = topk};
  }
};

void run(benchmark::State& state, int64_t rows, Dist dist) {
  const int64_t len = state.range(0);
  Inputs in(rows, len, 2048, dist);
  for (auto _ : state) {
    topk(in.args);
    benchmark::DoNotOptimize(in.out.data());
    benchmark::ClobberMemory();
  }
  state.counters["per_row"] = benchmark::Counter(double(rows) * double(state.iterations()),
                                                 benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetBytesProcessed(int64_t(state.iterations()) * rows * len * int64_t(sizeof(float)));
}

void BM_TopkOneRow(benchmark::State& state) { run(state, 1, Dist::normal); }
void BM_TopkRows32(benchmark::State& state) { run(state, 32, Dist::normal); }
void BM_TopkOneRowTies64Levels(benchmark::State& state) { run(state, 1, Dist::ties); }
void BM_TopkOneRowAllEqual(benchmark::State& state) { run(state, 1, Dist::all_equal); }

}  // namespace

#define LENGTHS \
  ->Arg(4 << 10)->Arg(16 << 10)->Arg(64 << 10)->Arg(256 << 10)->Unit(benchmark::kMicrosecond)->UseRealTime()
BENCHMARK(BM_TopkOneRow) LENGTHS;
BENCHMARK(BM_TopkRows32) LENGTHS;
BENCHMARK(BM_TopkOneRowTies64Levels) LENGTHS;
BENCHMARK(BM_TopkOneRowAllEqual) LENGTHS;
