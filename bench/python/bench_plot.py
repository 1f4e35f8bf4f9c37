"""The decode plot: GB/s of K+V read against context length, one line per implementation, with the
measured copy ceiling as a dashed line. matplotlib (Agg backend) is imported only when plotting."""
from __future__ import annotations

SWEEP_WORKLOAD = "decode sweep"

# Stable colours / markers per implementation (others get matplotlib's defaults).
STYLE = {
    "attnserve": ("tab:red", "o"),
    "sdpa-flash": ("tab:blue", "s"),
    "sdpa-cudnn": ("tab:green", "^"),
    "flex-paged": ("tab:purple", "D"),
    "flex-gather": ("tab:purple", "D"),
}


def sweep_series(rows) -> dict[str, list[tuple[int, float]]]:
    """{impl: [(ctx, GB/s), ...] sorted by ctx} from the measured decode-sweep rows."""
    series: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        if r.workload != SWEEP_WORKLOAD or r.error or not r.gbs:
            continue
        ctx = (r.params or {}).get("ctx")
        if ctx is None:
            continue
        series.setdefault(r.impl, []).append((int(ctx), float(r.gbs)))
    return {impl: sorted(points) for impl, points in series.items()}


def _context_label(ctx: int) -> str:
    return f"{ctx // 1024}K" if ctx % 1024 == 0 else str(ctx)


def plot_decode_sweep(rows, ceilings: dict | None, path: str, title_suffix: str = "") -> str | None:
    """Writes the PNG and returns its path, or None when there is no sweep data."""
    series = sweep_series(rows)
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.6), dpi=120)
    all_ctx: set[int] = set()
    for impl, points in series.items():
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        all_ctx.update(xs)
        color, marker = STYLE.get(impl, (None, "o"))
        ax.plot(xs, ys, marker=marker, color=color, linewidth=1.8, label=impl)
    copy_gbs = (ceilings or {}).get("copy_gbs")
    if copy_gbs:
        ax.axhline(copy_gbs, color="gray", linestyle="--", linewidth=1.2,
                   label=f"device copy ceiling ({copy_gbs:,.0f} GB/s)")
    ticks = sorted(all_ctx)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks)
    ax.set_xticklabels([_context_label(t) for t in ticks])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.set_xlabel("context length (keys per request)")
    ax.set_ylabel("GB/s (K+V bytes read / time)")
    title = "Paged decode bandwidth vs context"
    shape = _sweep_shape(rows)
    if shape:
        title += f"\n{shape}"
    if title_suffix:
        title += f" — {title_suffix}"
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _sweep_shape(rows) -> str:
    for r in rows:
        if r.workload == SWEEP_WORKLOAD and (r.params or {}).get("plot_title"):
            return r.params["plot_title"]
    return ""
