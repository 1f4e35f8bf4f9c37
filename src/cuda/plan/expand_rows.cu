// Per-row lengths of the sparse planner on the device: one block per request writes its rows'
// expanded lengths, their top-k clip and the clip's prefix sums (closed form, no scan); one more block
// writes nsa_cu_seqlens_k[0] and the rows past the live ones (graph padding).
#include "cuda/common/check.cuh"
#include "plan/plan_device.h"

namespace attnserve::plan_cuda {

using plan_detail::ExpandRowsArgs;
using plan_detail::kExpandReqInts;

namespace {

__global__ void expand_rows_kernel(ExpandRowsArgs a) {
  const int r = blockIdx.x;
  if (r < a.bs) {
    const int32_t* q = a.reqs + int64_t(r) * kExpandReqInts;  // [4] row_start, q_len, kv_len, nsa_cu_base
    const int32_t row_start = q[0], q_len = q[1], kv_len = q[2], base = q[3];
    const int64_t first = int64_t(kv_len) - q_len + 1;  // keys row 0 sees
    for (int t = threadIdx.x; t < q_len; t += blockDim.x) {
      const int64_t e = first + t > 0 ? first + t : 0;
      const int64_t n = e < a.topk ? e : a.topk;
      a.expanded[row_start + t] = int32_t(e);
      a.nsa_seqlens[row_start + t] = int32_t(n);
      a.nsa_cu_seqlens_k[row_start + t + 1] = int32_t(base + plan_detail::clipped_ramp_sum(first, t + 1, a.topk));
    }
  } else {
    if (threadIdx.x == 0) a.nsa_cu_seqlens_k[0] = 0;
    for (int row = a.live_rows + threadIdx.x; row < a.total_rows; row += blockDim.x) {
      a.expanded[row] = 0;
      a.nsa_seqlens[row] = 0;
      a.nsa_cu_seqlens_k[row + 1] = a.nsa_total;
    }
  }
}

}  // namespace

void expand_rows(const ExpandRowsArgs& a, Stream stream) {
  expand_rows_kernel<<<unsigned(a.bs + 1), 128, 0, static_cast<cudaStream_t>(stream.handle)>>>(a);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace attnserve::plan_cuda
