// The Hopper indexer, paged next_n 2 and 4 with 16-byte key copies: the ws kernel with four math warpgroups
// (ws_mode kWsQuadMode; with and without q_scale).
#include "cuda/indexer/sm90/launch_shape.cuh"

namespace attnserve::cuda::indexer90 {
template void launch_ws_paged_quad<2, false>(const Params&, const indexer::Plan&, cudaStream_t);
template void launch_ws_paged_quad<2, true>(const Params&, const indexer::Plan&, cudaStream_t);
template void launch_ws_paged_quad<4, false>(const Params&, const indexer::Plan&, cudaStream_t);
template void launch_ws_paged_quad<4, true>(const Params&, const indexer::Plan&, cudaStream_t);
}  // namespace attnserve::cuda::indexer90
