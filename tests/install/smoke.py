"""Run from outside the source tree against an installed attnserve wheel: it imports, carries its
stubs and metadata, and runs an op on the CPU (bf16 through ml_dtypes, checked in closed form)."""
import importlib.metadata
import os
import sys

import ml_dtypes
import numpy as np

import attnserve as A

here = os.path.dirname(os.path.abspath(A.__file__))
assert "site-packages" in here, f"attnserve imported from {here}, not from the installed wheel"
assert A.__version__ == importlib.metadata.version("attnserve"), (A.__version__, importlib.metadata.version("attnserve"))
for f in ("py.typed", "_attnserve.pyi"):
    assert os.path.exists(os.path.join(here, f)), f"{f} missing from the wheel"
requires = " ".join(importlib.metadata.requires("attnserve") or [])
assert "numpy" in requires and "ml_dtypes" in requires, requires

# Merge of two states with LSE 0 and log 3: weights 1/4 and 3/4.
bf16 = ml_dtypes.bfloat16
v_a = np.full((1, 1, 4), 1.0, bf16)
v_b = np.full((1, 1, 4), 5.0, bf16)
s_a = np.zeros((1, 1), np.float32)
s_b = np.full((1, 1), np.log(3.0), np.float32)
out = np.zeros((1, 1, 4), bf16)
lse = np.zeros((1, 1), np.float32)
A.merge_state(v_a, s_a, v_b, s_b, out, lse)
assert (out.astype(np.float32) == 4.0).all(), out
assert abs(lse[0, 0] - np.log(4.0)) < 1e-6, lse

pool = A.MhaKvPool(num_layers=1, num_slots=16, h_kv=1, head_dim=4, head_dim_v=4)
assert pool.k(0).dtype == np.dtype(bf16)
try:
    A.merge_state(v_a, s_a, v_b, s_b, np.broadcast_to(out, out.shape))
except A.Error as e:
    assert "'v_out'" in str(e), e
else:
    sys.exit("a read-only output was accepted")
print(f"attnserve {A.__version__} from {here}: merge_state ok, built_with_cuda={A.built_with_cuda()}")
