// The plan of one paged-attention call: which kernel runs it, its tiles, pipeline depth, split-KV
// count and workspace layout, made once from the call's shapes and the device (DeviceCaps).
// Lifecycle (CUTLASS-style): can_implement -> make_plan -> workspace_size -> run(args, plan, ...)
// (launch.cu). Pure host code, built with g++ in every build and tested on the CPU
// (tests/cpu/test_op_plan_attention.cpp); the backends make one per batch and reuse it in every layer.
#pragma once
#include <cstddef>
#include <cstdint>

#include "attnserve/ops/attention.h"
#include "cuda/common/plan_util.h"

namespace attnserve::cuda::attn {

// What a plan depends on: a call's shapes, dtypes and flags (never pointers or index values, so one
// plan serves every batch of the same shapes: every layer, every CUDA-graph replay).
struct Problem {
  int64_t b = 0;        // requests (page-table rows)
  int64_t total_q = 0;  // query rows
  int h_q = 0, h_kv = 0;
  int d = 0, d_v = 0;  // q/k and v head dims
  int64_t num_pages = 0, page_size = 0;
  int64_t max_pages = 0;        // page-table width
  int64_t kv_token_stride = 0;  // max of k_cache/v_cache stride(1), elements between token slots
  int max_seqlen_q = 0;
  DType dtype = DType::bf16;  // q
  DType out_dtype = DType::bf16;
  DType kv_dtype = DType::bf16;  // k_cache and v_cache
  bool descale = false;          // q_descale, k_descale or v_descale given
  bool deterministic = false;
  bool operator==(const Problem&) const = default;
};
Problem problem_of(const PagedAttentionArgs& a);

// The kernel a plan runs; the launcher switches on it. The sm90 ids are attn90::Variant's values.
enum class Kernel : int {
  sm80 = 0,       // portable mma.sync kernel (tile rows: Plan::mt)
  sm90_coop = 1,  // Hopper wgmma kernels (src/cuda/attention/sm90/config.h)
  sm90_warp_specialized = 2,
  sm90_ping_pong = 3,
  sm90_ping_pong_eager = 4,  // the session-3 ping-pong, an A/B baseline (forced only)
  sm90_fp8 = 8,              // Hopper FP8 ping-pong: q, K, V fp8_e4m3 on FP8 wgmma (sm90/fp8_config.h)
};
const char* kernel_name(Kernel k);

struct Plan {
  Problem problem;
  Kernel kernel = Kernel::sm80;
  int mt = 1;                // sm80: m16 tiles of packed (q row, head) rows per CTA, 1 or 4
  int stages = 2;            // sm80: cp.async pipeline depth, 2..kMaxStages
  int num_splits = 1;        // split-KV CTAs per (m-block, kv head, request)
  int split_keys = 0;        // > 0: fixed split size in keys (deterministic); 0: even split
  int m_blocks = 1;          // grid.x
  int page_shifts = 1;       // shift addressing for power-of-two pages
  int page_runs = 1;         // sm80: one page-table entry per run of a thread's rows (pages >= 2 load steps)
  int lane_pages = 0;        // sm80: where runs do not apply, one lane per key row looks up its page id
  int ring_counters = 0;     // sm80, MT = 1: the lean key loop (Tuning::ring_counters; pages < 4 GiB)
  int fp8_direct = 0;        // sm80, FP8 KV: operands straight from the e4m3 bytes (Tuning::fp8_direct; 2 lean)
  int ctas_per_sm = 2;       // sm80: CTAs the plan expects per SM (smem and registers); splits fill them
  std::size_t smem = 0;      // dynamic shared memory per CTA
  std::size_t ws_bytes = 0;  // = workspace_layout(*this, nullptr).bytes
  bool sm90_tma = false;     // sm90 producer kernels: K/V tiles (or a half: sm90_kv_load) by TMA boxes (sm90/kv_tma.h)
  int sm90_kv_load = 0;      // sm90 producer kernels: attn90::KvLoad (sm90/config.h); kKvTma iff sm90_tma on its own
  int sm90() const { return kernel == Kernel::sm80 ? 0 : int(kernel); }  // attn90::Variant or 0
};
using Config = Plan;  // the name the kernel launchers and tests knew

// Optional overrides (benchmarks and tests only): 0 keeps the plan's choice.
struct Tuning {
  int num_splits = 0;
  int stages = 0;
  int mt = 0;
  int page_shifts = -1;  // -1: default (on), 0 off (integer division), 1 on; power-of-two pages only
  // Hopper kernel: -1 auto (prefill/extend shapes on sm_90 when built, unless the environment sets
  // ATTNSERVE_ATTN_SM90=0), 0 never (portable kernel); 1 (kCoop), 2 (kWarpSpecialized) or
  // 3 (kPingPong) or 4 (kPingPongEager, the A/B baseline): that Hopper kernel whenever it supports
  // the call. An fp8 q runs the FP8 Hopper kernel (8) whenever a Hopper kernel is wanted (> 0 or auto).
  int sm90 = -1;
  int page_runs = -1;  // portable kernel: -1 default (on), 0 off (one page-table entry per row), 1 on
  int ctas = 0;        // portable kernel: 0 default; 2 or 3 CTAs per SM (3: MT = 1, d <= 128, 2 stages)
  int split_keys = 0;  // deterministic mode: fixed split size in keys (rounded up to 64); 0: the default
  // Hopper producer kernels (kWarpSpecialized, kPingPong, kPingPongEager) on pages of a multiple of 16:
  // -1 auto (measured: plan.cpp; TMA at d 128 on pages of a multiple of 64 and at d 64, K by TMA + V by the lean
  // gather at d 128 and 192/128 on the other pages of a multiple of 16, else the gather), 0 cp.async gather, 1 TMA
  // boxes for whole tiles; the split loaders of kPingPong at d 128, 192/128, 256 (sm90/tile_load_split.cuh): 2 K
  // by TMA and V by a lean cp.async gather, 3 the reverse, 4 both by the lean gather (no TMA); where those do not
  // apply (another kernel or head dim) the cp.async gather. The FP8 kernel (sm90_fp8) ignores it (cp.async).
  int sm90_tma = -1;
  // Portable kernel's decode / verify tiles (MT = 1) on pages too small for runs (or page runs off): -1
  // default (on), 0 off (per-row page-id lookups), 1 on: one lane per key row looks up its page id once per
  // tile and the loading lanes take the slots by shuffle.
  int lane_pages = -1;
  // Portable kernel's decode / verify tiles (MT = 1): -1 default (on), 0 off, 1 on: the key loop carries the
  // K/V stage and page-id ring slots as counters (no `tile % stages`, `tile % ring`: runtime divisors),
  // the page-id prefetch takes shifts on power-of-two pages, and page-run / lane-page addresses 32-bit
  // page products (pages of < 4 GiB), and O's rescale is skipped in tiles that raise no row's max of the
  // warp (every factor exactly 1); FP8's e4m3 widening unrolled. Same loads and arithmetic: same bits.
  int ring_counters = -1;
  // Portable kernel on an FP8 (e4m3) cache, 16-row tiles (decode / verify), d = d_v in {64, 128}: -1 auto (2,
  // measured: plan.cpp), 0 off (the widening pass into T tiles), 1 on: the S and P V operands are read straight
  // from the raw e4m3 tiles (ldmatrix on the bytes, e4m3 -> f16 in registers); both products on f16 tensor
  // cores (q converted to f16 once, saturating at +-65504; P in f16). Not the widening kernel's bits.
  // 2 (the default since session 9): the direct kernel with the lean key loop (kernel.cuh, LEAN: the score scale
  // folded into the exponent's FFMA, softcap and mask as uniform branches, leaner lane-page loads); with ring
  // counters only (else 1 runs). Not the direct kernel's bits (one rounding fewer a score) unless a softcap is on.
  int fp8_direct = -1;
};

// Which arch leaves this build carries (the Hopper kernels need the sm_90a build); tests pass their own.
struct Targets {
  bool sm90a = false;
  static Targets built();
};

// Whether CUDA can run the problem at all; the reason names what is unsupported.
Support can_implement(const Problem& p, const DeviceCaps& caps);
// Throws attnserve::Error with can_implement's reason when unsupported.
Plan make_plan(const Problem& p, const DeviceCaps& caps, const Tuning& tune = {},
               const Targets& targets = Targets::built());
inline std::size_t workspace_size(const Plan& plan) { return plan.ws_bytes; }

// The split-KV partial states (sm80, num_splits > 1); with a null base only the size is counted.
struct WorkspaceLayout {
  float* part_o = nullptr;    // [num_splits, total_q, h_q, d_v] f32
  float* part_lse = nullptr;  // [num_splits, total_q, h_q] f32
  void* q_wide = nullptr;     // sm80 with an fp8 q: [total_q, h_q, d] q widened to out's dtype (exact)
  std::size_t bytes = 0;
};
WorkspaceLayout workspace_layout(const Plan& plan, void* base);

}  // namespace attnserve::cuda::attn
