"""Device timing: CUDA events around each call, warm-up first, the median of many, inputs rotated.

Python launches are slow next to some kernels (tens of µs per call through a wrapper), and an event
recorded while the GPU idles would count that launch time. So before each timed call the GPU is given
a short spin kernel (torch.cuda._sleep) sized from the measured host time of one call: the host then
runs ahead of the GPU and the events measure device time only. Without _sleep the events still work,
only host gaps may be counted (the report's meta says which).
"""
from __future__ import annotations

import statistics
import time

CYCLES_PER_US = 2000  # ~H200 boost clock; a longer spin only costs idle time, never accuracy


class Timer:
    def __init__(self, torch, device: str, warmup: int = 5, reps: int = 30):
        self.torch = torch
        self.cuda = device == "cuda"
        self.warmup = max(1, warmup)
        self.reps = max(3, reps)
        self.spin = self.cuda and hasattr(torch.cuda, "_sleep")

    def describe(self) -> str:
        how = "CUDA events per call" if self.cuda else "host clock (no GPU)"
        if self.spin:
            how += ", host launch hidden behind a spin kernel"
        return f"{how}; {self.warmup} warm-up, median of {self.reps}; inputs rotated over >= 3 sets"

    def median_us(self, fn, n_sets: int = 1) -> float:
        """Median time in µs of fn(i), i cycling over n_sets input sets."""
        n_sets = max(1, n_sets)
        for i in range(self.warmup):
            fn(i % n_sets)
        if not self.cuda:
            return self._host_median(fn, n_sets)
        return self._event_median(fn, n_sets)

    def _host_median(self, fn, n_sets: int) -> float:
        times = []
        for r in range(self.reps):
            t0 = time.perf_counter()
            fn((self.warmup + r) % n_sets)
            times.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(times)

    def _host_cost_us(self, fn, n_sets: int) -> float:
        """Host time to enqueue one call (the GPU is drained first so the queue does not block)."""
        torch = self.torch
        torch.cuda.synchronize()
        costs = []
        for i in range(3):
            t0 = time.perf_counter()
            fn(i % n_sets)
            costs.append((time.perf_counter() - t0) * 1e6)
            torch.cuda.synchronize()
        return min(costs)

    def _event_median(self, fn, n_sets: int) -> float:
        torch = self.torch
        spin_cycles = 0
        if self.spin:
            host_us = self._host_cost_us(fn, n_sets)
            spin_cycles = int(min(20000.0, 1.5 * host_us + 30.0) * CYCLES_PER_US)
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for r in range(self.reps):
            if spin_cycles:
                torch.cuda._sleep(spin_cycles)
            starts[r].record()
            fn((self.warmup + r) % n_sets)
            ends[r].record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends))


def rotation_sets(set_bytes: float, l2_bytes: float, min_sets: int = 3, max_sets: int = 256) -> int:
    """Input sets to rotate over: at least min_sets, and together at least twice the L2."""
    if set_bytes <= 0:
        return min_sets
    want = int(-(-2 * l2_bytes // set_bytes))  # ceil
    return max(min_sets, min(max_sets, want))
