"""Dense paged attention workloads (GQA, d 128): decode at page sizes 1/16/64, decode at h_q 16,
target verify, the decode-vs-context sweep, prefill and extend. attnserve reads its paged cache; the
SDPA peers read K/V gathered contiguous out of it once (they are not paged); FlexAttention reads the
paged cache through a paged block mask (bench_flex.py)."""
from __future__ import annotations

from dataclasses import dataclass

from bench_context import BenchContext, Workspace, rel_l2
from bench_counts import attention_flops, causal_pairs, kv_bytes, q_out_bytes
from bench_inputs import cu_seqlens, gather_contiguous, make_paged_kv, random_sets, request_kv
from bench_reference import attention_rows
from bench_sdpa import SdpaRunner, available_backends, expand_heads

SDPA_NOTE = "contiguous K/V (not paged)"


@dataclass
class DenseCase:
    workload: str            # "decode", "decode sweep", "verify", "prefill", "extend"
    b: int
    ctx: int                 # keys per request (prefix + new rows)
    q_len: int               # query rows per request
    page: int
    h_q: int = 32
    h_kv: int = 8
    d: int = 128
    sdpa: bool = True        # run the SDPA peers on this shape
    flex: str = "paged"      # "paged" | "contiguous" | "" (no FlexAttention)
    sdpa_gather: bool = False  # also time "gather the pages, then SDPA flash" per call

    @property
    def name(self) -> str:
        return (f"{self.workload} b{self.b} ctx{self.ctx} q{self.q_len} hq{self.h_q} hkv{self.h_kv} "
                f"d{self.d} page{self.page}")

    @property
    def shape(self) -> str:
        heads = f"h {self.h_q}/{self.h_kv}, d {self.d}"
        if self.workload == "prefill":
            return f"b {self.b} × {_k(self.ctx)} causal, {heads}, page {self.page}"
        if self.workload == "extend":
            return (f"b {self.b}, {_k(self.ctx - self.q_len)} prefix + {_k(self.q_len)} new, {heads}, "
                    f"page {self.page}")
        if self.workload == "verify":
            return f"b {self.b} × {_k(self.ctx)}, {self.q_len} draft tokens, {heads}, page {self.page}"
        return f"b {self.b} × {_k(self.ctx)}, {heads}, page {self.page}"

    def params(self) -> dict:
        p = {"b": self.b, "ctx": self.ctx, "q_len": self.q_len, "page": self.page, "h_q": self.h_q,
             "h_kv": self.h_kv, "d": self.d}
        if self.workload == "decode sweep":
            p["plot_title"] = f"b {self.b}, h_q {self.h_q}, h_kv {self.h_kv}, d {self.d}, page {self.page}, bf16"
        return p


