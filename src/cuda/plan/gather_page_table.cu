// Page-table gather on the device: out[o, j] = slot(first + j * page) / page for the page-table row o,
// the slot from req_to_token or, for draft-decode positions, from the staged draft slots (draft-tree
// verify rows: from req_to_token at the row's path); 0 past the row's keys. One thread per column; rows over grid.y.
#include <algorithm>

#include "cuda/common/check.cuh"
#include "plan/plan_device.h"

namespace attnserve::plan_cuda {

using plan_detail::GatherPageTableArgs;
using plan_detail::kGatherDescInts;

namespace {

__global__ void gather_page_table_kernel(GatherPageTableArgs a) {
  const int64_t rows = int64_t(a.num_descs) * a.repeat;
  for (int64_t o = blockIdx.y; o < rows; o += gridDim.y) {
    const int32_t* d = a.descs + (o / a.repeat) * kGatherDescInts;  // [5] descriptor
    const int32_t pool_row = d[0], first = d[1], num_tokens = d[2], draft_begin = d[3], draft_row = d[4];
    const int32_t* r2t = a.req_to_token + int64_t(pool_row) * a.r2t_row_stride;  // [max_context]
    int32_t* out = a.out + o * a.out_row_stride;                                 // [width]
    for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < a.width;
         j += int64_t(gridDim.x) * blockDim.x) {
      const int64_t rel = j * a.page_size;
      int32_t value = 0;
      if (rel < num_tokens) {
        int64_t pos = first + rel;
        // draft_owns_page: the page holding the first draft position takes that position's slot.
        if (a.draft_owns_page && draft_row >= 0 && pos < draft_begin && pos + a.page_size > draft_begin &&
            a.num_draft > 0)
          pos = draft_begin;
        const bool draft = draft_row >= 0 && pos >= draft_begin && pos < int64_t(draft_begin) + a.num_draft;
        int32_t slot;
        if (!draft) slot = r2t[pos];
        else if (a.path) slot = r2t[draft_begin + a.path[int64_t(draft_row) * a.path_stride + (pos - draft_begin)]];
        else slot = a.draft_slots[int64_t(draft_row) * a.draft_row_stride + (pos - draft_begin)];
        value = a.page_size == 1 ? slot : slot / a.page_size;
      }
      out[j] = value;
    }
  }
}

}  // namespace

void gather_page_table(const GatherPageTableArgs& a, Stream stream) {
  const int64_t rows = int64_t(a.num_descs) * a.repeat;
  if (rows == 0 || a.width == 0) return;
  constexpr int kThreads = 256;
  const dim3 grid(unsigned(std::min<int64_t>((a.width + kThreads - 1) / kThreads, 1024)),
                  unsigned(std::min<int64_t>(rows, 65535)));
  gather_page_table_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream.handle)>>>(a);
  ATTNSERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace attnserve::plan_cuda
