// Top-k on CUDA against the CPU oracle and brute force (compared as sets; len <= topk rows as exact
// lists): random scores and any topk, heavy ties, all-equal rows, -0 / -inf / NaN, row starts, rows of
// 64K / 128K / 256K with more than 16K candidates in the threshold bin, the fused transforms, the
// kernel's clamping of device-side lengths. Every GPU run is done twice on poisoned outputs and must
// give identical bits. Every check runs the sampled kernel eight ways (one CTA per row, and a cluster of
// 2, 4 and 8 CTAs per row: on sm_90 the CTAs split the row's filter and gather into CTA 0; elsewhere
// the same one-CTA launch; each with both emits: the recount and the kept masks (the default),
// topk_op::Emit), each against the oracle; they are checked on the rows that defeat the
// sample (the exact fallback), on misaligned rows around the 4096-value regime boundary and on ties
// broken by position in shared memory; the multi-pass kernel is also checked on its own (TopkPath::global),
// the direct (unstaged) emit too, and a CUDA graph's replays against eager runs. Session 7's opt-in
// variants (topk_op::Tuning) run every check too (thirteen kernel choices in all): the L2 prefetch, the lean kept-masks
// emit and the lean select each with one CTA per row, the offset digit with clusters of 2, all four with clusters of 8
// (the lean emit also in the graph replays); rows whose top values the sample misses test the offset digit's range (its
// restart from the standard digits). Session 8's streaming filter (topk_op::Tuning::stream, a kernel of its own) runs
// every check three ways: alone (one CTA per row, standard digits), with the fused count and session 7's lean emit,
// lean select and offset digit (one CTA per row), and the same with clusters of 4 (where the fused count stands
// aside); StreamingFilterGivesTheSameBits compares it bit for bit with the kernel without it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "attnserve/ops/topk.h"
#include "cpu/test_topk_util.h"
#include "cuda/topk/sm80/topk_path.h"
#include "test_sparse_gpu_util.h"

using namespace attnserve;
using namespace attnserve::test;
using namespace attnserve::test::dsa_gpu;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The kernels each check runs, one after the other (ForcePath narrows it to one).
struct KernelChoice {
  cuda::TopkPath path;
  int cluster;         // CTAs per row (cuda::set_topk_cluster; 0: the plan's)
  bool masks = false;  // the sampled kernel's emit: kept masks (true) or the recount (cuda::set_topk_emit)
  const char* name;
  bool l2_prefetch = false;  // the sampled kernel's long rows prefetch their steps into L2 (cuda::set_topk_l2_prefetch)
  bool lean_emit = false;    // the kept-masks emit's lean count and stores (TopkEmit::kept_masks_lean; masks implied)
  bool lean_select = false;  // the lean key-digit histograms (cuda::set_topk_lean_select)
  bool offset_digit = false;  // the candidates' first digit relative to the threshold (cuda::set_topk_offset_digit)
  bool stream = false;        // session 8's streaming filter (cuda::set_topk_stream)
  bool fused_count = false;   // its fused offset-digit count (cuda::set_topk_fused_count)
  bool bin_list = false;      // the k-th offset bin ranked as a list (cuda::set_topk_bin_list; s8-topk2)
};
std::vector<KernelChoice> g_paths = {
    {cuda::TopkPath::sampled, 1, false, "sampled, one CTA per row"},
    {cuda::TopkPath::sampled, 2, false, "sampled, clusters of 2 CTAs per row"},
    {cuda::TopkPath::sampled, 4, false, "sampled, clusters of 4 CTAs per row"},
    {cuda::TopkPath::sampled, 8, false, "sampled, clusters of 8 CTAs per row"},
    {cuda::TopkPath::sampled, 1, true, "sampled, one CTA per row, kept-masks emit"},
    {cuda::TopkPath::sampled, 2, true, "sampled, clusters of 2 CTAs per row, kept-masks emit"},
    {cuda::TopkPath::sampled, 4, true, "sampled, clusters of 4 CTAs per row, kept-masks emit"},
    {cuda::TopkPath::sampled, 8, true, "sampled, clusters of 8 CTAs per row, kept-masks emit"},
    // Session 7's opt-in variants (topk_op::Tuning) with the default emit's masks: each alone (one CTA per row;
    // the offset digit with clusters of 2), all four with clusters of 8 (the lean emit: whole rows, long rows
    // and the ragged transform take it; the others its fallback, the kept-masks emit).
    {cuda::TopkPath::sampled, 1, true, "sampled, one CTA per row, L2 prefetch", true},
    {cuda::TopkPath::sampled, 1, true, "sampled, one CTA per row, lean kept-masks emit", false, true},
    {cuda::TopkPath::sampled, 1, true, "sampled, one CTA per row, lean select", false, false, true},
    {cuda::TopkPath::sampled, 2, true, "sampled, clusters of 2 CTAs per row, offset digit", false, false, false, true},
    {cuda::TopkPath::sampled, 8, true,
     "sampled, clusters of 8 CTAs per row, L2 prefetch + lean emit + lean select + offset digit", true, true, true,
     true},
    // Session 8's streaming filter (1024-thread rows; others run the kernels above): alone, then with the fused
    // count and the lean emit, lean select and offset digit (one CTA per row; clusters of 4: no fused count there).
    {cuda::TopkPath::sampled, 1, true, "sampled, one CTA per row, streaming filter", false, false, false, false, true},
    {cuda::TopkPath::sampled, 1, true,
     "sampled, one CTA per row, streaming filter + fused count + lean emit + lean select + offset digit", false, true,
     true, true, true, true},
    {cuda::TopkPath::sampled, 4, true,
     "sampled, clusters of 4 CTAs per row, streaming filter + fused count + lean emit + lean select + offset digit",
     false, true, true, true, true, true},
    // s8-topk2's bin-list select (1024-thread sampled rows with the offset digit; others run the kernels above): with
    // the default's lean emit, lean select and offset digit (one CTA per row, clusters of 8), and on the streaming
    // filter with the fused count.
    {cuda::TopkPath::sampled, 1, true, "sampled, one CTA per row, lean emit + lean select + offset digit + bin list",
     false, true, true, true, false, false, true},
    {cuda::TopkPath::sampled, 8, true,
     "sampled, clusters of 8 CTAs per row, lean emit + lean select + offset digit + bin list", false, true, true, true,
     false, false, true},
    {cuda::TopkPath::sampled, 1, true,
     "sampled, one CTA per row, streaming filter + fused count + lean emit + lean select + offset digit + bin list",
     false, true, true, true, true, true, true}};

