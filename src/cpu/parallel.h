// Threading for the CPU kernels: OpenMP over independent work items.
#pragma once
#include <cstdint>

namespace attnserve::cpu {

// Runs fn(i) for i in [0, n), spread over the available cores. fn must not throw across threads:
// validate before calling. Below `serial_below` items the loop runs on the calling thread: opening a
// parallel region costs more than tiny work (measured: up to ~0.5 s in total over a demo run of small
// stores on a loaded 2-core machine).
template <typename Fn>
void parallel_for(int64_t n, Fn&& fn, int64_t serial_below = 2) {
#pragma omp parallel for schedule(dynamic, 1) if (n >= serial_below)
  for (int64_t i = 0; i < n; ++i) fn(i);
}

}  // namespace attnserve::cpu
