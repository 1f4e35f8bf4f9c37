"""The README's Python example runs as written (it is executed here, not copied)."""
import os
import re

import numpy as np


def test_readme_python_example_runs():
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")) as f:
        readme = f.read()
    section = readme[readme.index("## Using it from Python"):readme.index("## Wiring into an engine")]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1
    ns = {}
    exec(compile(blocks[0], "README.md", "exec"), ns)  # noqa: S102 - our own README
    out = ns["out"].astype(np.float32)
    assert np.isfinite(out).all() and np.isfinite(ns["lse"]).all()
    # One request of 20 keys: out is a convex combination of its V rows (per KV head).
    v = ns["v"].astype(np.float32)
    g = ns["h"] // ns["h_kv"]
    for head in range(ns["h"]):
        vh = v[:, head // g]
        assert (out[0, head] <= vh.max(0) + 1e-2).all() and (out[0, head] >= vh.min(0) - 1e-2).all()