// ATTNSERVE_TOPK_S7=0 in the environment skips session 7's and 8's opt-in variants (e.g. under racecheck, where every
// kernel choice of a check costs ~3 s); ATTNSERVE_TOPK_S8=0 skips session 8's only.
bool is_s8_variant(const KernelChoice& c) { return c.stream || c.fused_count || c.bin_list; }
bool is_s7_variant(const KernelChoice& c) {
  return c.l2_prefetch || c.lean_emit || c.lean_select || c.offset_digit || is_s8_variant(c);
}
bool env_is_zero(const char* name) {
  const char* e = std::getenv(name);
  return e != nullptr && std::string(e) == "0";
}
// ATTNSERVE_TOPK_FEW=1: the streaming filter's bitwise check takes one configuration a shape (row starts, one CTA
// per row, the standard digits) and leaves out its 128-row shape, so that racecheck (~100x slower) finishes it; the
// bin-list check leaves out its 64-row shape and takes one CTA per row, the sampled and the stream + fused filters.
bool few_configurations() {
  const char* e = std::getenv("ATTNSERVE_TOPK_FEW");
  return e != nullptr && std::string(e) == "1";
}
// The adversarial row patterns of the bitwise kernel checks, written over a row x of `width` N(0, 1) values.
enum class HardRow { all_equal, tied_maxima, nan_inf, far_above_sample, levels_256, mostly_neg_inf };
void fill_hard_row(float* x, int64_t width, HardRow kind, std::mt19937_64& g) {
  std::uniform_int_distribution<int64_t> pos(0, width - 1);
  std::uniform_int_distribution<int> level(0, 255);
  switch (kind) {
    case HardRow::all_equal: std::fill(x, x + width, 1.f); break;
    case HardRow::tied_maxima:  // > 16K tied maxima
      for (int64_t j = 0; j < width; j += 3) x[j] = 3.f;
      break;
    case HardRow::nan_inf:
      for (int64_t j = 0; j < width; ++j) x[j] = j % 4 == 0 ? x[j] : (j % 3 ? -kInf : std::nanf(""));
      break;
    case HardRow::far_above_sample:  // tiny values and 2500 huge ones: the k-th far above the sample's threshold
      for (int64_t j = 0; j < width; ++j) x[j] *= 1e-20f;
      for (int i = 0; i < 2500; ++i) x[pos(g)] = 1e20f * (1.f + float(i) / 2500.f);
      break;
    case HardRow::levels_256:
      for (int64_t j = 0; j < width; ++j) x[j] = float(level(g));
      break;
    case HardRow::mostly_neg_inf:  // 300 finite values, the k-th is -inf
      std::fill(x, x + width, -kInf);
      for (int i = 0; i < 300; ++i) x[pos(g)] = float(i % 7);
      break;
  }
}
// Runs fn once per kernel under test, with that kernel forced and named in failures.
void for_each_path(const std::function<void()>& fn) {
  static const bool skip_s7 = env_is_zero("ATTNSERVE_TOPK_S7"), skip_s8 = env_is_zero("ATTNSERVE_TOPK_S8");
  for (const KernelChoice& c : g_paths) {
    if ((skip_s7 && is_s7_variant(c)) || (skip_s8 && is_s8_variant(c))) continue;
    SCOPED_TRACE(std::string("kernel ") + c.name);
    cuda::set_topk_path(c.path);
    cuda::set_topk_cluster(c.cluster);
    cuda::set_topk_emit(c.lean_emit ? cuda::TopkEmit::kept_masks_lean
                        : c.masks   ? cuda::TopkEmit::kept_masks
                                    : cuda::TopkEmit::recount);
    cuda::set_topk_l2_prefetch(c.l2_prefetch);
    cuda::set_topk_lean_select(c.lean_select);
    cuda::set_topk_offset_digit(c.offset_digit);
    cuda::set_topk_stream(c.stream);
    cuda::set_topk_fused_count(c.fused_count);
    cuda::set_topk_bin_list(c.bin_list);
    fn();
    cuda::set_topk_path(cuda::TopkPath::automatic);
    cuda::set_topk_cluster(0);
    cuda::set_topk_emit(cuda::TopkEmit::automatic);
    cuda::set_topk_l2_prefetch(-1);
    cuda::set_topk_lean_select(-1);
    cuda::set_topk_offset_digit(-1);
    cuda::set_topk_stream(-1);
    cuda::set_topk_fused_count(-1);
    cuda::set_topk_bin_list(-1);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// Runs `host_args` on the GPU (every tensor mirrored), twice with a poisoned output; requires identical
// bits and copies the output into host_args.out.
void run_gpu_twice(const TopkArgs& host_args) {
  DeviceMirror scores(host_args.scores), lengths(host_args.lengths), out(host_args.out), starts(host_args.row_starts),
      table(host_args.page_table_1), cu(host_args.cu_seqlens_q), offsets(host_args.offsets);
  TopkArgs d = host_args;
  d.scores = scores.view, d.lengths = lengths.view, d.out = out.view, d.row_starts = starts.view;
  d.page_table_1 = table.view, d.cu_seqlens_q = cu.view, d.offsets = offsets.view;
  const std::size_t ws_bytes = topk_workspace_size(d, query_device_caps(Device::cuda()));
  Buffer ws(std::max<std::size_t>(ws_bytes, 16), Device::cuda());
  std::vector<uint8_t> first;
  for (int run = 0; run < 2; ++run) {
    out.poison();
    topk(d, Workspace{ws.data(), ws.bytes()}, {});
    stream_synchronize({});
    if (run == 0) first = out.bytes();
    else ASSERT_TRUE(first == out.bytes()) << "two GPU runs differ";
  }
  out.download(host_args.out);
}

// The CPU oracle's output and the GPU's, row by row: exact lists for len <= topk, else equal sets.
void expect_same_rows(const HostTensor& cpu_out, const HostTensor& gpu_out, const HostTensor& lengths, int64_t k) {
  const int64_t rows = cpu_out.view.size(0);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* cr = reinterpret_cast<const int32_t*>(cpu_out.bytes.data()) + r * k;
    const int32_t* gr = reinterpret_cast<const int32_t*>(gpu_out.bytes.data()) + r * k;
    std::vector<int32_t> c(cr, cr + k), gv(gr, gr + k);
    const int64_t len = reinterpret_cast<const int32_t*>(lengths.bytes.data())[r];
    if (len > k) {
      std::sort(c.begin(), c.end());
      std::sort(gv.begin(), gv.end());
    }
    ASSERT_EQ(gv, c) << "row " << r << " (len " << len << ", topk " << k << ")";
  }
}

// CPU oracle, then the GPU (twice), then: GPU == brute force (p.check), GPU == CPU oracle.
// Once per kernel under test (for_each_path).
void check_gpu(TopkProblem& p, const TopkArgs& a, const std::function<int32_t(int64_t, int64_t)>& value_of = {}) {
  p.run(a);
  const HostTensor cpu_out = p.out;
  for_each_path([&] {
    run_gpu_twice(a);
    if (::testing::Test::HasFatalFailure()) return;
    p.check(value_of);
    if (::testing::Test::HasFatalFailure()) return;
    expect_same_rows(cpu_out, p.out, p.lengths, p.k);
  });
}
void check_gpu(TopkProblem& p) { check_gpu(p, p.args()); }

HostTensor random_slot_table(int64_t n, int64_t width, std::mt19937_64& g) {
  HostTensor t(DType::i32, {n, width});
  std::vector<int32_t> slots(static_cast<size_t>(n * width) * 2);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), g);
  std::copy(slots.begin(), slots.begin() + n * width, t.ptr<int32_t>());
  return t;
}

}  // namespace

