// The Hopper indexer, ragged: the ws kernel in its 4 overlap modes with the batched epilogue (ws_mode 4..7;
// with and without q_scale).
#include "cuda/indexer/sm90/launch_shape.cuh"

namespace attnserve::cuda::indexer90 {
template void launch_ws_ragged<false, true>(const Params&, const indexer::Plan&, cudaStream_t);
template void launch_ws_ragged<true, true>(const Params&, const indexer::Plan&, cudaStream_t);
}  // namespace attnserve::cuda::indexer90
