// The Hopper lightning-indexer kernels (sm_90a FP8 wgmma): their CTA shapes. Host-visible (plain C++): the
// plan (../plan.cpp) chooses and sizes the grid with them, the kernels (kernel.cuh, ws_kernel.cuh) are built
// from them. Scores S[keys x (rows * 64 heads)] = K Q^T come from FP8 wgmma (keys are the M side, 64 per
// warpgroup; the group's q rows, resident in shared memory, are the N side), so the sum over heads is along
// the accumulator's columns: in-thread, then over the quad.
//
// The session-4 kernel (kernel.cuh; the ragged default): a CTA is two warpgroups over kRaggedRows consecutive
// rows and kColsPerCta logit columns; both warpgroups read the same 64-key stage of a cp.async ring, each
// owns 2 of the 4 rows (N = 128): a key is read from L2 once per 4 rows, and 64 accumulators a thread leave
// room for 2 CTAs an SM, so one CTA's epilogue overlaps the other's wgmma.
#pragma once
#include <cstddef>

namespace attnserve::cuda::indexer90 {

constexpr int kDim = 128;          // fp8 bytes per q head row and per key
constexpr int kHeads = 64;         // the one head count (DeepSeek-V3.2); others run the portable kernel
constexpr int kWgKeys = 64;        // keys per warpgroup tile (wgmma M)
constexpr int kThreads = 256;      // two warpgroups
constexpr int kColsPerCta = 1024;  // logit columns per CTA
constexpr int kMaxNextN = 4;       // paged (ws kernel): N = 64 * next_n <= 256
constexpr int kRaggedRows = 4;     // ragged rows per CTA

struct Shape {
  int key_wgs;      // warpgroups along keys
  int rows_per_wg;  // query rows each warpgroup scores (its N = 64 * rows_per_wg)
  int stages;       // cp.async ring depth
  constexpr int row_wgs() const { return 2 / key_wgs; }
  constexpr int rows() const { return rows_per_wg * row_wgs(); }  // query rows of the CTA's group
  constexpr int stage_keys() const { return kWgKeys * key_wgs; }
};
constexpr Shape ragged_shape() { return Shape{1, 2, 6}; }

// Dynamic shared memory: q rows, the key ring, its scales and validity flags, the weights, + 1024 for the
// manual alignment of the base to the 1024-byte swizzle atom.
constexpr std::size_t smem_bytes(const Shape& s) {
  return std::size_t(s.rows()) * kHeads * kDim + std::size_t(s.stages) * s.stage_keys() * (kDim + 4 + 1) +
         std::size_t(s.rows()) * kHeads * 4 + 1024 + 16;
}

// The warp-specialized kernel (ws_kernel.cuh, DeepGEMM's structure, our code; the paged kernel, and the
// ragged one when asked: Tuning::sm90_ws = 1): a producer warpgroup
// streams 64-key blocks through a ring of kWsStages cp.async stages (full / empty mbarriers per stage),
// and two math warpgroups take alternate blocks, each scoring its block against all the group's rows
// (N = 64 * rows: next_n paged, kWsRaggedRows ragged), so one warpgroup's epilogue runs under the other's
// wgmma. Weights live in registers. One CTA an SM (setmaxnreg); long column spans (the plan sizes them
// to about kWsWaves CTAs an SM) amortize the prologue.
constexpr int kWsThreads = 384;   // producer warpgroup + 2 math warpgroups
constexpr int kWsBlockKeys = 64;  // keys per ring stage (one math warpgroup's wgmma M)
constexpr int kWsStages = 16;     // ring depth: up to 128 KB of keys in flight per SM (decode)
constexpr int kWsRaggedRows = 4;  // ragged rows per CTA: N = 256
constexpr int kWsPageAhead = 8;   // producer: page-id loads this many blocks ahead of the copies
constexpr int kWsMinCols = 1024;  // shortest column span the plan gives a CTA
constexpr int kWsWaves = 4;       // CTAs per SM the plan aims for
// How the math warpgroups overlap wgmma and epilogue (ws_kernel.cuh, its kMode; Plan::ws_mode): bits.
constexpr int kWsPingPong = 1;  // the two warpgroups issue their blocks' wgmmas strictly in turn
constexpr int kWsSplit = 2;     // a block's wgmmas in two commit groups (half the rows each); reduce the first
                                // half while the second runs (rows even: ragged, paged next_n 2 and 4)
constexpr int kWsBatched = 4;   // the rows of a commit group reduced together (one shuffle / store tail);
                                // every form of the ws kernel has it (both defaults use it)
constexpr int kWsModes = 8;     // the modes the launcher instantiates (the plan's ws_mode range): ragged and
                                // paged next_n 2, 4 with 16-byte keys 0..7, every other paged form 0 and 4
// The plan's mode unless Tuning::ws_mode forces one (610e825, H200, bench/NOTES.md session 7): ragged batched +
// split (causal 8K 674.8 us, 815 TFLOP/s; lockstep 921.8, batched 703.3, all four bits 688.6); paged batched
// (b128 x 32K next_n 1 / 2 / 4: 274 / 492 / 716 TFLOP/s against lockstep's 265 / 466 / 593; batched + split
// was 731 at next_n 4 but 459 at next_n 2). The GPU oracle tests passed on every mode of every form.
constexpr int kWsRaggedDefaultMode = kWsBatched | kWsSplit;
constexpr int kWsProducerRegs = 56;  // setmaxnreg: 128 * 56 + 256 * 224 <= 168 * 384 (the launch's allocation)
constexpr int kWsMathRegs = 224;
static_assert(128 * kWsProducerRegs + 256 * kWsMathRegs <= 168 * kWsThreads,
              "setmaxnreg split exceeds the CTA's registers");

// Session 7 (the paged default where it exists, below): four math warpgroups instead of two (DeepGEMM's sm90 MQA-logits
// kernels run four at 104 registers; ours had two math warps a scheduler, each mostly waiting: 42 % tensor-pipe use at
// causal 8K). Each warpgroup scores at most 2 rows (N <= 128, 64 accumulators a thread): a group of 4 rows (ragged,
// paged next_n 4) splits a block's rows over a pair of warpgroups (both read the same stage; the pairs take
// alternate blocks), a group of 2 (next_n 2) gives each of the four its own block. One commit group a block
// (no split, no ping-pong): mode kWsQuadMode only, for ragged and paged next_n 2 / 4 with 16-byte keys. Each
// warpgroup's wgmma and epilogue are those of a bank of the two-warpgroup kernel (rows 4: mode 6's banks of 2
// rows; rows 2: mode 4's one bank), so it gives that mode's bits (ws_quad_twin).
constexpr int kWsQuad = 8;
constexpr int kWsQuadMode = kWsQuad | kWsBatched;
constexpr int ws_math_wgs(int mode) { return (mode & kWsQuad) != 0 ? 4 : 2; }
constexpr int ws_threads(int mode) { return 128 * (1 + ws_math_wgs(mode)); }
constexpr bool ws_quad_rows(int rows) { return rows == 2 || rows == 4; }
// The two-warpgroup mode whose banks compute what a quad warpgroup computes (the same bits).
constexpr int ws_quad_twin(int rows) { return rows == 4 ? (kWsBatched | kWsSplit) : kWsBatched; }
// 640 threads launch with at most 96 registers (65536 / 640, in steps of 8); setmaxnreg moves them to the math.
constexpr int kWsQuadLaunchRegs = 96;
constexpr int kWsQuadProducerRegs = 32;
constexpr int kWsQuadMathRegs = 112;
constexpr int kWsQuadPageAhead = 4;  // the quad producer's page ids ahead (paged; 32 registers)
static_assert(128 * kWsQuadProducerRegs + 512 * kWsQuadMathRegs <= kWsQuadLaunchRegs * ws_threads(kWsQuadMode),
              "quad setmaxnreg split exceeds the CTA's registers");
static_assert(kWsQuadLaunchRegs * ws_threads(kWsQuadMode) <= 65536, "quad launch exceeds the SM's registers");
// Paged: four math warpgroups where they exist (next_n 2 and 4 with 16-byte keys; the plan drops the bit
// elsewhere, leaving the batched epilogue). 26d4201, H200, b128 x 32K page 64: next_n 4 333.5 us = 824 TFLOP/s
// against mode 4's 383.3 (717), next_n 2 223.3 us = 616 against 279.1 (492). Ragged stays on mode 6: the quad
// kernel measured 653.3 against 666.2 us at causal 8K and 200.3 against 198.7 at 4K (within the spread).
constexpr int kWsPagedDefaultMode = kWsQuadMode;

// Dynamic shared memory of the ws kernel for `rows` query rows: q, the key ring with its scales and
// validity flags, 2 mbarriers a stage, the rows' windows, + 1024 for the alignment of the base.
constexpr std::size_t ws_q_bytes(int rows) { return std::size_t(rows) * kHeads * kDim; }
constexpr std::size_t ws_smem_bytes(int rows) {
  return ws_q_bytes(rows) + std::size_t(kWsStages) * kWsBlockKeys * (kDim + 4 + 1) + 2 * kWsStages * 8 +
         std::size_t(rows) * 8 + 1024;
}

}  // namespace attnserve::cuda::indexer90