TEST(TopkGpu, RandomScoresAnyTopk) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t width : {6000, 20000})  // the 256-thread and the 1024-thread kernels
    for (int64_t k : {1, 7, 100, 2048, 3000}) {
      SCOPED_TRACE("width " + std::to_string(width) + " topk " + std::to_string(k));
      TopkProblem p(16, width, k);
      fill_normal(p.row(0), p.rows * p.width, g);
      std::uniform_int_distribution<int32_t> len(0, int32_t(width));
      for (int64_t r = 0; r < p.rows; ++r) p.lengths.ptr<int32_t>()[r] = len(g);
      p.lengths.ptr<int32_t>()[0] = int32_t(width);
      p.lengths.ptr<int32_t>()[1] = int32_t(std::min<int64_t>(k + 1, width));
      check_gpu(p);
      if (HasFatalFailure()) return;
    }
}

TEST(TopkGpu, HeavyTiesLowerPositionWins) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t width : {5000, 20000}) {
    TopkProblem p(6, width, 2048);
    std::uniform_int_distribution<int> level(0, 4);
    for (int64_t i = 0; i < p.rows * p.width; ++i) p.row(0)[i] = float(level(g)) - 2.f;
    for (int64_t i = 0; i < p.width; ++i) p.row(1)[i] = (i % 3) ? -1.f : ((i % 2) ? 0.f : -0.f);  // -0 == +0
    for (int64_t i = 0; i < p.width; ++i) p.row(2)[i] = (i % 2) ? 0.f : -0.f;                     // all "equal"
    check_gpu(p);
    if (HasFatalFailure()) return;
  }
}

TEST(TopkGpu, AllEqualRowsGiveTheFirstPositions) {
  DSA_REQUIRE_GPU();
  TopkProblem p(5, 30000, 2048);
  const float values[5] = {0.25f, -kInf, std::nanf(""), 1e30f, kInf};
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t j = 0; j < p.width; ++j) p.row(r)[j] = values[r];
  check_gpu(p);
}

TEST(TopkGpu, NegInfAndNaNAreStillCandidates) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  TopkProblem p(5, 9000, 2048);
  for (int64_t i = 0; i < p.rows * p.width; ++i) p.row(0)[i] = -kInf;
  std::uniform_int_distribution<int64_t> pos(0, p.width - 1);
  for (int i = 0; i < 100; ++i) p.row(0)[pos(g)] = float(i);  // 100 finite, the rest -inf
  fill_normal(p.row(1), 3000, g);                             // causal-style: -inf tail
  for (int i = 0; i < 40; ++i) p.row(2)[pos(g)] = kInf;       // +inf ranks first
  fill_normal(p.row(2) + 2000, 1000, g);
  fill_normal(p.row(3), 2 * p.width, g);
  for (int r = 3; r < 5; ++r)
    for (int i = 0; i < 8000; ++i) p.row(r)[pos(g)] = (i % 3) ? std::nanf("") : -kInf;  // NaN below -inf
  check_gpu(p);
}

TEST(TopkGpu, LenAtMostTopkIsTheIdentityThenPadding) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  TopkProblem p(6, 300, 100);
  fill_normal(p.row(0), p.rows * p.width, g);
  const int32_t lens[6] = {0, 1, 99, 100, 101, 300};  // topk_len_zero, ..., len == topk, len == topk + 1
  for (int r = 0; r < 6; ++r) p.lengths.ptr<int32_t>()[r] = lens[r];
  check_gpu(p);
}

TEST(TopkGpu, RowStarts) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t width : {3000, 40000}) {
    TopkProblem p(12, width, 256);
    fill_normal(p.row(0), p.rows * p.width, g);
    p.use_starts = true;
    std::uniform_int_distribution<int32_t> pos(0, int32_t(width));
    for (int64_t r = 0; r < p.rows; ++r) {
      const int32_t a = pos(g), b = pos(g);
      p.starts.ptr<int32_t>()[r] = std::min(a, b);
      p.lengths.ptr<int32_t>()[r] = std::max(a, b) - std::min(a, b);
    }
    check_gpu(p);
    if (HasFatalFailure()) return;
  }
}

