// The Hopper indexer, ragged: the ws kernel with four math warpgroups (ws_mode kWsQuadMode; with and without
// q_scale).
#include "cuda/indexer/sm90/launch_shape.cuh"

namespace attnserve::cuda::indexer90 {
template void launch_ws_ragged_quad<false>(const Params&, const indexer::Plan&, cudaStream_t);
template void launch_ws_ragged_quad<true>(const Params&, const indexer::Plan&, cudaStream_t);
}  // namespace attnserve::cuda::indexer90
