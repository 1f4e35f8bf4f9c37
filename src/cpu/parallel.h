// Threading for the CPU kernels: OpenMP over independent work items.
#pragma once
#include <cstdint>

namespace attnserve::cpu {

// Runs fn(i) for i in [0, n), spread over the available cores. fn must not throw across threads:
// validate before calling.
template <typename Fn>
void parallel_for(int64_t n, Fn&& fn) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) fn(i);
}

}  // namespace attnserve::cpu