// Nothing is dropped however many candidates share the threshold's bin, at 64K, 128K and 256K.
TEST(TopkGpu, LongRows64KTo256K) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t width : {int64_t(64) << 10, int64_t(128) << 10, int64_t(256) << 10}) {
    SCOPED_TRACE("width " + std::to_string(width));
    TopkProblem p(6, width, 2048);
    fill_normal(p.row(0), width, g);  // random
    std::uniform_int_distribution<int> level(0, 255);
    for (int64_t j = 0; j < width; ++j) p.row(1)[j] = float(level(g));                     // ~1000 equals per value
    for (int64_t j = 0; j < width; ++j) p.row(2)[j] = (j % 5 == 2) ? 3.f : -float(j % 7);  // >16K equal maxima
    std::uniform_int_distribution<uint32_t> ulps(0, 65535);  // one top-12-bit bin, all levels used
    for (int64_t j = 0; j < width; ++j) p.row(3)[j] = bits_f32(0x3f800000u + ulps(g));
    p.lengths.ptr<int32_t>()[3] = int32_t(width - 12345);
    for (int64_t j = 0; j < width; ++j) p.row(4)[j] = 1.f;  // all equal: the first 2048
    fill_normal(p.row(5), width, g);
    for (int64_t j = 0; j < width; j += 3) p.row(5)[j] = 0.5f;  // a third of the row tied mid-range
    check_gpu(p);
    if (HasFatalFailure()) return;
  }
}

// The benchmark's shape (128 rows x 64K, topk 2048), checked.
TEST(TopkGpu, DecodeShape128x64K) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  TopkProblem p(128, int64_t(64) << 10, 2048);
  fill_normal(p.row(0), p.rows * p.width, g);
  std::uniform_int_distribution<int32_t> len(1, int32_t(p.width));
  for (int64_t r = 0; r < p.rows; ++r) p.lengths.ptr<int32_t>()[r] = r % 4 ? len(g) : int32_t(p.width);
  check_gpu(p);
}

TEST(TopkGpu, TransformDecode) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  TopkProblem p(9, 3000, 256);
  fill_normal(p.row(0), p.rows * p.width, g);
  std::uniform_int_distribution<int32_t> len(0, 3000);
  for (int64_t r = 0; r < p.rows; ++r) p.lengths.ptr<int32_t>()[r] = len(g);
  p.lengths.ptr<int32_t>()[1] = 100;  // short row: slots then -1 padding
  HostTensor table = random_slot_table(p.rows, 3100, g);
  auto a = p.args();
  a.transform = TopkTransform::decode, a.page_table_1 = table.view;
  check_gpu(p, a, [&](int64_t row, int64_t j) { return table.ptr<int32_t>()[row * 3100 + j]; });
}

TEST(TopkGpu, TransformPrefillFindsTheRequest) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  const std::vector<int> q_lens = {3, 0, 5, 2, 0};  // empty requests included
  const std::vector<int> request_of_row = {0, 0, 0, 2, 2, 2, 2, 2, 3, 3};
  TopkProblem p(10, 12000, 300);
  fill_normal(p.row(0), p.rows * p.width, g);
  std::uniform_int_distribution<int32_t> len(0, 12000);
  for (int64_t r = 0; r < p.rows; ++r) p.lengths.ptr<int32_t>()[r] = len(g);
  p.lengths.ptr<int32_t>()[2] = 150;
  HostTensor table = random_slot_table(5, 12000, g);
  HostTensor cu(DType::i32, {6});
  cu.ptr<int32_t>()[0] = 0;
  for (int r = 0; r < 5; ++r) cu.ptr<int32_t>()[r + 1] = cu.ptr<int32_t>()[r] + q_lens[size_t(r)];
  auto a = p.args();
  a.transform = TopkTransform::prefill, a.page_table_1 = table.view, a.cu_seqlens_q = cu.view;
  check_gpu(p, a,
            [&](int64_t row, int64_t j) { return table.ptr<int32_t>()[request_of_row[size_t(row)] * 12000 + j]; });
}

TEST(TopkGpu, TransformRaggedAddsTheOffset) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  TopkProblem p(7, 5000, 512);
  fill_normal(p.row(0), p.rows * p.width, g);
  p.use_starts = true;
  HostTensor offsets(DType::i32, {p.rows});
  std::uniform_int_distribution<int32_t> pos(0, 5000), off(-1000, 100000);
  for (int64_t r = 0; r < p.rows; ++r) {
    const int32_t a0 = pos(g), b0 = pos(g);
    p.starts.ptr<int32_t>()[r] = std::min(a0, b0);
    p.lengths.ptr<int32_t>()[r] = std::max(a0, b0) - std::min(a0, b0);
    offsets.ptr<int32_t>()[r] = off(g);
  }
  auto a = p.args();
  a.transform = TopkTransform::ragged, a.offsets = offsets.view;
  check_gpu(p, a, [&](int64_t row, int64_t j) { return int32_t(j + offsets.ptr<int32_t>()[row]); });
}

// Lengths and starts live in device memory, where the dispatcher cannot check them: the kernel clamps
// start to [0, width] and len to [0, width - start]. Same answers as the CPU oracle on clamped values.
TEST(TopkGpu, DeviceLengthsAreClampedToTheRow) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  TopkProblem p(6, 4000, 300);
  fill_normal(p.row(0), p.rows * p.width, g);
  p.use_starts = true;
  const int32_t starts[6] = {0, 0, 3900, -50, 100, 5000};
  const int32_t lens[6] = {4001, -3, 500, 1000, 1 << 30, 10};
  TopkProblem clamped = p;
  for (int r = 0; r < 6; ++r) {
    p.starts.ptr<int32_t>()[r] = starts[r], p.lengths.ptr<int32_t>()[r] = lens[r];
    const int32_t s = std::clamp(starts[r], 0, 4000);
    clamped.starts.ptr<int32_t>()[r] = s;
    clamped.lengths.ptr<int32_t>()[r] = std::clamp(lens[r], 0, 4000 - s);
  }
  clamped.run();
  for_each_path([&] {
    run_gpu_twice(p.args());
    if (HasFatalFailure()) return;
    expect_same_rows(clamped.out, p.out, clamped.lengths, p.k);
  });
}

TEST(TopkGpu, ZeroRows) {
  DSA_REQUIRE_GPU();
  TopkProblem p(0, 100, 16);
  for_each_path([&] { EXPECT_NO_THROW(run_gpu_twice(p.args())); });
}

