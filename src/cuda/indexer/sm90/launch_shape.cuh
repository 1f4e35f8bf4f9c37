// Definitions of the Hopper indexer's per-shape launchers (launchers.h), included by instantiations/*.cu.
#pragma once
#include "cuda/common/host_util.cuh"
#include "cuda/indexer/sm90/kernel.cuh"
#include "cuda/indexer/sm90/launchers.h"
#include "cuda/indexer/sm90/ws_kernel.cuh"

namespace attnserve::cuda::indexer90 {

template <bool kQScale>
void launch_ragged(const Params& p, const indexer::Plan& plan, cudaStream_t s) {
  auto* kernel = indexer_sm90_ragged_kernel<kQScale>;
  const std::size_t smem = smem_bytes(ragged_shape());
  static const bool attr_set = [&] {
    ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)attr_set;
  kernel<<<dim3(unsigned(plan.ctas())), dim3(kThreads), smem, s>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

template <int kRows, bool kPaged, bool kQScale, bool kVec16, int kMode>
void launch_ws_kernel(const Params& p, const indexer::Plan& plan, cudaStream_t s) {
  auto* kernel = indexer_ws_kernel<kRows, kPaged, kQScale, kVec16, kMode>;
  const std::size_t smem = ws_smem_bytes(kRows);
  static const bool attr_set = [&] {
    ATTNSERVE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    // setmaxnreg moves registers inside the CTA's launch allocation: a kernel built with fewer registers than
    // the split needs would wait forever in setmaxnreg.inc, so refuse it here (an error, not a hang).
    cudaFuncAttributes attr{};
    ATTNSERVE_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    const bool quad = (kMode & kWsQuad) != 0;
    const int need =
        quad ? 128 * kWsQuadProducerRegs + 512 * kWsQuadMathRegs : 128 * kWsProducerRegs + 256 * kWsMathRegs;
    ATTNSERVE_CHECK(attr.numRegs * ws_threads(kMode) >= need, "indexer: the ws kernel (mode ", kMode, ") has ",
                    attr.numRegs, " registers a thread, its setmaxnreg split needs ", need, " for the CTA");
    return true;
  }();
  (void)attr_set;
  kernel<<<dim3(unsigned(plan.ctas())), dim3(ws_threads(kMode)), smem, s>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

// The plan's overlap bits (ws_mode & 3: lockstep, ping-pong, split, both) as the kernel's template argument,
// with the batched epilogue's bit kEpilogue (0 or kWsBatched).
template <int kRows, bool kPaged, bool kQScale, bool kVec16, int kEpilogue>
void launch_ws_overlap(const Params& p, const indexer::Plan& plan, cudaStream_t s) {
  switch (plan.ws_mode & (kWsPingPong | kWsSplit)) {
    case 0: launch_ws_kernel<kRows, kPaged, kQScale, kVec16, kEpilogue | 0>(p, plan, s); break;
    case 1: launch_ws_kernel<kRows, kPaged, kQScale, kVec16, kEpilogue | 1>(p, plan, s); break;
    case 2: launch_ws_kernel<kRows, kPaged, kQScale, kVec16, kEpilogue | 2>(p, plan, s); break;
    case 3: launch_ws_kernel<kRows, kPaged, kQScale, kVec16, kEpilogue | 3>(p, plan, s); break;
  }
}

// kBatched: the plan's ws_mode has kWsBatched (launchers.h; the batched and the per-row epilogues are
// instantiated in separate files). Paged: the overlap bits for next_n 2 and 4 with 16-byte key copies (the
// compute-heavy forms); lockstep otherwise.
template <int kNextN, bool kQScale, bool kBatched>
void launch_ws_paged(const Params& p, const indexer::Plan& plan, cudaStream_t s) {
  constexpr int kEpilogue = kBatched ? kWsBatched : 0;
  if (!plan.key_vec16) launch_ws_kernel<kNextN, true, kQScale, false, kEpilogue>(p, plan, s);
  else if constexpr (kNextN == 2 || kNextN == 4) launch_ws_overlap<kNextN, true, kQScale, true, kEpilogue>(p, plan, s);
  else launch_ws_kernel<kNextN, true, kQScale, true, kEpilogue>(p, plan, s);
}

template <bool kQScale, bool kBatched>
void launch_ws_ragged(const Params& p, const indexer::Plan& plan, cudaStream_t s) {
  launch_ws_overlap<kWsRaggedRows, false, kQScale, true, kBatched ? kWsBatched : 0>(p, plan, s);
}

// Four math warpgroups (plan.ws_mode == kWsQuadMode): ragged, and paged next_n 2 / 4 with 16-byte keys.
template <bool kQScale>
void launch_ws_ragged_quad(const Params& p, const indexer::Plan& plan, cudaStream_t s) {
  launch_ws_kernel<kWsRaggedRows, false, kQScale, true, kWsQuadMode>(p, plan, s);
}
template <int kNextN, bool kQScale>
void launch_ws_paged_quad(const Params& p, const indexer::Plan& plan, cudaStream_t s) {
  static_assert(ws_quad_rows(kNextN), "quad: next_n 2 or 4");
  launch_ws_kernel<kNextN, true, kQScale, true, kWsQuadMode>(p, plan, s);
}

}  // namespace attnserve::cuda::indexer90
