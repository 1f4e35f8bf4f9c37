"""KV stores: set_kv_buffer (bf16 K/V rows to random slots) against torch index_copy_, and
set_mla_kv_buffer into the FP8-656 MLA cache against the same quantization composed from torch ops."""
from __future__ import annotations

from dataclasses import dataclass

from bench_context import BenchContext, rel_l2
from bench_counts import MLA_D_ROPE, MLA_D_V, MLA_FP8_ROW_BYTES, store_kv_bytes, store_mla_bytes
from bench_inputs import random_sets
from bench_reference import decode_fp8_656, encode_fp8_656


def _k(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


@dataclass
class StoreCase:
    kind: str        # "kv" | "mla-fp8"
    n: int           # tokens stored per call
    h_kv: int = 8
    d: int = 128

    @property
    def name(self) -> str:
        return f"store {self.kind} n{self.n}"

    @property
    def shape(self) -> str:
        if self.kind == "kv":
            return f"set_kv_buffer {_k(self.n)} tokens × {self.h_kv} × {self.d}, bf16 -> bf16"
        return f"set_mla_kv_buffer {_k(self.n)} tokens, bf16 -> FP8-656"


def store_cases(quick: bool, smoke: bool) -> list[StoreCase]:
    if smoke:
        return [StoreCase("kv", 1024), StoreCase("mla-fp8", 1024)]
    return [StoreCase("kv", 131072), StoreCase("mla-fp8", 262144)]


def random_slots(torch, n: int, num_slots: int, device):
    return torch.randperm(num_slots, device=device)[:n]


def run_store_kv(ctx: BenchContext, c: StoreCase):
    torch, dev, A = ctx.torch, ctx.device, ctx.A
    bf16 = torch.bfloat16
    slots = 2 * c.n
    k_cache = torch.empty(slots, c.h_kv, c.d, dtype=bf16, device=dev)
    v_cache = torch.empty_like(k_cache)
    loc64 = random_slots(torch, c.n, slots, dev)
    loc32 = loc64.to(torch.int32)
    n_sets = ctx.sets_for(2 * c.n * c.h_kv * c.d * 2)
    k_sets = random_sets(torch, n_sets, (c.n, c.h_kv, c.d), bf16, dev)
    v_sets = random_sets(torch, n_sets, (c.n, c.h_kv, c.d), bf16, dev)

    def check(_):
        return max(rel_l2(k_cache[loc64], k_sets[0]), rel_l2(v_cache[loc64], v_sets[0]))

    def ours(i):
        A.set_kv_buffer(k_sets[i], v_sets[i], k_cache, v_cache, loc32)

    def peer(i):
        k_cache.index_copy_(0, loc64, k_sets[i])
        v_cache.index_copy_(0, loc64, v_sets[i])

    common = dict(bytes_=store_kv_bytes(c.n, c.h_kv, c.d, 2, 2), params={"n": c.n, "h_kv": c.h_kv, "d": c.d})
    ctx.run_impl("store", "attnserve", c.shape, ours, n_sets, check=check, tol=1e-6, note="random slots", **common)
    ctx.run_impl("store", "torch index_copy_", c.shape, peer, n_sets, check=check, tol=1e-6,
                 note="two index_copy_ calls", **common)


def run_store_mla_fp8(ctx: BenchContext, c: StoreCase):
    torch, dev, A = ctx.torch, ctx.device, ctx.A
    bf16 = torch.bfloat16
    slots = 2 * c.n
    cache = torch.empty(slots, MLA_FP8_ROW_BYTES, dtype=torch.uint8, device=dev)
    loc64 = random_slots(torch, c.n, slots, dev)
    loc32 = loc64.to(torch.int32)
    n_sets = ctx.sets_for(c.n * (MLA_D_V + MLA_D_ROPE) * 2)
    kv_c = random_sets(torch, n_sets, (c.n, MLA_D_V), bf16, dev)
    k_rope = random_sets(torch, n_sets, (c.n, MLA_D_ROPE), bf16, dev)
    want = torch.cat([kv_c[0].float(), k_rope[0].float()], dim=1)

    def check(_):
        """Dequantized cache rows against the bf16 input: e4m3 keeps 3 mantissa bits (~2-3% rel-L2)."""
        return rel_l2(decode_fp8_656(torch, cache[loc64]), want)

    def ours(i):
        A.set_mla_kv_buffer(kv_c[i], k_rope[i], cache, loc32)

    def peer(i):
        cache.index_copy_(0, loc64, encode_fp8_656(torch, kv_c[i], k_rope[i]))

    common = dict(bytes_=store_mla_bytes(c.n, fp8=True), params={"n": c.n})
    ctx.run_impl("store", "attnserve", c.shape, ours, n_sets, check=check, tol=0.06, check_label="dequant rel-L2",
                 note="random slots", **common)
    ctx.run_impl("store", "torch (composed)", c.shape, peer, n_sets, check=check, tol=0.06,
                 check_label="dequant rel-L2", note="amax, pow2 scale, fp8 cast, cat, index_copy_", **common)


def run_store_case(ctx: BenchContext, c: StoreCase):
    (run_store_kv if c.kind == "kv" else run_store_mla_fp8)(ctx, c)


def run_stores(ctx: BenchContext):
    ctx.run_cases(store_cases(ctx.cfg.quick, ctx.cfg.smoke), run_store_case, lambda c: "store")