namespace {

// Checks one top-k kernel only, for one scope.
struct ForcePath {
  explicit ForcePath(KernelChoice c) : saved(g_paths) { g_paths = {c}; }
  ~ForcePath() { g_paths = saved; }
  std::vector<KernelChoice> saved;
};

// The sampled kernel's emit for one scope (the plan's after it, also when an ASSERT leaves the test).
struct ForceEmit {
  explicit ForceEmit(cuda::TopkEmit emit) { cuda::set_topk_emit(emit); }
  ~ForceEmit() { cuda::set_topk_emit(cuda::TopkEmit::automatic); }
};
// Session 8's streaming filter and its fused count on (or the plan's) for one scope.
struct ForceStream {
  explicit ForceStream(bool on) {
    cuda::set_topk_stream(on ? 1 : -1);
    cuda::set_topk_fused_count(on ? 1 : -1);
  }
  ~ForceStream() {
    cuda::set_topk_stream(-1);
    cuda::set_topk_fused_count(-1);
  }
};

}  // namespace

// The multi-pass kernel alone (the sampled kernel's fallback, also a path of its own).
TEST(TopkGpu, GlobalPathAlone) {
  DSA_REQUIRE_GPU();
  ForcePath force({cuda::TopkPath::global, 0, false, "global"});
  auto g = rng_for_test();
  for (int64_t width : {6000, 70000}) {
    SCOPED_TRACE("width " + std::to_string(width));
    TopkProblem p(8, width, 2048);
    fill_normal(p.row(0), p.rows * p.width, g);
    std::uniform_int_distribution<int> level(0, 4);
    for (int64_t j = 0; j < width; ++j) p.row(1)[j] = float(level(g));
    for (int64_t j = 0; j < width; ++j) p.row(2)[j] = 1.f;
    p.lengths.ptr<int32_t>()[3] = int32_t(width / 3);
    check_gpu(p);
    if (HasFatalFailure()) return;
  }
}

// Lengths around the sampled kernel's regimes (whole row <= 4096 < sampled), with row starts 0..3 so the
// scalar head / tail around the 16-byte quads take every size, for both block sizes.
TEST(TopkGpu, SampledRegimeBoundariesAndAlignment) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t width : {8192, 20000})  // the 256-thread and the 1024-thread kernels
    for (int64_t k : {1, 2048}) {
      SCOPED_TRACE("width " + std::to_string(width) + " topk " + std::to_string(k));
      const int32_t lens[] = {4093, 4094, 4095, 4096, 4097, 4098, 4099, 4100, 4101, 4103, 5000, 8188};
      const int64_t n = int64_t(sizeof(lens) / sizeof(lens[0]));
      TopkProblem p(4 * n, width, k);
      fill_normal(p.row(0), p.rows * p.width, g);
      p.use_starts = true;
      for (int64_t r = 0; r < p.rows; ++r) {
        p.starts.ptr<int32_t>()[r] = int32_t(r % 4);
        p.lengths.ptr<int32_t>()[r] = lens[r / 4];
      }
      check_gpu(p);
      if (HasFatalFailure()) return;
    }
}

// Rows built against the sample (32 chunks of 128 values at quads c * (nq - 32) / 31, rows 16-byte
// aligned here): (0) the sample is all high, so its threshold leaves fewer than k candidates; (1) the
// top values sit in one warp's 128-value steps (every 32nd step), more than a warp's segment holds;
// (2) ~1000 values exactly equal near the k-th, broken by position in shared memory; (3) two levels,
// the lower one tied across the threshold; (4) -inf everywhere but a few; (5) random. All exact.
TEST(TopkGpu, SampledPathAdversarialRows) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t width : {int64_t(64) << 10, int64_t(160) << 10}) {
    SCOPED_TRACE("width " + std::to_string(width));
    TopkProblem p(6, width, 2048);
    fill_normal(p.row(0), p.rows * p.width, g);
    const int64_t nq = width / 4;
    for (int c = 0; c < 32; ++c) {
      const int64_t q0 = int64_t(c) * (nq - 32) / 31;
      for (int64_t j = 4 * q0; j < 4 * q0 + 128; ++j) p.row(0)[j] += 10.f;
    }
    for (int64_t j = 0; j < width; ++j)
      if ((j / 128) % 32 == 5) p.row(1)[j] += 10.f;
    std::uniform_int_distribution<int64_t> pos(0, width - 1);
    for (int i = 0; i < 1000; ++i) p.row(2)[pos(g)] = width > 100000 ? 2.3f : 1.9f;
    for (int64_t j = 0; j < width; ++j) p.row(3)[j] = (j % 11 == 0) ? 1.f : (j % 17 == 0 ? 2.f : -1.f);
    for (int64_t j = 0; j < width; ++j) p.row(4)[j] = -kInf;
    for (int i = 0; i < 300; ++i) p.row(4)[pos(g)] = float(i % 7);
    check_gpu(p);
    if (HasFatalFailure()) return;
  }
}

// Rows whose top values all lie outside the sample's chunks, ~2^30 keys above the small rest (N(0, 1) x
// 1e-20): the threshold from the sample keeps the huge values and ~r / 4096 of the small ones, and the k-th
// lies far above it, in the offset digit's top bin (TopkParams::offset_digit: its restart from the standard
// digits). Row 0: distinct huge values; row 1: all huge values tied (the positions decide). Exact on every path.
TEST(TopkGpu, TopValuesOutsideTheSample) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  struct Case {
    int64_t width, k, huge;
  };
  for (const Case c : {Case{65536, 2048, 3000}, Case{65536, 2048, 2048}, Case{8000, 1000, 1100}}) {
    SCOPED_TRACE("width " + std::to_string(c.width) + " topk " + std::to_string(c.k) + " huge " +
                 std::to_string(c.huge));
    TopkProblem p(2, c.width, c.k);
    fill_normal(p.row(0), p.rows * p.width, g);
    for (int64_t i = 0; i < p.rows * p.width; ++i) p.row(0)[i] *= 1e-20f;
    // The sample (topk_sampled.cuh): 32 chunks of 128 values at quads c * (nq - 32) / 31 (rows 16-byte aligned).
    const int64_t nq = c.width / 4;
    std::vector<char> sampled(std::size_t(c.width), 0);
    for (int64_t ch = 0; ch < 32; ++ch)
      for (int64_t j = 4 * (ch * (nq - 32) / 31), e = j + 128; j < e; ++j) sampled[std::size_t(j)] = 1;
    std::vector<int64_t> free_pos;
    for (int64_t j = 0; j < c.width; ++j)
      if (!sampled[std::size_t(j)]) free_pos.push_back(j);
    ASSERT_GE(int64_t(free_pos.size()), c.huge);
    for (int64_t r = 0; r < p.rows; ++r) {
      std::shuffle(free_pos.begin(), free_pos.end(), g);
      for (int64_t i = 0; i < c.huge; ++i)
        p.row(r)[free_pos[std::size_t(i)]] = r == 0 ? 1e20f * (1.f + float(i) / float(c.huge)) : 1e20f;
    }
    check_gpu(p);
    if (HasFatalFailure()) return;
  }
}

