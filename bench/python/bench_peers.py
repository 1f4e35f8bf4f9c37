#!/usr/bin/env python3
"""attnserve against its peers, in the same run on the same GPU.

Our kernels run through the Python bindings on torch CUDA tensors; the peers are what this device
has: PyTorch SDPA (flash and cuDNN backends, on K/V gathered contiguous from our paged cache),
FlexAttention with a paged block mask, torch.topk, torch index_copy_ (and a torch-composed FP8
store). The ceilings (a 2 GiB device copy, a bf16 8192³ matmul) are measured by this run too.

Writes <out>/bench_<date>_<gpu>_<commit>.{json,md} and <out>/decode_bandwidth_vs_context.png, and
prints a compact table last.

Each group of workloads runs in its own process (a crash, a sticky CUDA error or a hang in one
group costs only that group), under a time limit derived from --deadline-s; rows are saved as they
are measured, so whatever finished is reported.

    PYTHONPATH=python python3 bench/python/bench_peers.py [--quick] [--out DIR] [--only SUBSTRING]
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bench_report import Row, error_row, group_rows, row_from_dict, write_outputs  # noqa: E402

# Sections: name -> "module:function" (run_<x>(ctx)); "ceilings" is built in.
SECTIONS = {
    "decode": "bench_dense:run_decode",
    "sweep": "bench_dense:run_sweep",
    "mla": "bench_mla:run_mla",
    "sparse": "bench_mla:run_sparse",
    "indexer": "bench_dsa:run_indexer",
    "topk": "bench_dsa:run_topk",
    "stores": "bench_stores:run_stores",
    "prefill": "bench_dense:run_prefill",
}
# Processes, in order: (sections, share of the time budget). The decode plot's sweep comes early;
# prefill (the slowest FlexAttention compiles) comes last.
PROCESSES = [
    (("ceilings", "decode"), 0.22),
    (("sweep",), 0.26),
    (("mla", "sparse"), 0.12),
    (("indexer", "topk", "stores"), 0.12),
    (("prefill",), 0.28),
]
MIN_PROCESS_S = 30.0   # every later process keeps at least this much of the budget
CHILD_MARGIN_S = 10.0  # a process stops starting measurements this long before it is killed

NOTES = [
    "attnserve: our ops through the Python bindings (nanobind, DLPack) on torch tensors, on torch's "
    "current stream; paged caches with shuffled pages; split-KV workspaces sized by the ops' own request.",
    "sdpa-flash / sdpa-cudnn: torch.nn.functional.scaled_dot_product_attention restricted to one backend. "
    "They are NOT paged: they read K/V gathered once (outside the timing) from our paged cache into "
    "contiguous [b, ctx, h_kv, d]. Grouped heads are passed as such (enable_gqa); a backend that refuses "
    "them gets K/V expanded to h_q heads (said in the row). Verify/extend rows are bottom-right causal: "
    "aten's flash op (its is_causal is bottom-right) and cuDNN with an explicit boolean mask.",
    "sdpa-flash+gather: what a paged engine pays with a non-paged kernel: the torch gather of the pages "
    "plus SDPA flash, per call.",
    "flex-paged: torch.compile'd flex_attention reading our paged cache in place (the pool viewed as one "
    "[1, h_kv, slots, d] sequence) through a BlockMask built with BlockMask.from_kv_blocks whose KV blocks "
    "are the pages of each request (block = page; pages at the causal edge are masked through a "
    "page->logical map). 'flex-gather' instead means the paged API was missing and K/V were gathered. "
    "Prefill rows use contiguous K/V with a causal block mask ('flex'). Page size 1 is not run "
    "(flex needs blocks of >= 16 keys).",
    "No same-run peer exists on this device for MLA, sparse MLA and the indexer (FlashMLA, FA3 and "
    "DeepGEMM are not installed); figures quoted from shared/ANCHORS.md were measured on another day.",
    "Correctness guard ('check'): each implementation's output on the first input set against a float32 "
    "torch reference on a few rows (rel-L2 < 2e-2 for bf16 outputs, < 6e-2 for FP8 dequantized values; "
    "top-k compares the chosen scores with torch.topk's). It catches a broken binding or setup; it is not a test.",
    "GB/s: decode/verify count K+V bytes read; prefill/extend add q read and out written; % copy divides "
    "by the measured copy rate, which counts bytes read + written. TFLOP/s count causal rows bottom-right "
    "(prefill: half the square); MLA FLOPs = 2·rows·h_q·keys·(576+512).",
]


# ---- arguments -----------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer shapes (one page size, 3 sweep points), 20 reps")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results"), help="output folder")
    p.add_argument("--only", default="", help="run only the cases whose name contains this substring")
    p.add_argument("--sections", default="", help="comma-separated sections (default: all): "
                   + ",".join(["ceilings", *SECTIONS]))
    p.add_argument("--deadline-s", type=float, default=540.0, help="total time budget in seconds")
    p.add_argument("--no-flex", action="store_true", help="skip the FlexAttention peer (its compiles are slow)")
    p.add_argument("--reps", type=int, default=0, help="timed repetitions (default 30, --quick 20)")
    p.add_argument("--smoke", action="store_true", help="tiny shapes: checks the harness itself (works on a CPU)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu only makes sense with --smoke")
    p.add_argument("--in-process", action="store_true", help="run every section in this process (debugging)")
    p.add_argument("--command", default=os.environ.get("BENCH_COMMAND", ""), help="command line to record")
    # Internal: one child process.
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    p.add_argument("--work", default="", help=argparse.SUPPRESS)
    p.add_argument("--flex-budget-s", type=float, default=0.0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def selected_sections(args) -> list[str]:
    names = ["ceilings", *SECTIONS]
    if not args.sections:
        return names
    want = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [s for s in want if s not in names]
    if unknown:
        raise SystemExit(f"unknown sections {unknown}; known: {names}")
    return [s for s in names if s in want]


# ---- files shared between the processes ------------------------------------------------------------

def rows_path(work: str) -> str:
    return os.path.join(work, "rows.jsonl")


def append_row(work: str, row: Row):
    import dataclasses

    with open(rows_path(work), "a") as f:
        f.write(json.dumps(dataclasses.asdict(row)) + "\n")
        f.flush()


def read_rows(work: str) -> list[Row]:
    rows = []
    if os.path.exists(rows_path(work)):
        with open(rows_path(work)) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        rows.append(row_from_dict(json.loads(line)))
                    except Exception:  # noqa: BLE001 - a line cut by a kill
                        pass
    return rows


def read_json(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except Exception:  # noqa: BLE001
        return {}


def write_json(path: str, d: dict):
    with open(path, "w") as f:
        json.dump(d, f, indent=1)


# ---- one process: run sections -------------------------------------------------------------------

def log_row(row: Row):
    if row.error:
        print(f"[row] {row.workload:18s} {row.shape:55s} {row.impl:20s} {row.error}", flush=True)
        return
    rate = f"{row.tflops:8.1f} TFLOP/s" if row.tflops else " " * 16
    gbs = f"{row.gbs:7.0f} GB/s" if row.gbs else " " * 12
    print(f"[row] {row.workload:18s} {row.shape:55s} {row.impl:20s} {row.time_us:10.1f} us {rate} {gbs} "
          f"{row.check or ''}", flush=True)


def run_sections(args, sections: list[str], work: str, deadline: float, flex_budget_s: float):
    """Runs the sections in this process; rows go to <work>/rows.jsonl as they come."""
    import torch

    import attnserve
    from bench_ceilings import device_info, measure_ceilings
    from bench_context import BenchConfig, BenchContext, CudaContextLost

    device = args.device
    if device == "cuda" and not (torch.cuda.is_available() and attnserve.cuda_available()):
        raise SystemExit(f"no usable GPU: torch.cuda.is_available()={torch.cuda.is_available()}, "
                         f"attnserve.cuda_available()={attnserve.cuda_available()} (built with CUDA: "
                         f"{attnserve.built_with_cuda()})")
    torch.manual_seed(1234)
    cfg = BenchConfig(device=device, quick=args.quick, smoke=args.smoke, only=args.only, flex=not args.no_flex,
                      flex_budget_s=flex_budget_s, deadline=deadline,
                      reps=args.reps or (20 if args.quick else 30))
    env_path = os.path.join(work, "env.json")
    env = read_json(env_path)
    env.update(device_info(torch, device))
    ceilings_path = os.path.join(work, "ceilings.json")
    ceilings = read_json(ceilings_path)

    def emit(row: Row):
        append_row(work, row)
        log_row(row)

    ctx = BenchContext(cfg, torch, attnserve, ceilings, emit)
    env["timing"] = ctx.timer.describe()
    write_json(env_path, env)
    for name in sections:
        started = time.monotonic()
        print(f"== section {name} ({ctx.time_left():.0f} s left)", flush=True)
        try:
            if name == "ceilings":
                ceilings.update(measure_ceilings(torch, ctx.timer, device, args.smoke))
                write_json(ceilings_path, ceilings)
                print(f"[ceilings] copy {ceilings['copy_gbs']:.0f} GB/s, bf16 GEMM {ceilings['gemm_tflops']:.1f} "
                      f"TFLOP/s", flush=True)
            else:
                module, func = SECTIONS[name].split(":")
                getattr(importlib.import_module(module), func)(ctx)
        except CudaContextLost as e:
            emit(error_row("harness", "harness", name, f"CUDA context lost, rest of this process skipped: {e}"))
            raise SystemExit(3)
        except Exception as e:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            emit(error_row("harness", "harness", name, f"section failed: {type(e).__name__}: {e}"))
        if getattr(ctx, "_flex", None) and ctx._flex[0] is not None:
            env["flex_mode"] = ctx._flex[0].mode
            write_json(env_path, env)
        print(f"== section {name} done in {time.monotonic() - started:.1f} s", flush=True)


# ---- the parent: processes, time limits, outputs ---------------------------------------------------

def child_command(args, sections, work: str, deadline_s: float, flex_budget_s: float) -> list[str]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", ",".join(sections), "--work", work,
           "--deadline-s", f"{deadline_s:.1f}", "--flex-budget-s", f"{flex_budget_s:.1f}", "--device", args.device]
    for flag in ("quick", "smoke", "no_flex"):
        if getattr(args, flag):
            cmd.append("--" + flag.replace("_", "-"))
    if args.only:
        cmd += ["--only", args.only]
    if args.reps:
        cmd += ["--reps", str(args.reps)]
    return cmd


def run_child(args, sections, work: str, timeout_s: float, flex_budget_s: float) -> str | None:
    """Runs one child process; returns None when it ended normally, else what went wrong."""
    cmd = child_command(args, sections, work, timeout_s - CHILD_MARGIN_S, flex_budget_s)
    print(f"== process {'+'.join(sections)}: limit {timeout_s:.0f} s", flush=True)
    try:
        proc = subprocess.Popen(cmd, start_new_session=True)
    except OSError as e:
        return f"could not start: {e}"
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return f"killed at its time limit ({timeout_s:.0f} s)"
    return None if rc == 0 else f"ended with exit code {rc}"


def _kill_group(proc):
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def plan_processes(sections: list[str]):
    plan = []
    for group, share in PROCESSES:
        chosen = tuple(s for s in group if s in sections)
        if chosen:
            plan.append((chosen, share))
    total = sum(share for _, share in plan) or 1.0
    return [(chosen, share / total) for chosen, share in plan]


def commit_id() -> str:
    env = os.environ.get("ATTNSERVE_COMMIT")
    if env:
        return env
    try:
        out = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except Exception:  # noqa: BLE001
        pass
    return "unknown"


def build_meta(args, work: str) -> dict:
    env = read_json(os.path.join(work, "env.json"))
    meta = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit_id(),
        "command": args.command or " ".join(shlex.quote(a) for a in ["python3", *sys.argv]),
        "mode": "smoke" if args.smoke else ("quick" if args.quick else "full"),
    }
    meta.update(env)
    meta.setdefault("gpu", "unknown")
    notes = list(NOTES)
    if env.get("flex_mode"):
        notes.append(f"FlexAttention mode in this run: {env['flex_mode']}.")
    meta["notes"] = notes
    return meta


def finish(args, work: str, meta: dict) -> dict:
    rows = read_rows(work)
    ceilings = read_json(os.path.join(work, "ceilings.json"))
    return write_outputs(args.out, meta, ceilings, rows)


def print_summary(work: str, paths: dict):
    rows = read_rows(work)
    ceilings = read_json(os.path.join(work, "ceilings.json"))
    print("\n== summary (full tables: " + ", ".join(v for k, v in paths.items() if not k.endswith("error")) + ")")
    for k, v in paths.items():
        if k.endswith("error"):
            print(f"   {v}")
    if ceilings:
        print(f"ceilings: copy {ceilings.get('copy_gbs', 0):,.0f} GB/s (read + write), "
              f"bf16 GEMM {ceilings.get('gemm_tflops', 0):,.1f} TFLOP/s")
    print(compact_table(rows))


def compact_table(rows: list[Row]) -> str:
    lines = ["| workload | shape | impl | µs | TFLOP/s | GB/s | % copy | check |", "|---|---|---|--:|--:|--:|--:|---|"]
    for workload, group in group_rows(rows):
        for r in group:
            if r.error:
                if r.error.startswith("no same-run peer"):
                    continue
                lines.append(f"| {workload} | {r.shape} | {r.impl} | | | | | {r.error[:70]} |")
                continue
            tf = f"{r.tflops:.1f}" if r.tflops else ""
            gb = f"{r.gbs:.0f}" if r.gbs else ""
            pc = f"{r.pct_of_copy:.0f}" if r.pct_of_copy else ""
            lines.append(f"| {workload} | {r.shape} | {r.impl} | {r.time_us:.1f} | {tf} | {gb} | {pc} | "
                         f"{r.check or ''} |")
    return "\n".join(lines)


def parent(args) -> int:
    start = time.monotonic()
    end = start + args.deadline_s
    sections = selected_sections(args)
    work = tempfile.mkdtemp(prefix="attnserve_bench_")
    print(f"== attnserve peer benchmark: sections {','.join(sections)}; budget {args.deadline_s:.0f} s; "
          f"work files in {work}", flush=True)
    if args.in_process:
        try:
            run_sections(args, sections, work, end - CHILD_MARGIN_S, args.flex_budget_s or 0.6 * args.deadline_s)
        except SystemExit as e:
            if e.code not in (0, None):
                append_row(work, error_row("harness", "harness", ",".join(sections), f"stopped: {e.code}"))
        paths = finish(args, work, build_meta(args, work))
        print_summary(work, paths)
        return 0
    plan = plan_processes(sections)
    for i, (group, share) in enumerate(plan):
        remaining = end - time.monotonic()
        later = MIN_PROCESS_S * (len(plan) - i - 1)
        # Its share of what is left (a process that ends early leaves its time to the later ones),
        # never eating into the minimum kept for each later process.
        share_left = share / (sum(s for _, s in plan[i:]) or 1.0)
        timeout = min(remaining - later, max(MIN_PROCESS_S, remaining * share_left))
        if timeout < 20:
            for s in group:
                append_row(work, error_row("harness", "harness", s, "skipped: no time left in the budget"))
            continue
        problem = run_child(args, group, work, timeout, flex_budget_s=0.7 * timeout)
        if problem:
            print(f"== process {'+'.join(group)} {problem}", flush=True)
            append_row(work, error_row("harness", "harness", "+".join(group), f"process {problem}"))
        finish(args, work, build_meta(args, work))  # outputs after every process: a later kill loses nothing
    paths = finish(args, work, build_meta(args, work))
    print_summary(work, paths)
    return 0


def child(args) -> int:
    sections = [s for s in args.child.split(",") if s]
    deadline = time.monotonic() + args.deadline_s
    run_sections(args, sections, args.work, deadline, args.flex_budget_s)
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cpu" and not args.smoke:
        print("note: --device cpu without --smoke runs full-size shapes on the CPU oracle (very slow)", flush=True)
    return child(args) if args.child else parent(args)


if __name__ == "__main__":
    sys.exit(main())
