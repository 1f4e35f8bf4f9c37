"""Fuzz the public Python API of attnserve on the CPU.

Each case builds a valid call of one op (small random shapes), applies one random mutation (a wrong
dtype, shape, stride, length, page id, capacity, None, a list, a read-only output, a bad scalar, ...)
and runs it in a forked child process, so that a crash (a signal) or a hang is caught and reported
instead of taking the run down. A case passes when the call either succeeds or raises
attnserve.Error whose message names an argument ('name' in quotes); any other exception, a signal
or a timeout fails it. The unmutated call of every op must succeed (so the generators stay valid).

  python3 tests/fuzz/fuzz_api.py [--seed S] [--cases N] [--only I] [--timeout S] [--max-seconds S]

Without --seed a random seed is drawn and printed; --seed S --only I reruns one case.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import select
import signal
import sys
import time
import traceback

import ml_dtypes
import numpy as np

import attnserve as A
from attnserve._ops import OpSignature

BF16 = np.dtype(ml_dtypes.bfloat16)


# ---- Valid calls: op name -> kwargs (arrays and scalars) ---------------------------------------------

def _lens_to_cu(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)


def _paged(rng, num_pages, page_size, kv_lens):
    max_pages = max(1, max((n + page_size - 1) // page_size for n in kv_lens))
    table = np.zeros((len(kv_lens), max_pages), np.int32)
    perm = rng.permutation(np.arange(1, num_pages))
    used = 0
    for r, n in enumerate(kv_lens):
        p = (n + page_size - 1) // page_size
        table[r, :p] = perm[used:used + p]
        used += p
    return table


def gen_paged_attention(rng):
    b, ps = int(rng.integers(1, 4)), int(rng.choice([1, 4]))
    h_kv, g, d = int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.choice([8, 16]))
    kv = [int(rng.integers(1, 12)) for _ in range(b)]
    q_lens = [int(rng.integers(1, n + 1)) for n in kv]
    num_pages = sum((n + ps - 1) // ps for n in kv) + 2
    cu = _lens_to_cu(q_lens)
    return dict(q=rng.standard_normal((cu[-1], h_kv * g, d)).astype(np.float32),
                k_cache=rng.standard_normal((num_pages, ps, h_kv, d)).astype(np.float32),
                v_cache=rng.standard_normal((num_pages, ps, h_kv, d)).astype(np.float32),
                page_table=_paged(rng, num_pages, ps, kv), cache_seqlens=np.array(kv, np.int32), cu_seqlens_q=cu,
                out=np.zeros((cu[-1], h_kv * g, d), np.float32), lse=np.zeros((cu[-1], h_kv * g), np.float32),
                softmax_scale=0.25, max_seqlen_q=max(q_lens), causal=bool(rng.integers(2)))


def gen_mla_attention(rng):
    b, ps, h, d_v, d_r = int(rng.integers(1, 3)), int(rng.choice([1, 4])), int(rng.integers(1, 4)), 16, 8
    kv = [int(rng.integers(1, 10)) for _ in range(b)]
    q_lens = [int(rng.integers(1, n + 1)) for n in kv]
    num_pages = sum((n + ps - 1) // ps for n in kv) + 2
    cu = _lens_to_cu(q_lens)
    return dict(q_nope=rng.standard_normal((cu[-1], h, d_v)).astype(np.float32),
                q_rope=rng.standard_normal((cu[-1], h, d_r)).astype(np.float32),
                kv_cache=rng.standard_normal((num_pages, ps, 1, d_v + d_r)).astype(np.float32),
                page_table=_paged(rng, num_pages, ps, kv), cache_seqlens=np.array(kv, np.int32), cu_seqlens_q=cu,
                out=np.zeros((cu[-1], h, d_v), np.float32), lse=np.zeros((cu[-1], h), np.float32),
                softmax_scale=0.3, max_seqlen_q=max(q_lens))


def gen_merge_state(rng):
    t, h, d = int(rng.integers(1, 5)), int(rng.integers(1, 4)), int(rng.choice([4, 8]))
    dt = rng.choice([np.float32, BF16])
    return dict(v_a=rng.standard_normal((t, h, d)).astype(dt), s_a=rng.standard_normal((t, h)).astype(np.float32),
                v_b=rng.standard_normal((t, h, d)).astype(dt), s_b=rng.standard_normal((t, h)).astype(np.float32),
                v_out=np.zeros((t, h, d), dt), s_out=np.zeros((t, h), np.float32))


def gen_merge_states(rng):
    n, t, h, d = int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(1, 3)), 8
    return dict(v_parts=rng.standard_normal((n, t, h, d)).astype(np.float32),
                s_parts=rng.standard_normal((n, t, h)).astype(np.float32),
                v_out=np.zeros((t, h, d), np.float32), s_out=np.zeros((t, h), np.float32))


def gen_topk(rng):
    rows, width, k = int(rng.integers(1, 4)), int(rng.integers(4, 64)), int(rng.integers(1, 8))
    return dict(scores=rng.standard_normal((rows, width)).astype(np.float32),
                lengths=rng.integers(0, width + 1, rows).astype(np.int32), out=np.zeros((rows, k), np.int32), topk=k)


def gen_set_kv_buffer(rng):
    n, slots, h, d = int(rng.integers(1, 5)), 32, int(rng.integers(1, 3)), 8
    return dict(k=rng.standard_normal((n, h, d)).astype(np.float32), v=rng.standard_normal((n, h, d)).astype(np.float32),
                k_cache=np.zeros((slots, h, d), np.float16), v_cache=np.zeros((slots, h, d), np.float16),
                loc=rng.choice(slots, n, replace=False).astype(np.int64))


def gen_quantize_fp8_groups(rng):
    rows = int(rng.integers(1, 4))
    return dict(x=rng.standard_normal((rows, 256)).astype(np.float32), out=np.zeros((rows, 256), np.uint8),
                scales=np.zeros((rows, 2), np.float32), group=128)


def _fp8(rng, shape):
    return (rng.standard_normal(shape) * 0.5).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def gen_indexer_ragged(rng):
    rows, heads, keys = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(1, 10))
    ks = rng.integers(0, keys, rows).astype(np.int32)
    ke = np.array([rng.integers(s, keys + 1) for s in ks], np.int32)
    return dict(q=_fp8(rng, (rows, heads, 128)), weights=rng.standard_normal((rows, heads)).astype(np.float32),
                k=_fp8(rng, (keys, 128)), k_scale=np.ones(keys, np.float32), ks=ks, ke=ke,
                logits=np.zeros((rows, keys), np.float32))


def gen_indexer_paged(rng):
    b, next_n, ps, heads = int(rng.integers(1, 3)), int(rng.integers(1, 3)), 4, int(rng.integers(1, 3))
    seq = [int(rng.integers(next_n, 12)) for _ in range(b)]
    num_pages = sum((n + ps - 1) // ps for n in seq) + 2
    return dict(q=_fp8(rng, (b * next_n, heads, 128)), weights=np.ones((b * next_n, heads), np.float32),
                index_k_cache=rng.integers(0, 64, (num_pages, ps * 132)).astype(np.uint8),
                page_table=_paged(rng, num_pages, ps, seq), seqlens=np.array(seq, np.int32),
                logits=np.zeros((b * next_n, 12), np.float32), page_size=ps, next_n=next_n)


def gen_set_index_k(rng):
    n, ps, pages = int(rng.integers(1, 5)), 4, 4
    return dict(k=rng.standard_normal((n, 128)).astype(np.float32),
                index_k_cache=np.zeros((pages, ps * 132), np.uint8),
                loc=rng.choice(pages * ps, n, replace=False).astype(np.int32), page_size=ps)


def gen_gather_index_k(rng):
    n, ps, pages = int(rng.integers(1, 5)), 4, 4
    return dict(index_k_cache=rng.integers(0, 255, (pages, ps * 132)).astype(np.uint8),
                slots=rng.integers(0, pages * ps, n).astype(np.int32), out_k=np.zeros((n, 128), np.uint8),
                out_scale=np.zeros(n, np.float32), page_size=ps)


def gen_set_mla_kv_buffer(rng):
    n, slots = int(rng.integers(1, 4)), 16
    return dict(kv_c=rng.standard_normal((n, 512)).astype(np.float32),
                k_rope=rng.standard_normal((n, 64)).astype(np.float32), cache=np.zeros((slots, 576), BF16),
                loc=rng.choice(slots, n, replace=False).astype(np.int32))


def gen_sparse_mla(rng):
    rows, h, slots, k = int(rng.integers(1, 3)), int(rng.integers(1, 3)), 16, int(rng.integers(1, 6))
    return dict(q=rng.standard_normal((rows, h, 576)).astype(np.float32),
                kv=(rng.standard_normal((slots, 576)) * 0.1).astype(BF16),
                indices=rng.integers(-1, slots, (rows, k)).astype(np.int32),
                out=np.zeros((rows, h, 512), np.float32), lse=np.zeros((rows, h), np.float32), softmax_scale=0.1)


def gen_transform_index_page_table(rng):
    r, w, rows, k = int(rng.integers(1, 3)), int(rng.integers(2, 10)), None, int(rng.integers(1, 4))
    rows = r
    return dict(page_table_1=rng.integers(0, 100, (r, w)).astype(np.int32),
                topk_indices=rng.integers(-1, w, (rows, k)).astype(np.int32), out=np.zeros((rows, k), np.int32))


GENERATORS = {name[4:]: fn for name, fn in globals().items() if name.startswith("gen_")}


# ---- Stateful objects: "Class.method" -> (rng) -> (bound method, kwargs) ------------------------------

def _table(rng, rows, max_ctx):
    pool = A.ReqToTokenPool(size=rows + 1, max_context_len=max_ctx)
    idx = [pool.alloc() for _ in range(rows)]
    for r in idx:
        pool.write(r, 0, list(rng.integers(1, 256, max_ctx).astype(int)))
    return pool, idx


def obj_planner_plan(rng):
    sparse = bool(rng.integers(2))
    planner = A.SparsePlanner(page_size=4, topk=8) if sparse else A.DensePlanner(page_size=int(rng.choice([1, 4])))
    planner.init(max_bs=4, max_num_tokens=32, max_context_len=48)
    bs = int(rng.integers(1, 4))
    pool, idx = _table(rng, bs, 48)
    mode = [A.ForwardMode.decode, A.ForwardMode.extend][int(rng.integers(2))]
    seq = [int(rng.integers(2, 40)) for _ in range(bs)]
    kw = dict(mode=mode, seq_lens=seq, req_pool_indices=idx, req_to_token=pool.table)
    if mode == A.ForwardMode.extend:
        ext = [int(rng.integers(1, min(s, 8) + 1)) for s in seq]
        kw.update(extend_seq_lens=ext, extend_prefix_lens=[s - e for s, e in zip(seq, ext)])
    return planner.plan, type(planner).plan, kw


def obj_allocator_extend(rng):
    alloc = A.SlotAllocator(num_slots=64, page_size=4)
    first = alloc.alloc_extend([0], [-1], [int(rng.integers(1, 9))])
    kw = dict(prefix_lens=[len(first), 0], last_locs=[first[-1], -1], extend_lens=[int(rng.integers(0, 6)), 3])
    return alloc.alloc_extend, A.SlotAllocator.alloc_extend, kw


def obj_allocator_decode(rng):
    alloc = A.SlotAllocator(num_slots=32, page_size=4)
    first = alloc.alloc_extend([0], [-1], [int(rng.integers(1, 9))])
    return alloc.alloc_decode, A.SlotAllocator.alloc_decode, dict(seq_lens=[len(first)], last_locs=[first[-1]])


def obj_req_to_token_write(rng):
    pool = A.ReqToTokenPool(size=4, max_context_len=16)
    r = pool.alloc()
    return pool.write, A.ReqToTokenPool.write, dict(req=r, start=int(rng.integers(0, 8)), slots=[1, 2, 3])


def obj_pool_view(rng):
    pool = A.MhaKvPool(num_layers=2, num_slots=16, h_kv=1, head_dim=4, head_dim_v=4)
    return pool.k_paged, A.MhaKvPool.k_paged, dict(layer=int(rng.integers(0, 2)), page_size=4)


OBJECTS = {name[4:]: fn for name, fn in globals().items() if name.startswith("obj_")}


# ---- Mutations: (rng, sig, kwargs) -> description (kwargs changed in place) or None if not applicable ----

DTYPES = [np.float32, np.float16, np.float64, np.int32, np.int64, np.uint8, np.int8, np.uint16, np.bool_, BF16]


def _arrays(sig, kw):
    return [n for n in sig.arrays if isinstance(kw.get(n), np.ndarray)]


def _pick_array(rng, sig, kw):
    names = _arrays(sig, kw)
    return str(rng.choice(names)) if names else None


def m_dtype(rng, sig, kw):
    n = _pick_array(rng, sig, kw)
    if n is None:
        return None
    dt = DTYPES[int(rng.integers(len(DTYPES)))]
    kw[n] = kw[n].astype(dt)
    return f"{n} as {np.dtype(dt).name}"


def m_shape(rng, sig, kw):
    n = _pick_array(rng, sig, kw)
    if n is None:
        return None
    a = kw[n]
    how = int(rng.integers(3))
    if how == 0 or a.ndim == 0:
        kw[n] = a[..., None]
        return f"{n} with an extra dim"
    if how == 1:
        kw[n] = a.reshape(-1)
        return f"{n} flattened"
    dim = int(rng.integers(a.ndim))
    size = max(0, a.shape[dim] + int(rng.choice([-1, 1, 3])))
    shape = list(a.shape)
    shape[dim] = size
    kw[n] = np.resize(a, shape).astype(a.dtype)
    return f"{n} dim {dim} -> {size}"


def m_empty(rng, sig, kw):
    n = _pick_array(rng, sig, kw)
    if n is None:
        return None
    kw[n] = kw[n][:0]
    return f"{n} with 0 rows"


def m_zero_stride(rng, sig, kw):
    n = _pick_array(rng, sig, kw)
    if n is None:
        return None
    a = kw[n]
    if a.ndim == 0 or a.shape[0] < 2:
        return None
    kw[n] = np.lib.stride_tricks.as_strided(a, a.shape, (0,) + a.strides[1:], writeable=True)
    return f"{n} with stride 0 in dim 0"


def m_strided(rng, sig, kw):
    n = _pick_array(rng, sig, kw)
    if n is None:
        return None
    a = kw[n]
    if a.ndim == 0:
        return None
    big = np.zeros(a.shape[:-1] + (a.shape[-1] * 2,), a.dtype)
    big[..., ::2] = a
    kw[n] = big[..., ::2]
    return f"{n} with last-dim stride 2"


def m_values(rng, sig, kw):
    ints = [n for n in _arrays(sig, kw) if kw[n].dtype.kind == "i" and kw[n].size and kw[n].flags.writeable]
    if not ints:
        return None
    n = rng.choice(ints)
    a = kw[n].copy()
    v = int(rng.choice([-1, -7, 1, 3, 10 ** 6, 2 ** 31 - 1, -2 ** 31, a.size, int(a.max()) + 1]))
    idx = tuple(int(rng.integers(s)) for s in a.shape)
    a[idx] = v
    kw[n] = a
    return f"{n}{list(idx)} = {v}"


def m_none(rng, sig, kw):
    n = _pick_array(rng, sig, kw)
    if n is None:
        return None
    kw[n] = None
    return f"{n} = None"


def m_list(rng, sig, kw):
    n = _pick_array(rng, sig, kw)
    if n is None:
        return None
    kw[n] = kw[n].astype(np.float64).tolist() if kw[n].dtype == BF16 else kw[n].tolist()
    return f"{n} as a list"


def m_read_only(rng, sig, kw):
    n = _pick_array(rng, sig, kw)
    if n is None:
        return None
    kw[n] = kw[n].copy()
    kw[n].setflags(write=False)
    return f"{n} read-only"


def m_swap(rng, sig, kw):
    names = _arrays(sig, kw)
    if len(names) < 2:
        return None
    a, b = rng.choice(names, 2, replace=False)
    kw[a], kw[b] = kw[b], kw[a]
    return f"{a} <-> {b}"


def m_scalar(rng, sig, kw):
    scalars = [n for n, t in sig.types.items() if t in ("int", "float", "bool") and n not in ("stream",)]
    if not scalars:
        return None
    n = str(rng.choice(scalars))
    v = [0, -1, 1, 3, 10 ** 6, 2 ** 40, float("nan"), float("inf"), -float("inf"), 0.5, "x", None][int(rng.integers(12))]
    kw[n] = v
    return f"{n} = {v!r}"


def m_list_values(rng, sig, kw):
    lists = [n for n, v in kw.items() if isinstance(v, list) and v]
    if not lists:
        return None
    n = str(rng.choice(lists))
    how = int(rng.integers(4))
    if how == 0:
        kw[n] = kw[n] + [int(rng.integers(0, 50))]
        return f"{n} one longer"
    if how == 1:
        kw[n] = kw[n][:-1]
        return f"{n} one shorter"
    if how == 2:  # a capacity: more requests than max_bs
        for k in lists:
            kw[k] = kw[k] * 3
        return f"{', '.join(lists)} tripled"
    i = int(rng.integers(len(kw[n])))
    v = [-1, -100, 0, 10 ** 6, 2 ** 31 - 1, 1.5, "1"][int(rng.integers(7))]
    kw[n] = kw[n][:i] + [v] + kw[n][i + 1:]
    return f"{n}[{i}] = {v!r}"


MUTATIONS = [m_dtype, m_shape, m_empty, m_zero_stride, m_strided, m_values, m_values, m_none, m_list, m_read_only,
             m_swap, m_scalar, m_list_values]


# ---- One case, in a child process ---------------------------------------------------------------------

TARGETS = sorted(GENERATORS) + sorted(OBJECTS)


def make_case(seed: int, index: int):
    """(name, callable, kwargs, mutation) of case `index`; the first len(TARGETS) run each one unmutated."""
    rng = np.random.default_rng([seed, index])
    name = TARGETS[index % len(TARGETS)] if index < len(TARGETS) else TARGETS[int(rng.integers(len(TARGETS)))]
    if name in GENERATORS:
        fn, nb_fn, kw = getattr(A, name), getattr(A._attnserve, name), GENERATORS[name](rng)
    else:
        fn, wrapped, kw = OBJECTS[name](rng)
        nb_fn = wrapped.__wrapped__
    desc = "valid call"
    if index >= len(TARGETS):
        sig = OpSignature(nb_fn)
        for _ in range(10):
            m = MUTATIONS[int(rng.integers(len(MUTATIONS)))]
            desc = m(rng, sig, kw)
            if desc is not None:
                break
    return name, fn, kw, desc


def _names_an_argument(message: str, kw: dict, stateful: bool) -> bool:
    """An attnserve.Error must say which argument it is about: one of the call's parameter names. The
    stateful objects speak per request (seq_lens[i] -> "request i has seq_len"), or of the batch
    against the capacity given at init, which counts too."""
    words = set(kw) | ({n[:-1] for n in kw if n.endswith("s")} if stateful else set())
    if stateful and re.search(r"\b(capacity|batch)\b", message):
        return True
    return any(re.search(rf"\b{re.escape(n)}\b", message) for n in words)


def run_case(seed: int, index: int) -> dict:
    op, fn, kw, desc = make_case(seed, index)
    try:
        fn(**kw)
        return {"op": op, "mutation": desc, "result": "ok"}
    except A.Error as e:
        return {"op": op, "mutation": desc, "result": "error", "message": str(e),
                "names_argument": _names_an_argument(str(e), kw, op in OBJECTS)}
    except Exception as e:  # noqa: BLE001 - anything else is a finding
        return {"op": op, "mutation": desc, "result": "exception", "message": f"{type(e).__name__}: {e}",
                "trace": traceback.format_exc(limit=3)}


def run_in_child(seed: int, index: int, timeout: float) -> dict:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        code = 0
        try:
            signal.alarm(int(timeout))  # a hang ends with SIGALRM
            out = run_case(seed, index)
            os.write(w, json.dumps(out).encode())
        except BaseException:  # noqa: BLE001 - a bug of the fuzzer itself: say so
            traceback.print_exc()
            code = 3
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    while True:
        select.select([r], [], [], timeout + 5)
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        what = "hang (timeout)" if sig == signal.SIGALRM else f"crash: signal {signal.Signals(sig).name}"
        op, _, _, desc = make_case(seed, index)
        return {"op": op, "mutation": desc, "result": "crash", "message": what}
    if not chunks:
        return {"op": "?", "mutation": "?", "result": "crash",
                "message": f"the fuzzer's child failed (status {status}, traceback above): rerun with --only {index}"}
    return json.loads(b"".join(chunks))


def verdict(index: int, n_ops: int, res: dict) -> str | None:
    """None when the case passes, else why it fails."""
    if res["result"] in ("crash", "exception"):
        return res["message"]
    if index < n_ops and res["result"] != "ok":
        return f"the valid call failed: {res.get('message')}"
    if res["result"] == "error" and not res["names_argument"]:
        return f"attnserve.Error names no argument: {res['message']}"
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--cases", type=int, default=300)
    p.add_argument("--only", type=int, default=None, help="run just this case index (in this process)")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per case before it counts as a hang")
    p.add_argument("--max-seconds", type=float, default=150.0, help="stop starting cases after this long")
    args = p.parse_args()
    seed = args.seed if args.seed is not None else int(np.random.SeedSequence().entropy % (2 ** 31))
    n_ops = len(TARGETS)
    if args.only is not None:
        print(json.dumps(run_case(seed, args.only), indent=1))
        return 0
    print(f"fuzz_api: seed {seed}, {args.cases} cases over {n_ops} ops (rerun one: --seed {seed} --only I)")
    t0 = time.time()
    failures, counts = [], {"ok": 0, "error": 0}
    ran = 0
    for i in range(max(args.cases, n_ops)):
        if i >= n_ops and time.time() - t0 > args.max_seconds:
            print(f"fuzz_api: time bound {args.max_seconds:.0f} s reached after {i} cases")
            break
        res = run_in_child(seed, i, args.timeout)
        ran += 1
        counts[res["result"]] = counts.get(res["result"], 0) + 1
        why = verdict(i, n_ops, res)
        if why:
            failures.append(i)
            print(f"  FAIL case {i}: {res['op']}({res['mutation']}): {why}")
    print(f"fuzz_api: seed {seed}: {ran} cases, {len(failures)} failed; results {counts}; {time.time() - t0:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
