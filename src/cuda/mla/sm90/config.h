// Hopper (sm_90a) MLA decode: what it supports, its tile shapes, register split and shared-memory size.
// Host-visible (plain C++): the plan (../plan.cpp) sizes and chooses with it, the kernel (kernel.cuh)
// is built from it.
//
// Supports what the portable kernel supports on a bf16 cache (any h_q, page size, s_q, causal, window,
// softcap, split-KV), except deterministic mode (its bits differ from the portable kernel's).
#pragma once
#include <cstddef>

namespace attnserve::cuda::mla90 {

constexpr int kDv = 512, kDr = 64, kDqk = kDv + kDr;
constexpr int kRows = 64;                          // packed rows (q_row * h_q + head) per CTA: the M of every wgmma
constexpr int kTileKeys = 64;                      // keys per tile: the N of S = Q K^T (m64n64k16); page 64 = one page
constexpr int kStages = 2;                         // K tiles in the ring (V = the first 512 columns of the same tile)
constexpr int kPanels = kDqk / 64;                 // 9 SW128 panels of 64 columns per Q row / K row
constexpr int kPanelBytes = 64 * 128;              // one panel of 64 rows (Q rows, keys or P rows)
constexpr int kTileBytes = kPanels * kPanelBytes;  // 72 KB: the Q tile and each K tile
constexpr int kHalfDv = kDv / 2;                   // value columns per consumer warpgroup

// Three warpgroups: 0 loads (cp.async gather through the page table), 1 computes S, the softmax and
// O[:, 0:256), 2 computes O[:, 256:512) from 1's P (shared memory).
constexpr int kThreads = 384;
// setmaxnreg moves registers inside the CTA's launch allocation (168 per thread for 384 threads at
// __launch_bounds__(384, 1)); a split that needs more makes a setmaxnreg.inc wait forever. ptxas
// allocates each role within its count (without the split the consumers spilled 900 bytes).
constexpr int kEntryRegs = 168;
constexpr int kProducerRegs = 56;
constexpr int kSoftmaxRegs = 240;  // O half (128) + S (32) + P fragments + bounds
constexpr int kPvRegs = 208;       // O half (128)
static_assert(128 * (kProducerRegs + kSoftmaxRegs + kPvRegs) <= kEntryRegs * kThreads,
              "setmaxnreg split exceeds the CTA's registers");

constexpr std::size_t kAlignSlack = 1024;  // dynamic smem rounded up to the 1024-byte swizzle atom

// Q tile + ring of K tiles + P (one panel, bf16) + alpha and 1/l per row (f32) + 3 x kStages mbarriers
// (full, empty, and the FP8 TMA producer's raw-bytes-landed).
constexpr std::size_t smem_bytes() {
  return kAlignSlack + std::size_t(kTileBytes) * (1 + kStages) + kPanelBytes + 2 * kRows * 4 + 3 * kStages * 8;
}
static_assert(smem_bytes() <= 232448, "over the 227 KB of dynamic shared memory per block on sm_90");
// The sparse MLA kernel on this schedule (src/cuda/sparse_mla/sm90/dense_schedule.cuh) adds one 64-bit key mask
// per stage after the barriers.
constexpr std::size_t kKeyMaskBytes = kStages * 8;
constexpr std::size_t smem_bytes_with_key_mask() { return smem_bytes() + kKeyMaskBytes; }
static_assert(smem_bytes_with_key_mask() <= 232448, "over the 227 KB of dynamic shared memory per block on sm_90");

// The TMA producers (producer_tma.cuh for a bf16 cache, produce_fp8_tma in producer_fp8.cuh for FP8-656) need
// whole 64-key tiles on one page.
constexpr bool tma_applies(long long page_size) { return page_size % kTileKeys == 0; }
// The plan takes it by default on a bf16 cache where it applies and a request's packed rows span at least this many
// 64-row blocks, i.e. where two or more CTAs read each tile (measured: b128 x 8K h_q 128 +11-14 %, b64 s_q 2 and b16 x
// 32K h_q 128 +9-13 %; with one block per request, h_q 16 / 64, 1-3 % slower: bench/NOTES.md "Session 6"). On an
// FP8-656 cache it takes it wherever it applies, whatever the row blocks (measured b128 x 8K: h_q 16 / 64 / 128
// 14-21 % faster than the FP8 cp.async producer: bench/NOTES.md "Session 6: ... the FP8-656 TMA producer measured").
constexpr int kTmaMinRowBlocks = 2;

// Whether this build carries the sm_90a kernel (CMake defines ATTNSERVE_HAVE_SM90).
#ifdef ATTNSERVE_HAVE_SM90
constexpr bool kBuilt = true;
#else
constexpr bool kBuilt = false;
#endif

}  // namespace attnserve::cuda::mla90