def _k(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


# ---- the cases ----------------------------------------------------------------------------------

def decode_cases(quick: bool, smoke: bool) -> list[DenseCase]:
    if smoke:
        return [DenseCase("decode", 2, 256, 1, 16, sdpa_gather=True), DenseCase("decode", 2, 256, 1, 1, sdpa=False, flex=""),
                DenseCase("decode", 2, 256, 1, 16, h_q=16, h_kv=2), DenseCase("verify", 2, 256, 4, 16)]
    pages = (16,) if quick else (1, 16, 64)
    cases = []
    for page in pages:
        # The SDPA peers read the same contiguous K/V whatever our page size: run them once (page 16).
        cases.append(DenseCase("decode", 64, 8192, 1, page, sdpa=(page == 16), sdpa_gather=(page == 16),
                               flex="paged" if page >= 16 else ""))
    cases.append(DenseCase("decode", 128, 4096, 1, 16, h_q=16, h_kv=2))
    if not quick:
        cases += [DenseCase("decode", 128, 4096, 1, p, h_q=16, h_kv=2, sdpa=False, flex="") for p in (1, 64)]
    cases.append(DenseCase("verify", 64, 4096, 4, 16))
    return cases


def sweep_cases(quick: bool, smoke: bool) -> list[DenseCase]:
    if smoke:
        return [DenseCase("decode sweep", 2, c, 1, 16) for c in (128, 256)]
    contexts = (1024, 4096, 16384) if quick else (1024, 2048, 4096, 8192, 16384)
    return [DenseCase("decode sweep", 64, c, 1, 16) for c in contexts]


def prefill_cases(quick: bool, smoke: bool) -> list[DenseCase]:
    if smoke:
        return [DenseCase("prefill", 1, 128, 128, 16, flex="contiguous"),
                DenseCase("extend", 2, 512, 256, 16)]
    return [DenseCase("prefill", 1, 8192, 8192, 16, flex="contiguous"),
            DenseCase("prefill", 4, 4096, 4096, 16, flex="contiguous"),
            DenseCase("extend", 8, 5120, 1024, 16)]


# ---- one case -------------------------------------------------------------------------------------

class DenseProblem:
    """Inputs of one case on the device, plus the float32 reference of a few rows."""

    def __init__(self, ctx: BenchContext, case: DenseCase):
        torch, dev = ctx.torch, ctx.device
        self.case = case
        self.dtype = torch.bfloat16
        self.kv = make_paged_kv(torch, dev, case.b, case.ctx, case.h_kv, case.d, case.page, self.dtype)
        self.total_q = case.b * case.q_len
        q_bytes = self.total_q * case.h_q * case.d * 2
        self.n_sets = ctx.sets_for(q_bytes)
        self.q_sets = random_sets(torch, self.n_sets, (self.total_q, case.h_q, case.d), self.dtype, dev)
        self.out = torch.empty(self.total_q, case.h_q, case.d, dtype=self.dtype, device=dev)
        self.lse = torch.empty(self.total_q, case.h_q, dtype=torch.float32, device=dev)
        self.cu = cu_seqlens(torch, case.b, case.q_len, dev)
        self.scale = case.d ** -0.5
        self.check_rows, self.ref = self._reference(torch)

    def _reference(self, torch):
        c = self.case
        requests = [0] if c.b == 1 else [0, c.b - 1]
        rows = list(range(c.q_len)) if c.q_len <= 64 else list(range(32)) + list(range(c.q_len - 32, c.q_len))
        ids, refs = [], []
        for r in requests:
            k, v = request_kv(self.kv, r)
            q_ids = [r * c.q_len + i for i in rows]
            positions = [c.ctx - c.q_len + i for i in rows]
            refs.append(attention_rows(torch, self.q_sets[0][q_ids], k, v, positions, self.scale))
            ids += q_ids
        return torch.tensor(ids, device=self.out.device), torch.cat(refs)

    def check_flat(self, out_flat):
        """rel-L2 of [total_q, h_q, d] output rows against the reference."""
        return rel_l2(out_flat[self.check_rows], self.ref)

    def check_bhsd(self, out4):
        """The same for a peer's [b, h_q, q_len, d] output."""
        c = self.case
        return self.check_flat(out4.transpose(1, 2).reshape(self.total_q, c.h_q, c.d))

    def q4(self, i: int):
        c = self.case
        return self.q_sets[i].view(c.b, c.q_len, c.h_q, c.d).transpose(1, 2)

    def flops(self) -> float:
        c = self.case
        return attention_flops(causal_pairs(c.b, c.q_len, c.ctx), c.h_q, c.d)

    def bytes(self) -> float:
        """Decode / verify: K+V read. Prefill / extend: K+V plus q read and out written."""
        c = self.case
        b = kv_bytes(c.b, c.ctx, c.h_kv, c.d)
        if c.workload in ("prefill", "extend"):
            b += q_out_bytes(self.total_q, c.h_q, c.d)
        return b


def contiguous_kv(p: DenseProblem):
    """K/V gathered out of the pages once, as [b, h_kv, ctx, d] views of [b, ctx, h_kv, d] tensors."""
    return (gather_contiguous(p.kv, p.kv.k_cache).transpose(1, 2),
            gather_contiguous(p.kv, p.kv.v_cache).transpose(1, 2))


def run_case(ctx: BenchContext, case: DenseCase):
    """attnserve and the SDPA peers on one shape (FlexAttention runs in a later pass: its compiles are
    slow, so a tight budget costs flex rows, not ours)."""
    p = DenseProblem(ctx, case)
    common = dict(flops=p.flops(), bytes_=p.bytes(), params=case.params())
    run_ours(ctx, p, common)
    if case.sdpa:
        contiguous = contiguous_kv(p)
        for impl, reason in available_backends(ctx.torch).items():
            if reason:
                ctx.skip(case.workload, impl, case.shape, f"skipped: {reason}", params=case.params())
            else:
                run_sdpa(ctx, p, impl, contiguous, common)
        del contiguous
    if case.sdpa_gather:
        run_sdpa_gather(ctx, p, common)


def run_flex_case(ctx: BenchContext, case: DenseCase):
    """The FlexAttention peer on one shape (skipped without building anything when it cannot run)."""
    reason = ctx.flex_allowed()
    if not reason and case.flex == "paged" and case.page < 16:
        reason = "skipped: FlexAttention needs KV blocks (pages) of >= 16 keys"
    peer = None
    if not reason:
        peer, reason = flex_peer(ctx)
    impl = "flex" if case.flex == "contiguous" else (peer.impl if peer else "flex-paged")
    if reason:
        ctx.skip(case.workload, impl, case.shape, reason, params=case.params())
        return
    p = DenseProblem(ctx, case)
    common = dict(flops=p.flops(), bytes_=p.bytes(), params=case.params())
    try:
        if case.flex == "paged" and peer.paged:
            runner = peer.paged_runner(p.kv, case.q_len, p.scale)
            note = "paged block mask (block = page)"
        else:
            k4, v4 = contiguous_kv(p)
            runner = peer.causal_runner(k4, v4, case.q_len, p.scale)
            note = "contiguous K/V, causal block mask"
    except Exception as e:  # noqa: BLE001
        ctx.skip(case.workload, impl, case.shape, f"block mask failed: {type(e).__name__}: {e}", params=case.params())
        return
    ctx.run_impl(case.workload, impl, case.shape, lambda i: runner(p.q4(i)), p.n_sets, check=p.check_bhsd,
                 note=note, is_flex=True, **common)


def run_ours(ctx: BenchContext, p: DenseProblem, common: dict):
    A, kv, c = ctx.A, p.kv, p.case
    ws = Workspace(ctx.torch, ctx.device)

    def call(i):
        ws.call(A.Error, A.paged_attention, p.q_sets[i], kv.k_cache, kv.v_cache, kv.page_table, kv.seqlens, p.cu,
                p.out, softmax_scale=p.scale, lse=p.lse, max_seqlen_q=c.q_len, causal=True)
        return p.out

    ctx.run_impl(c.workload, "attnserve", c.shape, call, p.n_sets, check=p.check_flat, note="paged", **common)


def run_sdpa(ctx: BenchContext, p: DenseProblem, impl: str, contiguous, common: dict):
    c = p.case
    k4, v4 = contiguous
    note = SDPA_NOTE
    try:
        runner = SdpaRunner(ctx.torch, impl, c.q_len, c.ctx, p.scale, ctx.device)
    except Exception as e:  # noqa: BLE001
        ctx.skip(c.workload, impl, c.shape, f"unavailable: {type(e).__name__}: {e}", params=c.params())
        return
    if c.h_q != c.h_kv and not _runs(ctx, lambda: runner(p.q4(0), k4, v4)):
        # No grouped-query support in this backend: give it K/V expanded to h_q heads (it then reads
        # h_q / h_kv times the bytes; GB/s still counts the grouped K/V, the problem's bytes).
        kx, vx = expand_heads(k4, c.h_q), expand_heads(v4, c.h_q)
        if _runs(ctx, lambda: runner(p.q4(0), kx, vx)):
            k4, v4 = kx, vx
            note += f"; K/V heads expanded {c.h_kv}->{c.h_q} (grouped heads refused)"
        del kx, vx

    ctx.run_impl(c.workload, impl, c.shape, lambda i: runner(p.q4(i), k4, v4), p.n_sets, check=p.check_bhsd,
                 note=note + ("" if runner.mode == "no mask" else f"; {runner.mode}"), **common)


def run_sdpa_gather(ctx: BenchContext, p: DenseProblem, common: dict):
    """What a paged engine pays with a non-paged kernel: gather the pages, then SDPA flash, per call."""
    c = p.case
    impl = "sdpa-flash+gather"
    try:
        runner = SdpaRunner(ctx.torch, "sdpa-flash", c.q_len, c.ctx, p.scale, ctx.device)
    except Exception as e:  # noqa: BLE001
        ctx.skip(c.workload, impl, c.shape, f"unavailable: {type(e).__name__}: {e}", params=c.params())
        return

    def call(i):
        k4 = gather_contiguous(p.kv, p.kv.k_cache).transpose(1, 2)
        v4 = gather_contiguous(p.kv, p.kv.v_cache).transpose(1, 2)
        return runner(p.q4(i), k4, v4)

    ctx.run_impl(c.workload, impl, c.shape, call, p.n_sets, check=p.check_bhsd,
                 note="gathers the pages, then SDPA flash, per call", **common)


def flex_peer(ctx: BenchContext):
    """The FlexAttention peer of this process (created once), or the reason there is none."""
    if not hasattr(ctx, "_flex"):
        try:
            from bench_flex import FlexPeer

            ctx._flex = (FlexPeer(ctx.torch), None)
        except Exception as e:  # noqa: BLE001
            ctx._flex = (None, f"FlexAttention unavailable: {type(e).__name__}: {e}")
    return ctx._flex


def _runs(ctx: BenchContext, fn) -> bool:
    try:
        fn()
        ctx.sync()
        return True
    except Exception:  # noqa: BLE001
        return False


# ---- groups ---------------------------------------------------------------------------------------

def run_dense(ctx: BenchContext, cases: list[DenseCase]):
    ctx.run_cases(cases, run_case, lambda c: c.workload)
    ctx.run_cases([c for c in cases if c.flex], run_flex_case, lambda c: c.workload, impl="flex")


def run_decode(ctx: BenchContext):
    run_dense(ctx, decode_cases(ctx.cfg.quick, ctx.cfg.smoke))


def run_sweep(ctx: BenchContext):
    run_dense(ctx, sweep_cases(ctx.cfg.quick, ctx.cfg.smoke))


def run_prefill(ctx: BenchContext):
    run_dense(ctx, prefill_cases(ctx.cfg.quick, ctx.cfg.smoke))
