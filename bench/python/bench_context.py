"""What every workload needs: the configuration, torch and attnserve, the timer, the ceilings, and
run_impl(), which runs one implementation on one shape in isolation (its failure becomes a row)."""
from __future__ import annotations

import re
import time
import traceback
from dataclasses import dataclass

from bench_report import Row, error_row, format_check, make_row
from bench_timing import Timer, rotation_sets

DEFAULT_L2_BYTES = 60 << 20


class CudaContextLost(RuntimeError):
    """A sticky CUDA error: nothing more can run in this process."""


@dataclass
class BenchConfig:
    device: str = "cuda"
    quick: bool = False
    smoke: bool = False           # tiny shapes (a check of the harness itself, e.g. on a CPU)
    only: str = ""                # run only cases whose name contains this
    flex: bool = True
    flex_budget_s: float = 200.0  # FlexAttention compiles per shape; its total time in one process is capped
    deadline: float = float("inf")  # time.monotonic() after which no new measurement starts
    warmup: int = 5
    reps: int = 30


class Workspace:
    """A growable scratch buffer for ops that take one (split-KV), sized by the op's own
    query_workspace=True answer; as a fallback, an op's 'workspace ... too small, need N' error grows it
    to N bytes and the call is retried once."""

    def __init__(self, torch, device: str):
        self.torch = torch
        self.device = device
        self.buf = torch.empty(256, dtype=torch.uint8, device=device)
        self.sized = False  # one query per workspace (one workspace per case): keeps timed calls lean

    def call(self, error_type, op, *args, **kwargs):
        if not self.sized:
            self.sized = True
            need = self._query(op, *args, **kwargs)
            if need is not None and need > self.buf.numel():
                self.buf = self.torch.empty(need + 256, dtype=self.torch.uint8, device=self.device)
        try:
            return op(*args, workspace=self.buf, **kwargs)
        except error_type as e:
            m = re.search(r"need (\d+)", str(e))
            if not m:
                raise
            self.buf = self.torch.empty(int(m.group(1)) + 256, dtype=self.torch.uint8, device=self.device)
            return op(*args, workspace=self.buf, **kwargs)

    @staticmethod
    def _query(op, *args, **kwargs):
        """Bytes the op asks for (None where the binding has no query_workspace)."""
        try:
            return int(op(*args, query_workspace=True, **kwargs))
        except TypeError:
            return None


