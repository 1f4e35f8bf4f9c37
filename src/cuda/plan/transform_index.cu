// Top-k positions -> token slots on the device (plan.h TransformIndexArgs): one block per query row
// (grid-stride), its page-table row found by a binary search over cu_seqlens_q for prefill rows.
#include <algorithm>

#include "cuda/common/check.cuh"
#include "plan/plan_device.h"

namespace attnserve::plan_cuda {

namespace {

struct TransformParams {
  const int32_t* table;  // [R, W]
  int64_t table_stride;
  int64_t table_rows, width;
  const int32_t* idx;  // [rows, k]
  int64_t idx_stride;
  int32_t* out;  // [rows, k]
  int64_t out_stride;
  int64_t rows, k;
  const int32_t* cu;  // [R + 1] or null (decode rows)
};

__global__ void transform_index_kernel(TransformParams p) {
  __shared__ int64_t s_row;
  for (int64_t i = blockIdx.x; i < p.rows; i += gridDim.x) {
    if (threadIdx.x == 0) {
      int64_t r = i;
      if (p.cu) {                               // the last r with cu[r] <= i, -1 .. R
        int64_t lo = 0, hi = p.table_rows + 1;  // count of entries <= i in cu[0 .. R]
        while (lo < hi) {
          const int64_t mid = (lo + hi) / 2;
          if (p.cu[mid] <= i) lo = mid + 1;
          else hi = mid;
        }
        r = lo - 1;
      }
      s_row = r;
    }
    __syncthreads();
    const int64_t r = s_row;
    const bool row_ok = r >= 0 && r < p.table_rows;
    for (int64_t j = threadIdx.x; j < p.k; j += blockDim.x) {
      const int32_t pos = p.idx[i * p.idx_stride + j];
      p.out[i * p.out_stride + j] = (row_ok && pos >= 0 && pos < p.width) ? p.table[r * p.table_stride + pos] : -1;
    }
    __syncthreads();
  }
}

}  // namespace

void transform_index(const TransformIndexArgs& a, Stream stream) {
  TransformParams p{a.page_table_1.ptr<int32_t>(),
                    a.page_table_1.stride(0),
                    a.page_table_1.size(0),
                    a.page_table_1.size(1),
                    a.topk_indices.ptr<int32_t>(),
                    a.topk_indices.stride(0),
                    a.out.ptr<int32_t>(),
                    a.out.stride(0),
                    a.topk_indices.size(0),
                    a.topk_indices.size(1),
                    a.cu_seqlens_q.empty_view() ? nullptr : a.cu_seqlens_q.ptr<int32_t>()};
  if (p.rows == 0 || p.k == 0) return;
  const int threads = int(std::min<int64_t>(256, (p.k + 31) / 32 * 32));
  const unsigned blocks = unsigned(std::min<int64_t>(p.rows, 65535));
  transform_index_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream.handle)>>>(p);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace attnserve::plan_cuda
