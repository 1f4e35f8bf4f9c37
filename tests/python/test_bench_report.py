"""The peer benchmark's pure-Python parts (bench/python): FLOP/byte counts, the JSON / Markdown report,
the decode plot (skipped without matplotlib) and the process plan. The paged block mask is checked
too where torch is installed (it is not in CI)."""
import importlib.util
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "python"))

import bench_counts as C  # noqa: E402
import bench_report as R  # noqa: E402
from bench_timing import rotation_sets  # noqa: E402

HAVE_MPL = importlib.util.find_spec("matplotlib") is not None
HAVE_TORCH = importlib.util.find_spec("torch") is not None
CEILINGS = {"copy_gbs": 4200.0, "gemm_tflops": 780.0, "copy_desc": "2 GiB", "gemm_desc": "8192³"}
META = {"gpu": "NVIDIA H200", "date": "2026-11-30T10:00:00Z", "commit": "abc1234",
        "command": "scripts/bench_peers.sh", "torch": "2.11.0", "notes": ["peers are not paged"]}


def synthetic_rows():
    rows = []
    for ctx, ours, flash in [(1024, 3100.0, 2500.0), (4096, 3800.0, 2900.0), (16384, 4000.0, 3100.0)]:
        params = {"ctx": ctx, "b": 64, "plot_title": "b 64, h_q 32, h_kv 8, d 128, page 16, bf16"}
        kv = C.kv_bytes(64, ctx, 8, 128)
        rows.append(R.make_row("decode sweep", "attnserve", f"b 64 × {ctx // 1024}K", kv / ours * 1e-3, None, kv,
                               CEILINGS, check="rel-L2 1.0e-03 ok", check_value=1e-3, check_ok=True, params=params))
        rows.append(R.make_row("decode sweep", "sdpa-flash", f"b 64 × {ctx // 1024}K", kv / flash * 1e-3, None, kv,
                               CEILINGS, params=params))
    rows.append(R.error_row("decode sweep", "flex-paged", "b 64 × 16K", "skipped: --no-flex", params={"ctx": 16384}))
    rows.append(R.make_row("prefill", "attnserve", "b 1 × 8K causal", 3610.0,
                           C.attention_flops(C.causal_pairs(1, 8192, 8192), 32, 128), None, CEILINGS,
                           check="rel-L2 9.0e-02 FAIL", check_value=9e-2, check_ok=False))
    rows.append(R.error_row("top-k", "torch.topk", "top-2048 of 64K × 128 rows", "RuntimeError: boom | pipe"))
    rows.append(R.make_row("decode", "attnserve", "b 64 × 8K, page 16", 545.0, None, C.kv_bytes(64, 8192, 8, 128),
                           CEILINGS, check="rel-L2 2.0e-03 ok"))
    return rows


# ---- counts --------------------------------------------------------------------------------------

def test_counts_match_the_notes():
    assert C.kv_bytes(64, 8192, 8, 128) == pytest.approx(2.147e9, rel=1e-3)             # decode b64 x 8K
    prefill = C.attention_flops(C.causal_pairs(1, 8192, 8192), 32, 128)
    assert prefill == pytest.approx(550e9, rel=2e-3)                                    # half the square
    assert C.mla_flops(128, 128, 8192) == pytest.approx(292e9, rel=2e-3)                # MLA h_q 128
    assert C.mla_cache_bytes(128, 8192) == pytest.approx(1.21e9, rel=1e-2)
    assert C.sparse_mla_bytes(128, 16, 2048, fp8=True) == 128 * 2048 * 656 + 128 * 16 * (576 + 512) * 2
    assert C.indexer_paged_bytes(128, 32768, 64) == pytest.approx(553e6 + 16.8e6, rel=1e-2)
    assert C.topk_bytes(128, 65536) == pytest.approx(33.5e6, rel=1e-2)
    assert C.store_kv_bytes(131072, 8, 128) == pytest.approx(1.07e9, rel=1e-2)


def test_causal_pairs_align_bottom_right():
    assert C.causal_pairs(2, 1, 100) == 200                       # decode: every key
    assert C.causal_pairs(1, 4, 10) == 7 + 8 + 9 + 10             # verify rows see ctx - q_len + i + 1 keys
    assert C.causal_pairs(1, 5, 5) == 15                           # prefill: the triangle
    assert C.causal_pairs(3, 4, 10, causal=False) == 120


def test_rates_and_percentages_of_the_ceilings():
    r = C.rates(500.0, 1e12, 2e9, 4000.0, 800.0)
    assert r["tflops"] == pytest.approx(2000.0) and r["pct_of_gemm"] == pytest.approx(250.0)
    assert r["gbs"] == pytest.approx(4000.0) and r["pct_of_copy"] == pytest.approx(100.0)
    assert C.rates(None, 1e12, 2e9, 4000.0, 800.0)["gbs"] is None
    assert C.rates(10.0, None, 1e6, None, None) == {"tflops": None, "gbs": 100.0, "pct_of_copy": None,
                                                   "pct_of_gemm": None}


