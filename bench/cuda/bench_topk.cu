// Top-k speed (a benchmark, not a test): exact top-k of float rows on the GPU, CUDA events, median
// of many after warm-up, score sets rotated beyond the 60 MB L2. Targets (issue 16) and sglang's
// same-run figures (shared/ANCHORS.md, N(0, 1) scores) are in the notes of each case. Cases without a
// tag run the plan's choice; " [global]" forces the multi-pass kernel, " [N threads]" the CTA size,
// " [cluster N]" N CTAs per row (1: none), " [direct emit]" the sampled kernel's unstaged output stores,
// " [mask emit]" / " [recount emit]" its emit forced to keep the count pass's masks (topk_op::Emit::kept_masks,
// session 6's) or to recount, for A/Bs in one process. " [s7 A/B: <variant>]": session 7's variants
// (" [s7 A/B: l2 prefetch]": topk_op::Tuning::l2_prefetch; " [s7 A/B: lean emit]": Emit::kept_masks_lean;
// " [s7 A/B: lean select]": Tuning::lean_select; " [s7 A/B: offset digit]": Tuning::offset_digit; " [s7 A/B:
// all four]", the plan's default since 26d4201) beside " [s7 A/B: none]" (all four forced off). " [s8 A/B: <variant>]":
// session 8's streaming filter (topk_op::Tuning::stream) and its fused count (Tuning::fused_count) beside the plan's
// default ("s7 all four") and the default without its L2 prefetch ("no prefetch").
// Timing: device time, as the ANCHORS harness measures its peers: a spin kernel runs before each timed
// call so the host has enqueued the call before the start event fires (the host's cost per call, ~5 us
// of checks, plan and launch, is not counted). " [host+device]" cases time the old way (events around
// the call with the GPU idle: the host's cost counted), for comparison with session 3's figures.
// GB/s counts the scores read once (the floor: rows * len * 4 bytes at the copy ceiling).
//
// Usage: bench_topk [--quick] [filter-substring]
#include <algorithm>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "bench_sparse_util.cuh"
#include "cuda/topk/sm80/topk_path.h"

using namespace attnserve;
using namespace dsa_bench;

namespace {

enum class Fill { uniform, normal, ties16 };

// A session-7 variant of the sampled kernel (bench_s7_variants), forced through the launcher's hooks.
struct S7Variant {
  const char* name;
  bool l2_prefetch;          // cuda::set_topk_l2_prefetch
  bool lean_emit;            // cuda::TopkEmit::kept_masks_lean
  bool lean_select;          // cuda::set_topk_lean_select
  bool offset_digit;         // cuda::set_topk_offset_digit
  bool stream = false;       // cuda::set_topk_stream (session 8)
  bool fused_count = false;  // cuda::set_topk_fused_count (session 8)
  bool s8 = false;           // a row of bench_s8_variants (" [s8 A/B: ...]")
  bool bin_list = false;     // cuda::set_topk_bin_list (s8-topk2)
  bool s8b = false;          // a row of bench_bin_list (" [s8 bin A/B: ...]")
};

// N(0, 1) by Box-Muller on two hashes (what the same-run peer harness feeds: torch.randn).
__global__ void fill_normal_kernel(float* p, std::size_t n, uint32_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const float u1 = (float(hash32(i, seed) & 0xffffff) + 0.5f) / 16777216.f;
    const float u2 = (float(hash32(i, seed ^ 0x9e3779b9u) & 0xffffff) + 0.5f) / 16777216.f;
    p[i] = sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
  }
}
// 16 levels inside one 12-bit key bin (1.0 + level * 256 ulp): every row ties massively at its threshold.
__global__ void fill_ties16_kernel(float* p, std::size_t n, uint32_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    p[i] = __uint_as_float(0x3f800000u + (hash32(i, seed) & 15u) * 256u);
}

const char* path_name(cuda::TopkPath path) {
  switch (path) {
    case cuda::TopkPath::global: return " [global]";
    case cuda::TopkPath::sampled: return " [sampled]";
    default: return "";
  }
}

__global__ void empty_kernel() {}

