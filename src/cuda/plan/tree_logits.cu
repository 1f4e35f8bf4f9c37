// Draft trees, target_verify: each row's path logits moved to its path positions, in place
// (plan_device.h TreeLogitsArgs). One warp per row: every lane reads its path entries' logits before
// any lane writes (the path <= 64 entries, two per lane), so the move is safe in place.
#include "cuda/common/check.cuh"
#include "plan/plan_device.h"

namespace attnserve::plan_cuda {

using plan_detail::TreeLogitsArgs;

namespace {

constexpr int kWarpsPerBlock = 4;

__global__ void tree_logits_kernel(TreeLogitsArgs a) {
  const int row = blockIdx.x * kWarpsPerBlock + int(threadIdx.x / 32);
  const int lane = int(threadIdx.x % 32);
  if (row >= a.rows) return;
  const int32_t* path = a.path + int64_t(row) * a.path_width;  // [path_width]
  const int d0 = lane, d1 = lane + 32;
  const int32_t p0 = d0 < a.path_width ? path[d0] : -1;
  const int32_t p1 = d1 < a.path_width ? path[d1] : -1;
  // The path's length: entries >= 0 come first.
  const int n = __popc(__ballot_sync(0xffffffffu, p0 >= 0)) + __popc(__ballot_sync(0xffffffffu, p1 >= 0));
  if (n == 0) return;
  float* cols = a.logits + int64_t(row) * a.logits_stride + (a.row_starts ? a.row_starts[row] : 0) +
                (a.topk_lengths[row] - n);  // column seq of the row
  const float v0 = p0 >= 0 ? cols[p0] : 0.f;
  const float v1 = p1 >= 0 ? cols[p1] : 0.f;
  __syncwarp();
  if (p0 >= 0) cols[d0] = v0;
  if (p1 >= 0) cols[d1] = v1;
}

}  // namespace

void tree_logits(const TreeLogitsArgs& a, Stream stream) {
  if (a.rows == 0 || a.path_width == 0) return;
  const unsigned blocks = unsigned((a.rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  tree_logits_kernel<<<blocks, kWarpsPerBlock * 32, 0, static_cast<cudaStream_t>(stream.handle)>>>(a);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace attnserve::plan_cuda