def test_rotation_sets_exceed_the_l2():
    l2 = 60 << 20
    assert rotation_sets(1 << 20, l2) * (1 << 20) >= 2 * l2 or rotation_sets(1 << 20, l2) == 256
    assert rotation_sets(600 << 20, l2) == 3                       # big sets: the minimum of three
    assert rotation_sets(0, l2) == 3


# ---- report ---------------------------------------------------------------------------------------

def test_format_check():
    assert R.format_check(1.2e-3, 2e-2) == ("rel-L2 1.2e-03 ok", True)
    assert R.format_check(float("nan"), 2e-2)[1] is False
    assert R.format_check(None, 2e-2) == ("-", None)


def test_output_stem_names_date_gpu_commit():
    assert R.output_stem(META) == "bench_2026-11-30_h200_abc1234"
    assert R.gpu_slug("NVIDIA H100 80GB HBM3") == "h100-80gb-hbm3"
    assert R.output_stem({"gpu": None, "commit": "a b/c", "date": "2026-01-02"}) == "bench_2026-01-02_gpu_a-b-c"


def test_markdown_sections_ceilings_and_failures():
    md = R.to_markdown(META, CEILINGS, synthetic_rows())
    assert "NVIDIA H200" in md and "abc1234" in md and "`scripts/bench_peers.sh`" in md
    assert "| device-to-device copy, 2 GiB (bytes read + written) | 4,200 GB/s |" in md
    assert "780.0 TFLOP/s" in md
    order = [md.index(f"## {w}\n") for w in ("decode", "decode sweep", "prefill", "top-k")]
    assert order == sorted(order)                                   # WORKLOAD_ORDER, not appearance
    assert "**failed**: RuntimeError: boom \\| pipe" in md           # pipes escaped inside cells
    assert "skipped: --no-flex" in md and "**failed**: skipped" not in md
    assert "## Correctness guard failures" in md and "rel-L2 9.0e-02 FAIL" in md
    assert "- peers are not paged" in md
    # Every table row has the header's number of cells.
    for line in md.splitlines():
        if line.startswith("| b 64") or line.startswith("| top-"):
            assert line.replace("\\|", "").count("|") == 10, line


def test_json_holds_every_row_and_no_nan():
    rows = synthetic_rows()
    rows.append(R.Row("decode", "x", "s", time_us=float("nan")))
    doc = json.loads(R.to_json(META, CEILINGS, rows))
    assert len(doc["rows"]) == len(rows)
    assert doc["rows"][-1]["time_us"] is None
    first = doc["rows"][0]
    for key in ("workload", "impl", "shape", "time_us", "tflops", "gbs", "pct_of_copy", "pct_of_gemm", "check"):
        assert key in first
    assert first["pct_of_copy"] == pytest.approx(3100.0 / 4200.0 * 100.0)
    assert R.row_from_dict(first).gbs == pytest.approx(3100.0)


def test_write_outputs(tmp_path):
    paths = R.write_outputs(str(tmp_path), META, CEILINGS, synthetic_rows())
    assert os.path.basename(paths["json"]) == "bench_2026-11-30_h200_abc1234.json"
    assert open(paths["md"]).read().startswith("# attnserve against its peers")
    if HAVE_MPL:
        assert os.path.basename(paths["png"]) == "decode_bandwidth_vs_context.png"
    else:
        assert "png" not in paths and "png_error" in paths


# ---- plot -----------------------------------------------------------------------------------------

def test_sweep_series_sorted_and_errors_dropped():
    from bench_plot import sweep_series

    rows = list(reversed(synthetic_rows()))
    s = sweep_series(rows)
    assert set(s) == {"attnserve", "sdpa-flash"}
    assert [p[0] for p in s["attnserve"]] == [1024, 4096, 16384]
    assert s["attnserve"][-1][1] == pytest.approx(4000.0)


@pytest.mark.skipif(not HAVE_MPL, reason="matplotlib not installed")
def test_plot_writes_a_png(tmp_path):
    from bench_plot import plot_decode_sweep

    path = plot_decode_sweep(synthetic_rows(), CEILINGS, str(tmp_path / "p.png"), title_suffix="NVIDIA H200")
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(path) > 5000
    assert plot_decode_sweep([r for r in synthetic_rows() if r.workload != "decode sweep"], CEILINGS,
                             str(tmp_path / "none.png")) is None


# ---- the harness' plan ----------------------------------------------------------------------------

