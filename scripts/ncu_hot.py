#!/usr/bin/env python3
"""Top SASS lines by warp-stall samples from `ncu -i rep --page source --csv --print-source sass`.
Usage: ncu_hot.py source.csv [N] -> prints the N hottest instructions with their stall reasons."""
import csv, sys

rows = list(csv.reader(open(sys.argv[1], newline="")))
n = int(sys.argv[2]) if len(sys.argv) > 2 else 50
hdr_i = next(i for i, r in enumerate(rows) if any("Source" == c or "Source" in c for c in r))
hdr = rows[hdr_i]
body = rows[hdr_i + 1:]
def col(name):
    for i, c in enumerate(hdr):
        if c == name:
            return i
    for i, c in enumerate(hdr):
        if name in c:
            return i
    return None
src = col("Source")
samp = col("Warp Stall Sampling (All Samples)")
ex = col("Instructions Executed")
print("columns:", " | ".join(hdr))
def num(v):
    try:
        return float(v.replace(",", ""))
    except Exception:
        return 0.0
stall_cols = [i for i, c in enumerate(hdr) if c.startswith("stall_") or "Stall" in c and "Sampling" not in c]
total = sum(num(r[samp]) for r in body if len(r) > samp)
print(f"total samples {total:.0f}")
body.sort(key=lambda r: -num(r[samp]) if len(r) > samp else 0)
for r in body[:n]:
    reasons = sorted(((num(r[i]), hdr[i]) for i in stall_cols if i < len(r) and num(r[i]) > 0), reverse=True)[:3]
    print(f"{num(r[samp]) / max(total, 1) * 100:5.1f}%  exec {r[ex] if ex is not None else '?':>10}  {r[src][:70]:70s}  " +
          ", ".join(f"{h}={v:.0f}" for v, h in reasons))