// The fused transforms on long rows (the 1024-thread sampled kernel).
TEST(TopkGpu, TransformsOnLongRows) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  const int64_t width = int64_t(64) << 10;
  TopkProblem p(5, width, 2048);
  fill_normal(p.row(0), p.rows * p.width, g);
  std::uniform_int_distribution<int32_t> len(3000, int32_t(width));
  for (int64_t r = 1; r < p.rows; ++r) p.lengths.ptr<int32_t>()[r] = len(g);
  HostTensor table = random_slot_table(p.rows, width, g);
  {
    auto a = p.args();
    a.transform = TopkTransform::decode, a.page_table_1 = table.view;
    check_gpu(p, a, [&](int64_t row, int64_t j) { return table.ptr<int32_t>()[row * width + j]; });
    if (HasFatalFailure()) return;
  }
  HostTensor offsets(DType::i32, {p.rows});
  for (int64_t r = 0; r < p.rows; ++r) offsets.ptr<int32_t>()[r] = int32_t(r * 100000 - 7);
  auto a = p.args();
  a.transform = TopkTransform::ragged, a.offsets = offsets.view;
  check_gpu(p, a, [&](int64_t row, int64_t j) { return int32_t(j + offsets.ptr<int32_t>()[row]); });
}

// The prefill shape of issue 16 (4096-value rows, k 2048: half of each row selected), checked.
TEST(TopkGpu, PrefillShape2048Of4096) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  TopkProblem p(512, 4096, 2048);
  fill_normal(p.row(0), p.rows * p.width, g);
  std::uniform_int_distribution<int32_t> len(1, 4096);
  for (int64_t r = 0; r < p.rows; ++r) p.lengths.ptr<int32_t>()[r] = r % 2 ? len(g) : 4096;
  check_gpu(p);
}

// Rows of at most 4096 values (loaded whole, the holes of a partial last step padded with sentinels that
// must never be selected) whose k-th value is NaN, -inf or a tie, at every alignment.
TEST(TopkGpu, WholeRowRegimeNaNAndTiesAtTheThreshold) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t width : {4099, 20000})  // the 256-thread and the 1024-thread kernels
    for (int64_t k : {1000, 2048}) {
      SCOPED_TRACE("width " + std::to_string(width) + " topk " + std::to_string(k));
      TopkProblem p(16, width, k);
      fill_normal(p.row(0), p.rows * p.width, g);
      p.use_starts = true;
      std::uniform_int_distribution<int> pick(0, 9);
      for (int64_t r = 0; r < p.rows; ++r) {
        p.starts.ptr<int32_t>()[r] = int32_t(r % 4);
        p.lengths.ptr<int32_t>()[r] = int32_t(std::min<int64_t>(r < 8 ? 4095 - 97 * r : 2049 + 211 * r, width - r % 4));
        float* x = p.row(r);
        for (int64_t j = 0; j < width; ++j) {
          const int c = pick(g);
          if (r % 3 == 0 && c < 7) x[j] = std::nanf("");  // k-th is NaN: ties by position among NaNs
          else if (r % 3 == 1 && c < 6) x[j] = -kInf;     // k-th is -inf
          else if (r % 3 == 2 && c < 8) x[j] = 0.5f;      // k-th is a tie at 0.5
        }
      }
      check_gpu(p);
      if (HasFatalFailure()) return;
    }
}

// The emit: outputs staged in shared memory and written by 16-byte stores (k <= 4093, every 16-byte
// misalignment of the output rows: row r starts at r * k * 4 bytes) and the direct 4-byte stores (forced,
// and k > 4093), in the whole-row, sampled and cluster regimes.
TEST(TopkGpu, EmitStagedAndDirectAtEveryOutputAlignment) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (const bool direct : {false, true})
    for (int64_t width : {6000, 70000})
      for (int64_t k : {5, 1001, 4093, 4094}) {
        SCOPED_TRACE(std::string(direct ? "direct" : "staged") + " width " + std::to_string(width) + " topk " +
                     std::to_string(k));
        TopkProblem p(5, width, k);
        fill_normal(p.row(0), p.rows * p.width, g);
        p.lengths.ptr<int32_t>()[4] = 4000;  // loaded whole
        cuda::set_topk_direct_emit(direct);
        check_gpu(p);
        cuda::set_topk_direct_emit(false);
        if (HasFatalFailure()) return;
      }
}

// Cluster rows whose candidates overflow CTA 0's segments only once gathered (each CTA's share fits its
// own segments): the top values in every 32nd step, i.e. in one warp of every CTA, and all-equal rows.
TEST(TopkGpu, ClusterGatherOverflowGoesToTheFallback) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  for (int64_t width : {int64_t(40) << 10, int64_t(300) << 10}) {  // 300K: rows longer than 128K
    SCOPED_TRACE("width " + std::to_string(width));
    TopkProblem p(3, width, 2048);
    fill_normal(p.row(0), p.rows * p.width, g);
    for (int64_t j = 0; j < width; ++j)
      if ((j / 128) % 32 == 7) p.row(0)[j] += 10.f;
    for (int64_t j = 0; j < width; ++j) p.row(1)[j] = -kInf;  // all equal, -inf
    check_gpu(p);
    if (HasFatalFailure()) return;
  }
}

