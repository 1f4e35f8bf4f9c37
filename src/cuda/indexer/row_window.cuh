// The key window of one query row of the lightning indexer, shared by its portable (sm80/) and Hopper (sm90/)
// kernels.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/indexer/params.cuh"

namespace attnserve::cuda::indexer {

// Key window [lo, hi) of row t of a group of `group_rows` rows (t < group_rows), clamped to the logits width.
// Paged: the request's causal window (its last group_rows rows end at seqlen); ragged: row group * group_rows + t's
// [ks, ke), empty past the last row.
template <bool kPaged>
__device__ __forceinline__ void row_window(const Params& p, int64_t group, int group_rows, int t, int64_t& lo,
                                           int64_t& hi) {
  if constexpr (kPaged) {
    const int64_t limit = min(p.num_cols, p.max_pages * p.page_size);
    const int64_t visible = int64_t(p.seqlens[group * p.seqlens_stride]) - group_rows + t + 1;
    lo = 0;
    hi = visible < 0 ? 0 : (visible > limit ? limit : visible);
  } else {
    const int64_t row = group * group_rows + t;
    if (row >= p.rows) {
      lo = hi = 0;
      return;
    }
    int64_t a = p.ks[row * p.ks_stride], b = p.ke[row * p.ke_stride];
    a = a < 0 ? 0 : (a > p.num_cols ? p.num_cols : a);
    b = b < a ? a : (b > p.num_cols ? p.num_cols : b);
    lo = a;
    hi = b;
  }
}

}  // namespace attnserve::cuda::indexer
