// The key range a query row sees (the attention.h contract), shared by the dense, MLA and Hopper
// kernels: bottom-right causal, then the sliding window. Any params type with causal, window_left
// and window_right fields.
#pragma once

namespace attnserve::cuda {

// Keys [lo, hi] visible to query row q_row of a request with q_len rows over k_len keys.
template <typename P>
__device__ __forceinline__ void row_bounds(const P& p, int q_row, int q_len, int k_len, int& lo, int& hi) {
  const int pos = k_len - q_len + q_row;
  hi = k_len - 1;
  if (p.causal) hi = min(hi, pos);
  if (p.window_right >= 0) hi = min(hi, pos + p.window_right);
  lo = 0;
  if (p.window_left >= 0) lo = max(lo, pos - p.window_left);
}

}  // namespace attnserve::cuda