// CUDA-graph replays of top-k (the plan's choice: clusters of 8, 4 and 2 CTAs for lone long rows on sm_90,
// whole rows, the sampled regime; the three emits, and session 8's streaming filter with its fused count) equal
// eager runs bit for bit, and the oracle.
TEST(TopkGpu, GraphReplayEqualsEager) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  struct Shape {
    int64_t rows, width, k;
  };
  struct Variant {
    cuda::TopkEmit emit;
    bool stream;  // session 8's streaming filter with its fused count (1024-thread rows)
  };
  for (const Variant var :
       {Variant{cuda::TopkEmit::recount, false}, Variant{cuda::TopkEmit::kept_masks, false},
        Variant{cuda::TopkEmit::kept_masks_lean, false}, Variant{cuda::TopkEmit::kept_masks_lean, true}})
    for (const Shape sh :
         {Shape{4, int64_t(128) << 10, 2048}, Shape{2, int64_t(300) << 10, 2048}, Shape{12, int64_t(40) << 10, 2048},
          Shape{24, int64_t(36) << 10, 1000}, Shape{64, 4096, 2048}, Shape{24, int64_t(20) << 10, 1000}}) {
      const cuda::TopkEmit emit_kind = var.emit;
      SCOPED_TRACE(std::string(emit_kind == cuda::TopkEmit::recount      ? "recount emit"
                               : emit_kind == cuda::TopkEmit::kept_masks ? "kept-masks emit"
                                                                         : "lean kept-masks emit") +
                   (var.stream ? ", streaming filter + fused count" : "") + " rows " + std::to_string(sh.rows) +
                   " width " + std::to_string(sh.width));
      const ForceEmit emit(emit_kind);
      const ForceStream stream(var.stream);
      TopkProblem p(sh.rows, sh.width, sh.k);
      fill_normal(p.row(0), p.rows * p.width, g);
      p.lengths.ptr<int32_t>()[0] = int32_t(sh.width - 3);
      p.run();
      const HostTensor cpu_out = p.out;
      cudaStream_t cs;
      ASSERT_EQ(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), cudaSuccess);
      const Stream s{cs};
      DeviceMirror scores(p.scores.view, s), lengths(p.lengths.view, s), out(p.out.view, s);
      TopkArgs d = p.args();
      d.scores = scores.view, d.lengths = lengths.view, d.out = out.view;
      topk(d, {}, s);  // eager (also the warm-up: kernel attributes outside the capture)
      stream_synchronize(s);
      const std::vector<uint8_t> eager = out.bytes(s);
      cudaGraph_t graph;
      cudaGraphExec_t exec;
      ASSERT_EQ(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      topk(d, {}, s);
      ASSERT_EQ(cudaStreamEndCapture(cs, &graph), cudaSuccess);
      ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      for (int replay = 0; replay < 3; ++replay) {
        out.poison(s);
        ASSERT_EQ(cudaGraphLaunch(exec, cs), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(cs), cudaSuccess);
        EXPECT_TRUE(out.bytes(s) == eager) << "graph replay " << replay << " != eager";
      }
      out.download(p.out.view, s);
      expect_same_rows(cpu_out, p.out, p.lengths, p.k);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(cs);
      if (HasFatalFailure()) return;
    }
}

// Session 8's streaming filter pushes the same candidates in the same order as the default filter (as keys, the
// fused count beside): its output bits equal those of the kernel without it (the same other flags), with and
// without the fused count, with one CTA per row and the plan's clusters, and the oracle's sets. Rows: N(0, 1),
// all equal, > 16K tied maxima, NaN / -inf mixes, huge values the sample mostly misses (the offset digit's
// restart), 256 levels, fewer finite values than k; random lengths, device lengths and starts out of range
// (clamped), starts 0..3 (every alignment); 128 x 64K (the target shape), rows longer than 128K, k not 2048, and
// rows loaded whole (where the streaming kernel differs by its selects' cleared histogram only).
TEST(TopkGpu, StreamingFilterGivesTheSameBits) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  struct Shape {
    int64_t rows, width, k;
  };
  const bool few = few_configurations();
  for (const Shape sh : {Shape{128, int64_t(64) << 10, 2048}, Shape{3, int64_t(300) << 10, 2048},
                         Shape{12, 20000, 1000}, Shape{12, 4000, 1000}}) {  // 4000: loaded whole (1024 threads)
    if (few && sh.rows == 128) continue;
    SCOPED_TRACE("rows " + std::to_string(sh.rows) + " width " + std::to_string(sh.width));
    TopkProblem p(sh.rows, sh.width, sh.k);
    fill_normal(p.row(0), p.rows * p.width, g);
    for (int64_t r = 0; r < p.rows; ++r)  // rows 1..6 of every 8 adversarial, the others N(0, 1)
      if (r % 8 >= 1 && r % 8 <= 6) fill_hard_row(p.row(r), p.width, HardRow(r % 8 - 1), g);
    // With row starts, and without (where the streaming kernel issues a whole row's sample and first turns before
    // the row's length is known: the shorter rows reload the sample).
    for (const bool with_starts : {true, false}) {
      if (few && !with_starts) continue;
      p.use_starts = with_starts;
      std::uniform_int_distribution<int32_t> len(1, int32_t(p.width));
      TopkProblem clamped = p;
      for (int64_t r = 0; r < p.rows; ++r) {
        int32_t st = with_starts ? int32_t(r % 4) : 0, ln = r % 4 == 3 ? len(g) : int32_t(p.width);
        if (r == 9) ln = 1 << 30;                                           // clamped to width - start
        if (r == 10 && with_starts) st = -50;                               // clamped to 0
        if (r == 11) st = with_starts ? int32_t(p.width) + 5 : 0, ln = 10;  // clamped to an empty row; 10 <= k
        p.starts.ptr<int32_t>()[r] = st, p.lengths.ptr<int32_t>()[r] = ln;
        const int32_t cs = std::clamp(st, 0, int32_t(p.width));
        clamped.starts.ptr<int32_t>()[r] = cs;
        clamped.lengths.ptr<int32_t>()[r] = std::clamp(ln, 0, int32_t(p.width) - cs);
      }
      clamped.run();
      for (const int cluster : {1, 0})  // 0: the plan's (clusters of 8 for the 3 rows of 300K on sm_90)
        for (const bool s7 : {false, true}) {
          if (few && (cluster != 1 || s7)) continue;
          SCOPED_TRACE(std::string(with_starts ? "row starts" : "no row starts") + ", cluster " +
                       std::to_string(cluster) +
                       (s7 ? ", lean emit + lean select + offset digit" : ", kept-masks emit, standard digits"));
          cuda::set_topk_path(cuda::TopkPath::sampled);
          cuda::set_topk_cluster(cluster);
          cuda::set_topk_emit(s7 ? cuda::TopkEmit::kept_masks_lean : cuda::TopkEmit::kept_masks);
          cuda::set_topk_l2_prefetch(0);
          cuda::set_topk_lean_select(s7);
          cuda::set_topk_offset_digit(s7);
          std::vector<uint8_t> reference;
          for (const int mode : {0, 1, 2}) {  // without the stream, with it, with it and the fused count
            SCOPED_TRACE(mode == 0   ? "default filter"
                         : mode == 1 ? "streaming filter"
                                     : "streaming filter + fused count");
            cuda::set_topk_stream(mode >= 1);
            cuda::set_topk_fused_count(mode == 2);
            run_gpu_twice(p.args());
            if (HasFatalFailure()) break;
            expect_same_rows(clamped.out, p.out, clamped.lengths, p.k);
            if (HasFatalFailure()) break;
            if (mode == 0) reference = p.out.bytes;
            else
              EXPECT_TRUE(p.out.bytes == reference) << "the streaming filter's bits differ from the default filter's";
          }
          cuda::set_topk_path(cuda::TopkPath::automatic);
          cuda::set_topk_cluster(0);
          cuda::set_topk_emit(cuda::TopkEmit::automatic);
          cuda::set_topk_l2_prefetch(-1);
          cuda::set_topk_lean_select(-1);
          cuda::set_topk_offset_digit(-1);
          cuda::set_topk_stream(-1);
          cuda::set_topk_fused_count(-1);
          if (HasFatalFailure()) return;
        }
    }
  }
}