// Median device time (us) of fn(i): spin, start event, fn, end event, per rep (bench_timing.py's method).
double device_median_us(const std::function<void(int)>& fn, int warm = 3, int reps = 30) {
  if (g_quick) reps = std::min(reps, 8);
  for (int i = 0; i < warm; ++i) fn(i);
  DSA_CK(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> a(static_cast<std::size_t>(reps)), b(static_cast<std::size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    DSA_CK(cudaEventCreate(&a[std::size_t(i)]));
    DSA_CK(cudaEventCreate(&b[std::size_t(i)]));
  }
  for (int i = 0; i < reps; ++i) {
    attnserve::bench::hide_host_launch();  // the GPU stays busy while the host enqueues the call (bench_spin.cuh)
    DSA_CK(cudaEventRecord(a[std::size_t(i)]));
    fn(warm + i);
    DSA_CK(cudaEventRecord(b[std::size_t(i)]));
  }
  DSA_CK(cudaDeviceSynchronize());
  std::vector<double> v;
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    DSA_CK(cudaEventElapsedTime(&ms, a[std::size_t(i)], b[std::size_t(i)]));
    v.push_back(ms * 1000.0);
    cudaEventDestroy(a[std::size_t(i)]);
    cudaEventDestroy(b[std::size_t(i)]);
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The timing floor of both methods: an empty kernel (one warp), and the same with the host's cost counted.
void bench_empty_launch() {
  if (!selected("empty launch")) return;
  report("empty launch (device time)", device_median_us([](int) { empty_kernel<<<1, 32>>>(); }), 0, 0, "the floor");
  report("empty launch [host+device]", median_with_host_us([](int) { empty_kernel<<<1, 32>>>(); }, 3, 30), 0, 0, "");
}

void bench_case(int64_t rows, int64_t width, int k, TopkTransform transform, const char* peer,
                Fill fill = Fill::uniform, cuda::TopkPath path = cuda::TopkPath::automatic, int stop = 0,
                bool host_too = false, int threads = 0, int cluster = 0, bool direct = false,
                cuda::TopkEmit emit = cuda::TopkEmit::automatic, const S7Variant* s7 = nullptr) {
  const std::string name =
      "topk " + std::to_string(k) + " of " + std::to_string(width >> 10) + "K x " + std::to_string(rows) + " rows" +
      (transform == TopkTransform::decode ? " +decode" : "") +
      (fill == Fill::normal   ? " normal"
       : fill == Fill::ties16 ? " ties16"
                              : "") +
      path_name(path) + (stop ? " [phase " + std::to_string(stop) + "]" : std::string()) +
      (host_too ? " [host+device]" : "") + (threads ? " [" + std::to_string(threads) + " threads]" : std::string()) +
      (cluster ? " [cluster " + std::to_string(cluster) + "]" : std::string()) + (direct ? " [direct emit]" : "") +
      (emit == cuda::TopkEmit::kept_masks ? " [mask emit]"
       : emit == cuda::TopkEmit::recount  ? " [recount emit]"
                                          : "") +
      (s7 ? std::string(s7->s8b  ? " [s8 bin A/B: "
                        : s7->s8 ? " [s8 A/B: "
                                 : " [s7 A/B: ") +
                s7->name + "]"
          : std::string());
  if (!selected(name)) return;
  cuda::set_topk_path(path);
  cuda::set_topk_debug_stop(stop);
  cuda::set_topk_threads(threads);
  cuda::set_topk_cluster(cluster);
  cuda::set_topk_direct_emit(direct);
  cuda::set_topk_emit(emit);
  // A session-7 variant forces each of its four parts on or off (the plan's default has all four on).
  if (s7) {
    const cuda::TopkEmit plain = emit == cuda::TopkEmit::automatic ? cuda::TopkEmit::kept_masks : emit;
    cuda::set_topk_emit(s7->lean_emit ? cuda::TopkEmit::kept_masks_lean : plain);
  }
  cuda::set_topk_l2_prefetch(s7 ? int(s7->l2_prefetch) : -1);
  cuda::set_topk_lean_select(s7 ? int(s7->lean_select) : -1);
  cuda::set_topk_offset_digit(s7 ? int(s7->offset_digit) : -1);
  cuda::set_topk_stream(s7 ? int(s7->stream) : -1);
  cuda::set_topk_fused_count(s7 ? int(s7->fused_count) : -1);
  cuda::set_topk_bin_list(s7 ? int(s7->bin_list) : -1);
  const std::size_t set_bytes = std::size_t(rows * width) * 4;
  const int sets = sets_for(set_bytes);
  Buffer scores(set_bytes * sets, Device::cuda()), lengths(std::size_t(rows) * 4, Device::cuda());
  Buffer out(std::size_t(rows) * k * 4, Device::cuda()), table;
  const std::size_t n = std::size_t(rows * width) * sets;
  if (fill == Fill::uniform) fill_f32(scores.data(), n, 7);
  else if (fill == Fill::normal) fill_normal_kernel<<<2048, 256>>>(static_cast<float*>(scores.data()), n, 7);
  else fill_ties16_kernel<<<2048, 256>>>(static_cast<float*>(scores.data()), n, 7);
  DSA_CK(cudaGetLastError());
  fill_const(lengths.data(), std::size_t(rows), int32_t(width));
  TopkArgs a{.scores = TensorView::contiguous(scores.data(), DType::f32, {rows, width}, Device::cuda()),
             .lengths = TensorView::contiguous(lengths.data(), DType::i32, {rows}, Device::cuda()),
             .out = TensorView::contiguous(out.data(), DType::i32, {rows, k}, Device::cuda()),
             .topk = k};
  if (transform == TopkTransform::decode) {
    table = Buffer(std::size_t(rows * width) * 4, Device::cuda());
    fill_index(table.data(), std::size_t(rows * width), 3, 1u << 30);
    a.transform = transform;
    a.page_table_1 = TensorView::contiguous(table.data(), DType::i32, {rows, width}, Device::cuda());
  }
  const std::size_t ws_bytes = topk_workspace_size(a, query_device_caps(Device::cuda()));
  Buffer ws(std::max<std::size_t>(ws_bytes, 16), Device::cuda());
  const auto call = [&](int i) {
    TopkArgs r = a;
    r.scores.data = static_cast<float*>(scores.data()) + std::size_t(i % sets) * rows * width;
    topk(r, Workspace{ws.data(), ws.bytes()}, {});
  };
  const double us = host_too ? median_with_host_us(call, 3, 30) : device_median_us(call, 3, 30);
  report(name, us, 0, double(set_bytes), peer);
  cuda::set_topk_path(cuda::TopkPath::automatic);
  cuda::set_topk_debug_stop(0);
  cuda::set_topk_threads(0);
  cuda::set_topk_cluster(0);
  cuda::set_topk_direct_emit(false);
  cuda::set_topk_emit(cuda::TopkEmit::automatic);
  cuda::set_topk_l2_prefetch(-1);
  cuda::set_topk_lean_select(-1);
  cuda::set_topk_offset_digit(-1);
  cuda::set_topk_stream(-1);
  cuda::set_topk_fused_count(-1);
  cuda::set_topk_bin_list(-1);
}

// Session 7's variants (topk_op::Tuning) against "none" (all four forced off: session 6's kept-masks path),
// adjacent rows per shape, two rounds ("s7 A/B" selects them all). "all four" is the plan's default since 26d4201.
void bench_s7_variants() {
  static const S7Variant kDefault{"none", false, false, false, false},
      kPrefetch{"l2 prefetch", true, false, false, false}, kLeanEmit{"lean emit", false, true, false, false},
      kLeanSelect{"lean select", false, false, true, false}, kOffset{"offset digit", false, false, false, true},
      kLean{"lean emit + lean select", false, true, true, false}, kAll{"all four", true, true, true, true};
  struct Shape {
    int64_t rows, width;
  };
  const TopkTransform none = TopkTransform::none;
  const auto ab = [&](Shape sh, std::initializer_list<const S7Variant*> variants) {
    for (int round = 0; round < 2; ++round)
      for (const S7Variant* v : variants)
        bench_case(sh.rows, sh.width, 2048, none, round ? "round 2" : "round 1", Fill::normal,
                   cuda::TopkPath::automatic, 0, false, 0, 0, false, cuda::TopkEmit::automatic, v);
  };
  // Rows the filter streams (the prefetch applies): every variant.
  for (const Shape sh : {Shape{128, 64 << 10}, Shape{1, 64 << 10}, Shape{128, 128 << 10}, Shape{128, 16 << 10},
                         Shape{16, 64 << 10}, Shape{32, 256 << 10}, Shape{1, 128 << 10}, Shape{4096, 8 << 10}})
    ab(sh, {&kDefault, &kPrefetch, &kLeanEmit, &kLeanSelect, &kOffset, &kAll});
  // Whole rows (loaded whole: no prefetch): the emits.
  for (const Shape sh : {Shape{8192, 4 << 10}, Shape{128, 4 << 10}, Shape{1, 4 << 10}})
    ab(sh, {&kDefault, &kLeanEmit, &kLeanSelect, &kLean});
  // Where the time moves: the end of the filter (phase 4, a cluster's rows gathered into CTA 0: the prefetch)
  // and of the select (phase 5: the lean select, the offset digit).
  for (const Shape sh : {Shape{128, 64 << 10}, Shape{1, 64 << 10}})
    for (const S7Variant* v : {&kDefault, &kPrefetch})
      bench_case(sh.rows, sh.width, 2048, none, "phase", Fill::normal, cuda::TopkPath::automatic, 4, false, 0, 0, false,
                 cuda::TopkEmit::automatic, v);
  for (const Shape sh : {Shape{128, 64 << 10}, Shape{1, 64 << 10}, Shape{8192, 4 << 10}})
    for (const S7Variant* v : {&kDefault, &kLeanSelect, &kOffset})
      if (v != &kOffset || sh.width > 4096)  // whole rows have no threshold: no offset digit
        bench_case(sh.rows, sh.width, 2048, none, "phase", Fill::normal, cuda::TopkPath::automatic, 5, false, 0, 0,
                   false, cuda::TopkEmit::automatic, v);
}

// Session 8's streaming filter (opt-in, unmeasured) against the plan's default (session 7's four variants) and the
// default without its L2 prefetch, adjacent rows per shape, two rounds ("s8 A/B" selects them all). Rows of 4K take no
// prefetch; 8192 of them run 256 threads, none of this: the same kernel in every row (the spread); 128 or 1 of them run
// 1024 threads, loaded whole: there the streaming kernel differs only by its selects' cleared histogram. Then the
// phase stops of the target shape and of a lone 64K row (clusters of 8): 3 threshold found, 4 filtered, 5 selected.
void bench_s8_variants() {
  static const S7Variant kAll{"s7 all four", true, true, true, true, false, false, true},
      kNoPrefetch{"no prefetch", false, true, true, true, false, false, true},
      kStream{"stream", false, true, true, true, true, false, true},
      kFused{"stream + fused count", false, true, true, true, true, true, true};
  struct Shape {
    int64_t rows, width;
  };
  for (const Shape sh :
       {Shape{128, 64 << 10}, Shape{128, 128 << 10}, Shape{1, 64 << 10}, Shape{128, 16 << 10}, Shape{8192, 4 << 10},
        Shape{16, 64 << 10}, Shape{32, 256 << 10}, Shape{1, 128 << 10}, Shape{128, 4 << 10}, Shape{1, 4 << 10}})
    for (int round = 0; round < 2; ++round)
      for (const S7Variant* v : {&kAll, &kNoPrefetch, &kStream, &kFused})
        bench_case(sh.rows, sh.width, 2048, TopkTransform::none, round ? "round 2" : "round 1", Fill::normal,
                   cuda::TopkPath::automatic, 0, false, 0, 0, false, cuda::TopkEmit::automatic, v);
  for (const Shape sh : {Shape{128, 64 << 10}, Shape{1, 64 << 10}})
    for (const int stop : {3, 4, 5})
      for (const S7Variant* v : {&kAll, &kNoPrefetch, &kStream, &kFused})
        bench_case(sh.rows, sh.width, 2048, TopkTransform::none, "phase", Fill::normal, cuda::TopkPath::automatic, stop,
                   false, 0, 0, false, cuda::TopkEmit::automatic, v);
  // The adversarial rows of the target shape (ties at the threshold: positions decide).
  for (const S7Variant* v : {&kAll, &kStream, &kFused})
    bench_case(128, 64 << 10, 2048, TopkTransform::none, "adversarial", Fill::ties16, cuda::TopkPath::automatic, 0,
               false, 0, 0, false, cuda::TopkEmit::automatic, v);
}

// s8-topk2's bin-list select (Tuning::bin_list, opt-in, unmeasured) beside the same kernel without it, adjacent rows
// per shape, two rounds ("s8 bin A/B" selects them all): the sampled kernel without the L2 prefetch (the plan's
// default above 16 MB of scores: 128 x 64K, 128 x 128K) and the streaming filter (the default for <= 32 rows), each
// with the lean emit, lean select and offset digit (the defaults). 8192 x 4K runs 256 threads, where it does not apply
// (the spread). Then the phase stops 4 (filtered) and 5 (selected) of 128 x 64K and 1 x 64K, and the tied rows.
void bench_bin_list() {
  static const S7Variant kPlain{"no prefetch", false, true, true, true, false, false, true, false, true},
      kPlainBin{"no prefetch + bin list", false, true, true, true, false, false, true, true, true},
      kStream{"stream", false, true, true, true, true, false, true, false, true},
      kStreamBin{"stream + bin list", false, true, true, true, true, false, true, true, true},
      kFusedBin{"stream + fused count + bin list", false, true, true, true, true, true, true, true, true};
  struct Shape {
    int64_t rows, width;
  };
  const std::initializer_list<const S7Variant*> all = {&kPlain, &kPlainBin, &kStream, &kStreamBin, &kFusedBin};
  for (const Shape sh : {Shape{128, 64 << 10}, Shape{128, 128 << 10}, Shape{1, 64 << 10}, Shape{8192, 4 << 10},
                         Shape{128, 16 << 10}, Shape{32, 256 << 10}})
    for (int round = 0; round < 2; ++round)
      for (const S7Variant* v : all)
        bench_case(sh.rows, sh.width, 2048, TopkTransform::none, round ? "round 2" : "round 1", Fill::normal,
                   cuda::TopkPath::automatic, 0, false, 0, 0, false, cuda::TopkEmit::automatic, v);
  for (const Shape sh : {Shape{128, 64 << 10}, Shape{1, 64 << 10}})
    for (const int stop : {4, 5})
      for (const S7Variant* v : all)
        bench_case(sh.rows, sh.width, 2048, TopkTransform::none, "phase", Fill::normal, cuda::TopkPath::automatic, stop,
                   false, 0, 0, false, cuda::TopkEmit::automatic, v);
  for (const S7Variant* v : {&kPlain, &kPlainBin})  // ties16: the k-th bin holds far more than the list's cap
    bench_case(128, 64 << 10, 2048, TopkTransform::none, "adversarial", Fill::ties16, cuda::TopkPath::automatic, 0,
               false, 0, 0, false, cuda::TopkEmit::automatic, v);
}

}  // namespace

int main(int argc, char** argv) try {
  if (!bench_start(argc, argv, "== bench_topk (median of 30, scores rotated over > 2x L2)")) return 0;
  using P = cuda::TopkPath;
  const TopkTransform none = TopkTransform::none;
  const Fill normal = Fill::normal;
  bench_empty_launch();
  // Issue 16 targets: 128 x 64K <= 20 us, 1 x 64K <= 15, 128 x 128K <= 40, 8K x 4096 rows <= 150.
  bench_case(128, 64 << 10, 2048, none, "target <= 20 us; sglang 43.6 us (ANCHORS, normal)");
  bench_case(128, 64 << 10, 2048, none, "sglang 43.6 us", normal);
  bench_case(128, 64 << 10, 2048, none, "A/B", normal, P::global);
  bench_case(128, 64 << 10, 2048, none, "repeat (spread)", normal);
  bench_case(128, 64 << 10, 2048, TopkTransform::decode, "fused slot transform; sglang 46.2 us", normal);
  bench_case(128, 64 << 10, 2048, none, "adversarial; sglang wrong on every row", Fill::ties16);
  bench_case(128, 16 << 10, 2048, none, "sglang 17.9 us", normal);
  bench_case(128, 16 << 10, 2048, none, "A/B", normal, P::global);
  bench_case(1, 64 << 10, 2048, none, "target <= 15 us; sglang 36.7 us", normal);
  bench_case(1, 16 << 10, 2048, none, "sglang 15.3 us", normal);
  bench_case(1, 4 << 10, 2048, none, "sglang 7.8 us", normal);
  bench_case(1, 4 << 10, 2048, none, "A/B", normal, P::global);
  bench_case(1, 128 << 10, 2048, none, "", normal);
  bench_case(128, 128 << 10, 2048, none, "target <= 40 us; sglang 97.5 us", normal);
  bench_case(32, 256 << 10, 2048, none, "", normal);
  bench_case(4096, 8 << 10, 2048, none, "prefill rows", normal);
  bench_case(8192, 4 << 10, 2048, none, "target <= 150 us (prefill rows)", normal);
  bench_case(8192, 4 << 10, 2048, none, "repeat (spread)", normal);
  bench_case(8192, 4 << 10, 2048, none, "A/B", normal, P::global);
  // The emit: staged in shared memory + 16-byte stores (the default) against direct 4-byte stores.
  for (const bool direct : {false, true}) {
    bench_case(8192, 4 << 10, 2048, none, "emit A/B", normal, P::automatic, 0, false, 0, 0, direct);
    bench_case(4096, 8 << 10, 2048, none, "emit A/B", normal, P::automatic, 0, false, 0, 0, direct);
    bench_case(128, 64 << 10, 2048, none, "emit A/B", normal, P::automatic, 0, false, 0, 0, direct);
    bench_case(1, 4 << 10, 2048, none, "emit A/B", normal, P::automatic, 0, false, 0, 0, direct);
    bench_case(128, 16 << 10, 2048, none, "emit A/B", normal, P::automatic, 0, false, 0, 0, direct);
  }
  // The emit's selection, adjacent rows per shape: the recount against the count pass's masks kept in a
  // register (the default since 610e825; bench/NOTES.md, sessions 6 and 7).
  for (const Fill fill : {normal, Fill::ties16})
    for (const int64_t rows : {8192, 128, 1})
      for (const auto emit : {cuda::TopkEmit::recount, cuda::TopkEmit::kept_masks}) {
        const int64_t width = rows == 128 ? 64 << 10 : 4 << 10;
        bench_case(rows, width, 2048, none, "mask emit A/B", fill, P::automatic, 0, false, 0, 0, false, emit);
      }
  // CTAs per row (a cluster, sm_90): 1 (one CTA per row) against 2, 4, 8.
  for (const int cluster : {1, 2, 4, 8}) {
    bench_case(1, 16 << 10, 2048, none, "cluster A/B", normal, P::automatic, 0, false, 0, cluster);
    bench_case(1, 64 << 10, 2048, none, "cluster A/B", normal, P::automatic, 0, false, 0, cluster);
    bench_case(1, 128 << 10, 2048, none, "cluster A/B", normal, P::automatic, 0, false, 0, cluster);
    bench_case(16, 64 << 10, 2048, none, "cluster A/B", normal, P::automatic, 0, false, 0, cluster);
    bench_case(32, 256 << 10, 2048, none, "cluster A/B", normal, P::automatic, 0, false, 0, cluster);
    bench_case(1, 64 << 10, 2048, none, "cluster A/B", Fill::ties16, P::automatic, 0, false, 0, cluster);
  }
  // The CTA size for rows that each get an SM.
  for (const int threads : {256, 1024}) {
    bench_case(1, 4 << 10, 2048, none, "A/B", normal, P::automatic, 0, false, threads);
    bench_case(128, 4 << 10, 2048, none, "A/B", normal, P::automatic, 0, false, threads);
    bench_case(128, 8 << 10, 512, none, "A/B", normal, P::automatic, 0, false, threads);
  }
  // Phases (cumulative time up to the end of phase n; 1 = launch + row set-up): 2 sample loaded,
  // 3 threshold found (rows <= 4096: loaded whole), 4 row filtered into shared memory (a cluster's rows
  // gathered into CTA 0), 5 candidates selected.
  for (int stop = 1; stop <= 5; ++stop) {
    if (stop != 2) bench_case(1, 4 << 10, 2048, none, "phase", normal, P::automatic, stop);
    bench_case(1, 64 << 10, 2048, none, "phase", normal, P::automatic, stop);
    bench_case(1, 64 << 10, 2048, none, "phase", normal, P::automatic, stop, false, 0, 1);
    bench_case(128, 64 << 10, 2048, none, "phase", normal, P::automatic, stop);
    if (stop != 2) bench_case(8192, 4 << 10, 2048, none, "phase", normal, P::automatic, stop);
  }
  bench_s7_variants();
  bench_s8_variants();
  bench_bin_list();
  // The old timing (host's cost counted), as session 3 measured.
  bench_case(1, 4 << 10, 2048, none, "session 3's method", normal, P::automatic, 0, true);
  bench_case(128, 64 << 10, 2048, none, "session 3's method", normal, P::automatic, 0, true);
  return 0;
} catch (const std::exception& e) {  // CUDA errors (DSA_CK) and attnserve::Error from the ops
  std::fprintf(stderr, "%s: %s\n", "bench_topk", e.what());
  return 1;
}
