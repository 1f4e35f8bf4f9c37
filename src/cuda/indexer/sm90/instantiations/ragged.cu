// The Hopper indexer, ragged: the session-4 kernel and the ws kernel in its 4 overlap modes with the per-row
// epilogue (with and without q_scale; the batched epilogue: ragged_batched.cu).
#include "cuda/indexer/sm90/launch_shape.cuh"

namespace attnserve::cuda::indexer90 {
template void launch_ragged<false>(const Params&, const indexer::Plan&, cudaStream_t);
template void launch_ragged<true>(const Params&, const indexer::Plan&, cudaStream_t);
template void launch_ws_ragged<false, false>(const Params&, const indexer::Plan&, cudaStream_t);
template void launch_ws_ragged<true, false>(const Params&, const indexer::Plan&, cudaStream_t);
}  // namespace attnserve::cuda::indexer90