// s8-topk2: the bin-list select (Tuning::bin_list) must give the default kernel's bits (the same selection, so the same
// emit). Rows: N(0, 1) (the k-th offset bin holds ~34 entries: the list path), N(0, 1) rounded to 1/64 and 1/32 (~70 /
// ~130 entries of one key in the k-th bin: ties ranked by position in the list), rounded to 1/8 (~500: above the
// list's cap, the key passes), and the adversarial rows (all equal, > 16K tied maxima, NaN / -inf, the k-th far above
// the threshold, 256 levels, mostly -inf); one CTA per row and the plan's clusters; the default sampled kernel, the
// streaming filter, and it with the fused count, each against its own run without the bin list.
TEST(TopkGpu, BinListSelectGivesTheSameBits) {
  DSA_REQUIRE_GPU();
  auto g = rng_for_test();
  struct Shape {
    int64_t rows, width, k;
  };
  const bool few = few_configurations();
  for (const Shape sh : {Shape{64, int64_t(64) << 10, 2048}, Shape{3, int64_t(300) << 10, 2048}, Shape{16, 20000, 1000},
                         Shape{8, int64_t(128) << 10, 4000}}) {
    if (few && sh.rows == 64) continue;  // ATTNSERVE_TOPK_FEW=1 (racecheck): the smaller shapes, one CTA per row
    SCOPED_TRACE("rows " + std::to_string(sh.rows) + " width " + std::to_string(sh.width));
    TopkProblem p(sh.rows, sh.width, sh.k);
    fill_normal(p.row(0), p.rows * p.width, g);
    for (int64_t r = 0; r < p.rows; ++r) {
      float* x = p.row(r);
      const auto round_to = [&](float q) {
        for (int64_t j = 0; j < p.width; ++j) x[j] = std::round(x[j] * q) / q;
      };
      switch (r % 12) {
        case 1: round_to(64.f); break;
        case 2: round_to(32.f); break;
        case 3: round_to(8.f); break;
        case 5: fill_hard_row(x, p.width, HardRow::all_equal, g); break;
        case 6: fill_hard_row(x, p.width, HardRow::tied_maxima, g); break;
        case 7: fill_hard_row(x, p.width, HardRow::nan_inf, g); break;
        case 9: fill_hard_row(x, p.width, HardRow::far_above_sample, g); break;
        case 10: fill_hard_row(x, p.width, HardRow::levels_256, g); break;
        case 11: fill_hard_row(x, p.width, HardRow::mostly_neg_inf, g); break;
        default: break;  // N(0, 1)
      }
    }
    p.use_starts = true;
    std::uniform_int_distribution<int32_t> len(1, int32_t(p.width) - 2);  // inside the row after any start
    for (int64_t r = 0; r < p.rows; ++r) {
      p.starts.ptr<int32_t>()[r] = int32_t(r % 3);
      p.lengths.ptr<int32_t>()[r] = r % 4 == 3 ? len(g) : int32_t(p.width - r % 3);
    }
    TopkProblem oracle = p;
    oracle.run();
    for (const int cluster : {1, 0})        // 0: the plan's (clusters of 8 for the 3 rows of 300K on sm_90)
      for (const int filter : {0, 1, 2}) {  // the sampled kernel's filter, the streaming one, it + the fused count
        if (few && (cluster != 1 || filter == 1)) continue;
        SCOPED_TRACE("cluster " + std::to_string(cluster) +
                     (filter == 0   ? ", default filter"
                      : filter == 1 ? ", streaming filter"
                                    : ", stream + fused count"));
        cuda::set_topk_path(cuda::TopkPath::sampled);
        cuda::set_topk_cluster(cluster);
        cuda::set_topk_emit(cuda::TopkEmit::kept_masks_lean);
        cuda::set_topk_l2_prefetch(0);
        cuda::set_topk_lean_select(1);
        cuda::set_topk_offset_digit(1);
        cuda::set_topk_stream(filter >= 1);
        cuda::set_topk_fused_count(filter == 2);
        std::vector<uint8_t> reference;
        for (const int bin_list : {0, 1}) {
          SCOPED_TRACE(bin_list ? "bin list" : "key passes");
          cuda::set_topk_bin_list(bin_list);
          run_gpu_twice(p.args());
          if (HasFatalFailure()) break;
          expect_same_rows(oracle.out, p.out, oracle.lengths, p.k);
          if (HasFatalFailure()) break;
          if (bin_list == 0) reference = p.out.bytes;
          else EXPECT_TRUE(p.out.bytes == reference) << "the bin-list select's bits differ from the key passes'";
        }
        cuda::set_topk_path(cuda::TopkPath::automatic);
        cuda::set_topk_cluster(0);
        cuda::set_topk_emit(cuda::TopkEmit::automatic);
        cuda::set_topk_l2_prefetch(-1);
        cuda::set_topk_lean_select(-1);
        cuda::set_topk_offset_digit(-1);
        cuda::set_topk_stream(-1);
        cuda::set_topk_fused_count(-1);
        cuda::set_topk_bin_list(-1);
        if (HasFatalFailure()) return;
      }
  }
}
