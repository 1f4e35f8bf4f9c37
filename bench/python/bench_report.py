"""Result rows of the peer benchmark and their JSON / Markdown renderings (pure Python, no torch)."""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
import re
from dataclasses import dataclass, field

from bench_counts import rates

# Order of the workload sections in the Markdown report (others follow in order of appearance).
WORKLOAD_ORDER = [
    "decode", "decode sweep", "verify", "prefill", "extend", "mla decode", "sparse mla decode",
    "sparse mla prefill", "indexer", "top-k", "store",
]


@dataclass
class Row:
    """One measurement (or one failure) of one implementation on one shape."""
    workload: str                 # section: "decode", "prefill", "top-k", ...
    impl: str                     # "attnserve", "sdpa-flash", "sdpa-cudnn", "flex-paged", "torch.topk", ...
    shape: str                    # human-readable shape, e.g. "b 64 x 8K, h 32/8, d 128, page 16"
    time_us: float | None = None
    tflops: float | None = None
    gbs: float | None = None
    pct_of_copy: float | None = None
    pct_of_gemm: float | None = None
    check: str | None = None      # e.g. "rel-L2 2.1e-03 ok" (a guard against a broken setup, not a test)
    check_value: float | None = None
    check_ok: bool | None = None
    note: str = ""
    error: str | None = None      # set when this implementation failed or was skipped
    params: dict = field(default_factory=dict)  # numbers for plots and scripts (ctx, page, b, ...)


def make_row(workload: str, impl: str, shape: str, time_us: float | None, flops: float | None = None,
             bytes_: float | None = None, ceilings: dict | None = None, **extra) -> Row:
    """A measured row: rates and percentages computed from the time and the counts."""
    c = ceilings or {}
    r = rates(time_us, flops, bytes_, c.get("copy_gbs"), c.get("gemm_tflops"))
    return Row(workload=workload, impl=impl, shape=shape, time_us=time_us, **r, **extra)


def error_row(workload: str, impl: str, shape: str, error: str, **extra) -> Row:
    return Row(workload=workload, impl=impl, shape=shape, error=_one_line(error), **extra)


def row_from_dict(d: dict) -> Row:
    names = {f.name for f in dataclasses.fields(Row)}
    return Row(**{k: v for k, v in d.items() if k in names})


def format_check(value: float | None, tol: float, what: str = "rel-L2") -> tuple[str, bool | None]:
    """'rel-L2 1.2e-03 ok' / '... FAIL' (NaN fails)."""
    if value is None:
        return "-", None
    ok = bool(value == value and value < tol)
    return f"{what} {value:.1e} {'ok' if ok else 'FAIL'}", ok


# ---- file names -------------------------------------------------------------------------------

def gpu_slug(name: str | None) -> str:
    """'NVIDIA H200' -> 'h200' (letters, digits and '-' only)."""
    s = (name or "").lower().replace("nvidia", " ")
    s = re.sub(r"[^a-z0-9]+", "-", s).strip("-")
    return s or "gpu"


def safe_token(s: str | None, fallback: str = "unknown") -> str:
    t = re.sub(r"[^A-Za-z0-9._-]+", "-", (s or "").strip()).strip("-")
    return t or fallback


def output_stem(meta: dict) -> str:
    """bench_<date>_<gpu>_<commit>"""
    date = meta.get("date") or _dt.date.today().isoformat()
    return f"bench_{safe_token(date[:10])}_{gpu_slug(meta.get('gpu'))}_{safe_token(meta.get('commit'))}"


# ---- JSON -------------------------------------------------------------------------------------

