// The Hopper indexer, paged next_n 1 (the ws kernel, lockstep, per-row epilogue; 16- and 4-byte key
// copies, with and without q_scale; the batched epilogue: paged_n1_batched.cu).
#include "cuda/indexer/sm90/launch_shape.cuh"

namespace attnserve::cuda::indexer90 {
template void launch_ws_paged<1, false, false>(const Params&, const indexer::Plan&, cudaStream_t);
template void launch_ws_paged<1, true, false>(const Params&, const indexer::Plan&, cudaStream_t);
}  // namespace attnserve::cuda::indexer90
