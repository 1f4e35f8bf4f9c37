// Single-call timings measure device time: before the start event, a one-thread kernel keeps the GPU busy
// while the host enqueues the call, so the host's launch path (planning, the launch API: ~5-12 us a call,
// bench/NOTES.md session 7) is not counted. bench/python/bench_timing.py times the peers the same way
// (torch.cuda._sleep). Rows that want the host path too call the *_with_host timers.
#pragma once
#include <cuda_runtime.h>

namespace attnserve::bench {

// ~50 us at the H200's ~2 GHz: > 4x the host's cost of one call of any op here.
inline constexpr long long kHideLaunchCycles = 100000;

__global__ void hide_launch_spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// Enqueues the spin on the default stream (where the timed calls and their events go).
inline void hide_host_launch() { hide_launch_spin_kernel<<<1, 1>>>(kHideLaunchCycles); }

}  // namespace attnserve::bench