def _finite_or_none(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def to_json(meta: dict, ceilings: dict, rows: list[Row]) -> str:
    doc = {
        "meta": meta,
        "ceilings": {k: _finite_or_none(v) for k, v in (ceilings or {}).items()},
        "rows": [{k: _finite_or_none(v) for k, v in dataclasses.asdict(r).items()} for r in rows],
    }
    return json.dumps(doc, indent=1, sort_keys=False)


# ---- Markdown ---------------------------------------------------------------------------------

def _one_line(s: str, limit: int = 160) -> str:
    s = " ".join(str(s).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _md_escape(s: str) -> str:
    return str(s).replace("|", "\\|")


def _fmt(x: float | None, digits: int) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return ""
    return f"{x:,.{digits}f}"


def _fmt_time(us: float | None) -> str:
    if us is None:
        return ""
    return f"{us:,.1f}" if us < 10000 else f"{us:,.0f}"


def group_rows(rows: list[Row]) -> list[tuple[str, list[Row]]]:
    """Rows by workload, sections in WORKLOAD_ORDER then in order of appearance; inside a section the
    rows of one shape stay together (in the order the shapes first appeared), in measurement order."""
    groups: dict[str, list[Row]] = {}
    for r in rows:
        groups.setdefault(r.workload, []).append(r)
    known = [w for w in WORKLOAD_ORDER if w in groups]
    others = [w for w in groups if w not in WORKLOAD_ORDER]
    return [(w, _by_shape(groups[w])) for w in known + others]


def _by_shape(rows: list[Row]) -> list[Row]:
    first: dict[str, int] = {}
    for i, r in enumerate(rows):
        first.setdefault(r.shape, i)
    return [r for _, r in sorted(enumerate(rows), key=lambda ir: (first[ir[1].shape], ir[0]))]


def markdown_table(rows: list[Row]) -> str:
    head = ("| shape | impl | time (µs) | TFLOP/s | GB/s | % copy | % GEMM | check | note |\n"
            "|---|---|--:|--:|--:|--:|--:|---|---|")
    lines = [head]
    for r in rows:
        if r.error:
            note = "**failed**: " + r.error if not r.error.startswith("skipped") else r.error
            if r.note:
                note = r.note + "; " + note
            cells = [r.shape, r.impl, "", "", "", "", "", r.check or "", note]
        else:
            cells = [r.shape, r.impl, _fmt_time(r.time_us), _fmt(r.tflops, 1), _fmt(r.gbs, 0),
                     _fmt(r.pct_of_copy, 1), _fmt(r.pct_of_gemm, 1), r.check or "", r.note]
        lines.append("| " + " | ".join(_md_escape(c) for c in cells) + " |")
    return "\n".join(lines)


def _header_lines(meta: dict) -> list[str]:
    keys = [("gpu", "GPU"), ("date", "date"), ("commit", "commit"), ("command", "command"),
            ("torch", "torch"), ("triton", "triton"), ("cuda", "CUDA (torch)"), ("cudnn", "cuDNN"),
            ("timing", "timing")]
    out = []
    for k, label in keys:
        v = meta.get(k)
        if v not in (None, ""):
            out.append(f"- {label}: `{v}`" if k == "command" else f"- {label}: {v}")
    return out


def to_markdown(meta: dict, ceilings: dict, rows: list[Row]) -> str:
    c = ceilings or {}
    parts = ["# attnserve against its peers, same run", ""]
    parts += _header_lines(meta)
    parts += ["", "## Ceilings (measured in this run)", "",
              "| ceiling | measured |", "|---|--:|",
              f"| device-to-device copy, {c.get('copy_desc', '2 GiB')} (bytes read + written) | "
              f"{_fmt(c.get('copy_gbs'), 0) or 'n/a'} GB/s |",
              f"| bf16 GEMM {c.get('gemm_desc', '8192³')} (torch.matmul) | {_fmt(c.get('gemm_tflops'), 1) or 'n/a'} TFLOP/s |",
              ""]
    notes = meta.get("notes") or []
    if notes:
        parts += ["## How the peers ran", ""] + [f"- {n}" for n in notes] + [""]
    for workload, group in group_rows(rows):
        parts += [f"## {workload}", "", markdown_table(group), ""]
    failed = [r for r in rows if r.check_ok is False]
    if failed:
        parts += ["## Correctness guard failures", ""]
        parts += [f"- {r.workload} / {r.shape} / {r.impl}: {r.check}" for r in failed] + [""]
    return "\n".join(parts)


# ---- files ------------------------------------------------------------------------------------

def write_outputs(out_dir: str, meta: dict, ceilings: dict, rows: list[Row], plot: bool = True) -> dict:
    """Writes <stem>.json, <stem>.md and decode_bandwidth_vs_context.png; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    stem = output_stem(meta)
    paths = {"json": os.path.join(out_dir, stem + ".json"), "md": os.path.join(out_dir, stem + ".md")}
    with open(paths["json"], "w") as f:
        f.write(to_json(meta, ceilings, rows))
    with open(paths["md"], "w") as f:
        f.write(to_markdown(meta, ceilings, rows))
    if plot:
        try:
            from bench_plot import plot_decode_sweep
            png = plot_decode_sweep(rows, ceilings, os.path.join(out_dir, "decode_bandwidth_vs_context.png"),
                                    title_suffix=meta.get("gpu") or "")
            if png:
                paths["png"] = png
        except Exception as e:  # matplotlib missing or failing: the tables are still written
            paths["png_error"] = f"plot skipped: {type(e).__name__}: {e}"
    return paths
