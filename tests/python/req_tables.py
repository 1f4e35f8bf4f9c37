"""Shared by the planner tests: a request-to-token table holding given slot lists."""
import attnserve as A


def table_with(rows, max_context_len=256):
    """A ReqToTokenPool holding the given per-request slot lists, and the requests' indices."""
    pool = A.ReqToTokenPool(size=len(rows) + 1, max_context_len=max_context_len)
    idx = []
    for slots in rows:
        r = pool.alloc()
        pool.write(r, 0, slots)
        idx.append(r)
    return pool, idx
