// The Hopper indexer, paged next_n 2 (the ws kernel with the batched epilogue, ws_mode 4..7 with 16-byte keys;
// 16- and 4-byte key copies, with and without q_scale).
#include "cuda/indexer/sm90/launch_shape.cuh"

namespace attnserve::cuda::indexer90 {
template void launch_ws_paged<2, false, true>(const Params&, const indexer::Plan&, cudaStream_t);
template void launch_ws_paged<2, true, true>(const Params&, const indexer::Plan&, cudaStream_t);
}  // namespace attnserve::cuda::indexer90
