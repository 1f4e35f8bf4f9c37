// The plan of one top-k call: which kernel runs it (the algorithm and the threads per row) and its
// workspace, made once from the shapes. Pure host code (g++ in every build), tested on the CPU
// (tests/cpu/test_topk_plan.cpp, tests/cpu/test_op_plan_mla_sparse.cpp).
// The namespace is topk_op because cuda::topk is the entry point (cuda_ops.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include "attnserve/ops/topk.h"
#include "cuda/common/plan_util.h"

namespace attnserve::cuda::topk_op {

struct Problem {
  int64_t rows = 0;
  int64_t width = 0;  // scores.size(1)
  int k = 0;
  bool operator==(const Problem&) const = default;
};
Problem problem_of(const TopkArgs& a);

enum class Kernel : int {
  rows_256 = 0,   // one 256-thread CTA per row: short rows, several rows share an SM
  rows_1024 = 1,  // one 1024-thread CTA per row: long rows (> kLongRow positions), or whole rows (<= kWholeRow)
                  // that each get an SM of their own (rows <= SMs)
};
constexpr int64_t kLongRow = 8192;
constexpr int64_t kWholeRow = 4096;  // the sampled kernels load rows up to this length whole

// The algorithm (src/cuda/topk/sm80/). Every one is exact for any input.
enum class Select : int {
  automatic = 0,  // Tuning only: the plan's choice (sampled when its shared memory fits, else global)
  global = 1,     // topk_radix_global.cuh: radix select streaming the row, up to 5 reads of it
  sampled = 2,    // topk_sampled.cuh: one read, candidates in shared memory (session 4's v4 and its successors;
                  // session 3's v2 and v3 were removed once this one measured faster on every shape)
};
const char* select_name(Select s);

// How the sampled kernel's emit (step 4 of topk_sampled.cuh) finds each lane's selected entries. A
// compile-time variant of the one kernel (its template argument kKeepMasks).
enum class Emit : int {
  automatic = 0,        // Tuning only: the plan's choice (kept_masks_lean)
  recount = 1,          // the count pass and the store pass each test every quad (measured: 6aa3058)
  kept_masks = 2,       // the count pass's 4-bit masks stay in a register for the store pass, which reads only
                        // the positions of quads with a selected entry; a select that ended on key bits tests
                        // the key alone (measured: 610e825, bench/NOTES.md session 7)
  kept_masks_lean = 3,  // kept_masks, and where the select ended on key bits and the outputs are staged positions
                        // (transform none or ragged): one compare per key with the whole threshold key, and
                        // branch-free predicated stores at popc-derived slots (the same outputs; session 7,
                        // the default: 26d4201; a runtime flag of the kept-masks kernel)
};
const char* emit_name(Emit e);

// Rows longer than kClusterRow, few enough that C CTAs per row fill at most half the SMs, are split over a
// thread-block cluster of C = 8, 4 or 2 (sm_90): one SM streams ~39 GB/s, so a lone 64K row's filter
// alone took 6.7 us. Measured (6aa3058, forced sizes, device us): 1 x 64K 19.0 / 16.3 (C 1 / 8), 1 x 128K
// 27.0 / 19.2, 16 x 64K 22.3 / 19.6 (C 4; C 8: 25.0, 128 CTAs in clusters of 8 do not fit the GPCs at
// once), 32 x 256K 42.5 / 32.9 (C 2; C 4: 38.0); 1 x 16K 14.2 / 15.4 (C 8 slower: hence the length).
constexpr int64_t kClusterRow = 32768;
// Defaults measured on the H200 (plan.cpp): the sampled kernel's L2 prefetch up to this many bytes of scores a
// call; the streaming filter for up to kStreamMaxRows rows; the bin-list select on rows up to kBinListMaxWidth.
constexpr int64_t kPrefetchMaxBytes = int64_t(16) << 20;
constexpr int64_t kStreamMaxRows = 32;
constexpr int64_t kBinListMaxWidth = 65536;
constexpr int kClusterMax = 8;  // the portable cluster size
// CTAs per row: the largest of 8, 4, 2 with rows * ctas <= SMs / 2; 1 if none, the row is short or the
// device has no clusters.
int cluster_ctas_for(const Problem& p, const DeviceCaps& caps);

// Shared memory of the sampled kernel at `threads` per CTA (SampledSmem): per warp
// 528 candidates of 8 bytes, the 4096-bin histogram, per-warp scratch and the bin pick, 16-byte
// aligned. topk.cu static_asserts it against sizeof(SampledSmem).
constexpr std::size_t sampled_smem_bytes(int threads) {
  const std::size_t warps = std::size_t(threads / 32);
  return (warps * 528 * 8 + 4096 * 4 + warps * 3 * 4 + 12 + 15) / 16 * 16;
}
// The streaming filter (Tuning::stream, session 8): a ring of kStreamRingQuads 16-byte quads per thread after
// SampledSmem, which cp.async fills ahead of the filter (the first ones while the sample's threshold is found).
// 1024 threads only: 151952 + 65536 = 217488 bytes (the H200 gives a CTA up to 232448).
constexpr int kStreamRingQuads = 4;
constexpr std::size_t sampled_stream_smem_bytes(int threads) {
  return sampled_smem_bytes(threads) + std::size_t(threads) * kStreamRingQuads * 16;
}

struct Plan {
  Problem problem;
  Kernel kernel = Kernel::rows_256;
  int threads = 256;
  Select select = Select::global;  // never automatic in a plan
  int cluster = 1;                 // CTAs per row (a thread-block cluster; sampled kernel on sm_90 only)
  Emit emit = Emit::recount;       // the sampled kernel's emit (never automatic in a plan; the global kernel: recount)
  bool l2_prefetch = false;        // the sampled kernel prefetches its rows' next steps into L2 (the default)
  bool lean_select = false;        // the sampled kernel's lean key-digit histograms (the default)
  bool offset_digit = false;       // the candidates' first digit relative to the sample's threshold (the default)
  bool stream = false;       // the streaming filter (Tuning::stream; its own kernel, 1024 threads, no L2 prefetch)
  bool fused_count = false;  // the offset digit's histogram counted in the streaming filter (Tuning::fused_count)
  bool bin_list = false;     // the k-th offset bin resolved by ranking its entries (Tuning::bin_list; its own kernels)
  std::size_t smem = 0;      // dynamic shared memory per CTA (sampled kernel; 0 for global)
  std::size_t ws_bytes = 0;  // the radix select keeps everything in shared memory
};

// Optional override (benchmarks and tests only; the launcher maps its TopkPath onto it): a sampled
// kernel forced on a device without its shared memory still gets the global one.
struct Tuning {
  Select select = Select::automatic;
  int threads = 0;  // 256 or 1024 forces the CTA size; 0 keeps the plan's
  int cluster = 0;  // 1, 2, 4 or 8 forces the CTAs per row (sampled kernel, sm_90; else 1); 0 keeps the plan's
  Emit emit = Emit::automatic;  // recount, kept_masks or kept_masks_lean forces the sampled kernel's emit
  // The next three: -1 the plan's (measured: plan.cpp; lean_select and offset_digit on, l2_prefetch on up to
  // kPrefetchMaxBytes of scores a call), 0 off, 1 on.
  // The sampled kernel's long rows (> kWholeRow) prefetch their filter's steps into L2 (session 7): the first
  // kPrefetchSteps of every warp before the sample's threshold is known, so the row streams from HBM while the
  // threshold is found, then kUnroll steps ahead per filter iteration.
  int l2_prefetch = -1;
  // The sampled kernel's key-digit histograms (its selects: the sample's and the candidates') match the fixed
  // prefix by one subtraction and compare and count by predicated reductions, with no branch per entry
  // (session 7; the same select).
  int lean_select = -1;
  // The candidates of rows longer than kWholeRow (all >= the sample's threshold key t) are ranked first by
  // min((key >> 16) - (t >> 16), 4095), then key bits 4..15 and 0..3, instead of the key's top 12 bits
  // (session 7; the same selection).
  int offset_digit = -1;
  // The next two (session 8): -1 the plan's (stream for up to kStreamMaxRows rows, fused_count off), 0 off, 1 on.
  // The streaming filter of rows longer than kWholeRow (1024 threads, kept-masks emits; else ignored): each thread
  // keeps kStreamRingQuads 16-byte cp.async copies of its next steps in flight in a shared-memory ring, the first
  // ones issued with the sample (they land while the threshold is found; rows without row starts issue the sample
  // before their length is known), each warp turns its candidates into keys once its filter is done, and the
  // selects keep the histogram clear (no clearing passes). A kernel of its own (the default kernels' code
  // unchanged); the L2 prefetch is off with it. The same candidates in the same order: the same output bits.
  int stream = -1;
  // With the streaming filter and the offset digit, one CTA per row: each warp counts its candidates' offset digits
  // after its filter (the select starts at its find_bin: one histogram pass and its barrier fewer).
  int fused_count = -1;
  // Session 8 (s8-topk2): -1 the plan's (on for rows up to kBinListMaxWidth), 0 off, 1 on. With the offset digit at 1024 threads
  // and the kept-masks emits: a k-th offset bin of at most 256 candidates is resolved by ranking its entries in a
  // list (2 block barriers) instead of the key bits 4..15 / 0..3 / position passes (4 barriers each). Kernels of
  // their own (the default kernels' code unchanged); the same selection: the same output bits.
  int bin_list = -1;
};

Support can_implement(const Problem& p, const DeviceCaps& caps);
Plan make_plan(const Problem& p, const DeviceCaps& caps, const Tuning& tune = {});
inline std::size_t workspace_size(const Plan& plan) { return plan.ws_bytes; }

}  // namespace attnserve::cuda::topk_op
