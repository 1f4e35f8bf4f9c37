// Hopper sparse MLA over the bf16 cache on the dense MLA decode kernel's schedule; see dense_schedule.cuh.
#include "dense_schedule.cuh"
#include "sparse_mla_sm90.h"

namespace attnserve::cuda::sparse_mla90 {
void launch_bf16_dense_schedule(const sparse_mla_op::Params& p, cudaStream_t stream) {
  dense_schedule::launch_dense_schedule<false>(p, stream);
}
}  // namespace attnserve::cuda::sparse_mla90