def test_process_plan_and_compact_table():
    import bench_peers as P

    plan = P.plan_processes(["ceilings", *P.SECTIONS])
    assert sorted(s for group, _ in plan for s in group) == sorted(["ceilings", *P.SECTIONS])
    assert plan[0][0][0] == "ceilings"                              # the ceilings come first
    assert sum(share for _, share in plan) == pytest.approx(1.0)
    only = P.plan_processes(["topk"])
    assert only == [(("topk",), pytest.approx(1.0))]
    table = P.compact_table(synthetic_rows())
    assert table.splitlines()[0].startswith("| workload |")
    assert "| decode sweep | b 64 × 16K | attnserve |" in table
    args = P.parse_args(["--quick", "--only", "decode", "--out", "/tmp/x"])
    cmd = P.child_command(args, ("decode",), "/tmp/w", 100.0, 50.0)
    assert "--quick" in cmd and cmd[cmd.index("--only") + 1] == "decode" and "--child" in cmd


# ---- the paged block mask (torch only) --------------------------------------------------------------

@pytest.mark.skipif(not HAVE_TORCH, reason="torch not installed")
@pytest.mark.parametrize("ctx,q_len,page", [(64, 1, 16), (70, 4, 16), (300, 200, 16), (256, 256, 64)])
def test_paged_block_mask_sees_exactly_the_causal_keys(ctx, q_len, page):
    import torch

    fa = pytest.importorskip("torch.nn.attention.flex_attention")
    if not hasattr(fa.BlockMask, "from_kv_blocks"):
        pytest.skip("no BlockMask.from_kv_blocks")
    from bench_flex import Q_BLOCK, paged_block_mask

    b = 3
    max_pages = -(-ctx // page)
    num_pages = b * max_pages + 5
    page_table = torch.randperm(num_pages)[: b * max_pages].to(torch.int32).view(b, max_pages)
    mask = paged_block_mask(torch, fa.BlockMask, page_table, ctx, q_len, page, num_pages)
    for r in range(b):
        for qb in range(-(-q_len // Q_BLOCK)):
            full = mask.full_kv_indices[r, 0, qb, : int(mask.full_kv_num_blocks[r, 0, qb])].tolist()
            part = mask.kv_indices[r, 0, qb, : int(mask.kv_num_blocks[r, 0, qb])].tolist()
            assert not set(full) & set(part)
            for i in range(qb * Q_BLOCK, min(q_len, (qb + 1) * Q_BLOCK)):
                pos = ctx - q_len + i
                seen = set()
                for pg in full:
                    seen |= {pg * page + o for o in range(page)}
                for pg in part:
                    for o in range(page):
                        slot = torch.tensor(pg * page + o)
                        if bool(mask.mask_mod(torch.tensor(r), torch.tensor(0), torch.tensor(i), slot)):
                            seen.add(pg * page + o)
                logical = {int(page_table[r, j // page]) * page + j % page for j in range(pos + 1)}
                assert seen == logical, (r, i)


# ---- the event timer, on a fake torch.cuda -----------------------------------------------------------

class _FakeCuda:
    """Records the order of calls; each event's time is the number of calls recorded before it."""

    def __init__(self):
        self.log = []

    def synchronize(self):
        self.log.append("sync")

    def _sleep(self, cycles):
        self.log.append(("sleep", cycles))

    def Event(self, enable_timing=False):  # noqa: N802 - torch's name
        cuda = self

        class _Event:
            def record(self):
                self.t = len(cuda.log)
                cuda.log.append("record")

            def elapsed_time(self, end):
                return float(end.t - self.t)  # "ms"

        return _Event()


class _FakeTorch:
    def __init__(self):
        self.cuda = _FakeCuda()


def test_event_timer_spins_records_and_takes_the_median():
    from bench_timing import Timer

    torch = _FakeTorch()
    calls = []
    timer = Timer(torch, "cuda", warmup=2, reps=5)
    assert timer.spin and "spin" in timer.describe()

    def fn(i):
        calls.append(i)
        torch.cuda.log.append(("fn", i))

    us = timer.median_us(fn, n_sets=3)
    # Each rep is sleep, record, fn, record: the events are 2 log entries apart -> 2 "ms".
    assert us == pytest.approx(2000.0)
    assert calls[:2] == [0, 1]                                  # warm-up over the sets
    assert set(calls) == {0, 1, 2}                              # every set used
    assert sum(1 for e in torch.cuda.log if isinstance(e, tuple) and e[0] == "sleep") == 5


def test_rows_of_one_shape_stay_together():
    rows = [R.Row("decode", "attnserve", "A"), R.Row("decode", "attnserve", "B"), R.Row("decode", "flex", "A"),
            R.Row("decode", "flex", "B"), R.Row("store", "attnserve", "S")]
    (w1, g1), (w2, g2) = R.group_rows(rows)
    assert (w1, w2) == ("decode", "store")
    assert [(r.shape, r.impl) for r in g1] == [("A", "attnserve"), ("A", "flex"), ("B", "attnserve"), ("B", "flex")]