class BenchContext:
    def __init__(self, cfg: BenchConfig, torch, attnserve, ceilings: dict | None, emit):
        self.cfg = cfg
        self.torch = torch
        self.A = attnserve
        self.device = cfg.device
        self.ceilings = ceilings if ceilings is not None else {}
        self.emit_row = emit
        self.timer = Timer(torch, cfg.device, warmup=cfg.warmup, reps=cfg.reps)
        self.l2_bytes = self._l2_bytes()
        self.flex_seconds = 0.0

    # ---- environment ---------------------------------------------------------------------------
    def _l2_bytes(self) -> int:
        if self.device != "cuda":
            return DEFAULT_L2_BYTES
        try:
            return int(self.torch.cuda.get_device_properties(0).L2_cache_size) or DEFAULT_L2_BYTES
        except Exception:
            return DEFAULT_L2_BYTES

    def sets_for(self, set_bytes: float) -> int:
        return rotation_sets(set_bytes, self.l2_bytes)

    def time_left(self) -> float:
        return self.cfg.deadline - time.monotonic()

    def selected(self, name: str) -> bool:
        return not self.cfg.only or self.cfg.only in name

    def sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def free(self):
        if self.device == "cuda":
            self.torch.cuda.empty_cache()

    def flex_allowed(self) -> str | None:
        """None when a FlexAttention peer may run now, else the reason it is skipped."""
        if not self.cfg.flex:
            return "skipped: --no-flex"
        if self.flex_seconds > self.cfg.flex_budget_s:
            return f"skipped: FlexAttention budget ({self.cfg.flex_budget_s:.0f} s of compiles and runs) spent"
        if self.time_left() < 45:
            return "skipped: too little time left for a FlexAttention compile"
        return None

    # ---- one implementation on one shape --------------------------------------------------------
    def run_impl(self, workload: str, impl: str, shape: str, call, n_sets: int, *, flops=None, bytes_=None,
                 check=None, tol: float = 2e-2, check_label: str = "rel-L2", note: str = "",
                 params: dict | None = None, is_flex: bool = False) -> Row:
        """Runs call(0) once and checks its output with check(output) -> float (or None), then times
        call(i) over n_sets rotating input sets. Any failure becomes an error row; the rest goes on."""
        params = dict(params or {})
        if self.time_left() <= 0:
            return self._emit(error_row(workload, impl, shape, "skipped: time budget spent", note=note, params=params))
        t0 = time.monotonic()
        try:
            out = call(0)
            self.sync()
            check_str, check_val, check_ok = self._check(check, out, tol, check_label)
            del out
            t = self.timer.median_us(call, n_sets)
            row = make_row(workload, impl, shape, t, flops, bytes_, self.ceilings, check=check_str,
                           check_value=check_val, check_ok=check_ok, note=note, params=params)
        except Exception as e:  # noqa: BLE001 - every failure is reported, never fatal to the run
            row = error_row(workload, impl, shape, f"{type(e).__name__}: {e}", note=note, params=params)
            print(f"[bench] {workload} / {shape} / {impl} failed:\n{_short_traceback()}", flush=True)
            self.raise_if_context_lost()
        finally:
            if is_flex:
                self.flex_seconds += time.monotonic() - t0
        return self._emit(row)

    def run_cases(self, cases, run_one, workload_of, impl: str = "attnserve"):
        """run_one(self, case) for each selected case; a failed setup (e.g. out of memory) becomes a
        row and ends that case only."""
        for case in cases:
            if not self.selected(case.name):
                continue
            workload = workload_of(case)
            if self.time_left() <= 0:
                self.skip(workload, impl, case.shape, "skipped: time budget spent")
                continue
            try:
                run_one(self, case)
            except CudaContextLost:
                raise
            except Exception as e:  # noqa: BLE001
                print(f"[bench] {workload} / {case.shape} setup failed:\n{_short_traceback()}", flush=True)
                self.skip(workload, impl, case.shape, f"setup failed: {type(e).__name__}: {e}")
                self.raise_if_context_lost()
            self.free()

    def skip(self, workload: str, impl: str, shape: str, reason: str, note: str = "", params: dict | None = None):
        return self._emit(error_row(workload, impl, shape, reason, note=note, params=dict(params or {})))

    def _check(self, check, out, tol, label):
        if check is None:
            return None, None, None
        try:
            value = check(out)
            if value is None:
                return None, None, None
            if isinstance(value, str):  # a check that reports in words (e.g. top-k sets)
                return value, None, not value.endswith("FAIL")
            s, ok = format_check(float(value), tol, label)
            return s, float(value), ok
        except Exception as e:  # noqa: BLE001
            print(f"[bench] check failed:\n{_short_traceback()}", flush=True)
            self.raise_if_context_lost()
            return f"check error: {type(e).__name__}", None, None

    def _emit(self, row: Row) -> Row:
        self.emit_row(row)
        return row

    def raise_if_context_lost(self):
        if self.device != "cuda":
            return
        try:
            self.torch.cuda.synchronize()
            self.torch.zeros(1, device="cuda").add_(1).item()
        except Exception as e:  # noqa: BLE001
            raise CudaContextLost(str(e)) from e


def _short_traceback(limit: int = 1500) -> str:
    """The end of the current traceback (some torch errors list every dispatch key)."""
    tb = traceback.format_exc()
    return tb if len(tb) <= limit else "...\n" + tb[-limit:]


def rel_l2(out, ref) -> float:
    """||out - ref|| / ||ref|| in float64 (NaN if out has NaN)."""
    o = out.double()
    r = ref.double()
    return float((o - r).norm() / r.norm().clamp_min(1e-30))
