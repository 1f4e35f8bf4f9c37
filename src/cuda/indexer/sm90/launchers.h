// The Hopper indexer's per-shape launchers, defined in launch_shape.cuh and instantiated one file per shape
// in instantiations/ (parallel builds); indexer_sm90.cu dispatches to them.
#pragma once
#include <cuda_runtime.h>

#include "cuda/indexer/params.cuh"
#include "cuda/indexer/plan.h"

namespace attnserve::cuda::indexer90 {

// The session-4 kernel (kernel.cuh): ragged.
template <bool kQScale>
void launch_ragged(const indexer::Params& p, const indexer::Plan& plan, cudaStream_t s);
// The warp-specialized kernel (ws_kernel.cuh): paged next_n kNextN (1..4; 16-byte key copies when
// plan.key_vec16, else 4-byte ones), and ragged, in the plan's ws_mode; kBatched: its bit kWsBatched
// (config.h) is set (the batched epilogue: instantiations/*_batched.cu).
template <int kNextN, bool kQScale, bool kBatched>
void launch_ws_paged(const indexer::Params& p, const indexer::Plan& plan, cudaStream_t s);
template <bool kQScale, bool kBatched>
void launch_ws_ragged(const indexer::Params& p, const indexer::Plan& plan, cudaStream_t s);
// The ws kernel with four math warpgroups (plan.ws_mode == kWsQuadMode, config.h; instantiations/*_quad.cu):
// ragged, paged next_n 2 and 4 with 16-byte key copies.
template <bool kQScale>
void launch_ws_ragged_quad(const indexer::Params& p, const indexer::Plan& plan, cudaStream_t s);
template <int kNextN, bool kQScale>
void launch_ws_paged_quad(const indexer::Params& p, const indexer::Plan& plan, cudaStream_t s);

}  // namespace attnserve::cuda::indexer90
