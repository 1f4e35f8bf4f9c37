"""What a NumPy/JAX user meets: bf16/fp8 pool views as real arrays (ml_dtypes), ml_dtypes inputs,
read-only inputs, refused immutable outputs, reusable DLPack views, version and stubs."""
import os

import ml_dtypes
import numpy as np
import pytest

import attnserve as A

BF16 = np.dtype(ml_dtypes.bfloat16)
FP8 = np.dtype(ml_dtypes.float8_e4m3fn)


def test_version_matches_the_cmake_project():
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    with open(os.path.join(root, "CMakeLists.txt")) as f:
        assert f"project(attnserve VERSION {A.__version__} " in f.read()


def test_package_is_typed():
    pkg = os.path.dirname(A.__file__)
    assert os.path.exists(os.path.join(pkg, "py.typed"))
    with open(os.path.join(pkg, "_attnserve.pyi")) as f:
        stub = f.read()
    assert "def paged_attention(" in stub and "class MhaKvPool" in stub


def test_bf16_pool_views_are_numpy_arrays_sharing_the_pool(rng):
    pool = A.MhaKvPool(num_layers=2, num_slots=32, h_kv=2, head_dim=8, head_dim_v=4)  # bf16 by default
    k = pool.k(1)
    assert isinstance(k, np.ndarray) and k.dtype == BF16 and k.shape == (32, 2, 8)
    assert pool.v_paged(1, 4).shape == (8, 4, 2, 4)
    x = rng.standard_normal((3, 2, 8)).astype(np.float32)
    v = rng.standard_normal((3, 2, 4)).astype(np.float32)
    loc = np.array([2, 7, 30], np.int32)
    # The same view object used twice (the old capsules were single-use).
    A.set_kv_buffer(x, v, k, pool.v(1), loc)
    A.set_kv_buffer(x, v, k, pool.v(1), loc)
    np.testing.assert_array_equal(pool.k(1)[loc], x.astype(BF16))  # a view: the store is visible
    np.testing.assert_array_equal(pool.v(1)[loc].astype(np.float32), v.astype(BF16).astype(np.float32))
    assert not pool.k(0).astype(np.float32).any()


def test_fp8_pool_views_are_float8_arrays(rng):
    pool = A.MhaKvPool(num_layers=1, num_slots=16, h_kv=1, head_dim=16, head_dim_v=16, dtype="fp8_e4m3")
    assert pool.k(0).dtype == FP8
    x = np.full((1, 1, 16), 1.5, np.float32)
    A.set_kv_buffer(x, x, pool.k(0), pool.v(0), np.array([3], np.int64))
    assert (pool.k(0)[3].astype(np.float32) == 1.5).all()  # 1.5 is exact in e4m3


def test_ml_dtypes_bf16_inputs_and_outputs(rng):
    tokens, heads, d = 5, 2, 16
    va = rng.standard_normal((tokens, heads, d)).astype(BF16)
    vb = rng.standard_normal((tokens, heads, d)).astype(BF16)
    sa = rng.standard_normal((tokens, heads)).astype(np.float32)
    sb = rng.standard_normal((tokens, heads)).astype(np.float32)
    out = np.zeros((tokens, heads, d), BF16)
    A.merge_state(va, sa, vb, sb, out)
    wa = 1 / (1 + np.exp(sb - sa))
    want = wa[..., None] * va.astype(np.float64) + (1 - wa[..., None]) * vb.astype(np.float64)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=2 ** -7, atol=2 ** -7)


def test_read_only_inputs_are_accepted(rng):
    tokens, heads, d = 4, 2, 8
    v = rng.standard_normal((1, heads, d)).astype(np.float32)
    va = np.broadcast_to(v, (tokens, heads, d))          # read-only, stride 0 in dim 0
    sa = np.zeros((tokens, heads), np.float32)
    sa.setflags(write=False)
    out = np.empty((tokens, heads, d), np.float32)
    A.merge_state(va, sa, va, sa, out)
    np.testing.assert_allclose(out, va, rtol=1e-6)


def test_immutable_outputs_are_refused_naming_the_argument(rng):
    x = np.zeros((2, 2, 4), np.float32)
    s = np.zeros((2, 2), np.float32)
    ro = np.zeros_like(x)
    ro.setflags(write=False)
    with pytest.raises(A.Error, match="'v_out'.*read-only"):
        A.merge_state(x, s, x, s, ro)
    with pytest.raises(A.Error, match="'v_out'.*read-only"):
        A.merge_state(x, s, x, s, np.broadcast_to(x[:1], x.shape))
    assert not ro.any()


def test_zero_stride_writable_output_is_refused():
    x = np.zeros((3, 2, 4), np.float32)
    s = np.zeros((3, 2), np.float32)
    aliased = np.lib.stride_tricks.as_strided(np.zeros((1, 2, 4), np.float32), x.shape, (0, 16, 4), writeable=True)
    with pytest.raises(A.Error, match="'v_out' has stride 0"):
        A.merge_state(x, s, x, s, aliased)


def test_jax_arrays_as_outputs_are_refused():
    jnp = pytest.importorskip("jax.numpy")  # JAX is not installed in CI: this runs where it is
    x = np.zeros((2, 2, 4), np.float32)
    s = np.zeros((2, 2), np.float32)
    with pytest.raises(A.Error, match="'v_out' is a JAX array"):
        A.merge_state(jnp.asarray(x), jnp.asarray(s), jnp.asarray(x), jnp.asarray(s), jnp.zeros((2, 2, 4)))
    out = np.empty((2, 2, 4), np.float32)
    A.merge_state(jnp.asarray(x) + 1, jnp.asarray(s), jnp.asarray(x) + 1, jnp.asarray(s), out)  # inputs: fine
    assert (out == 1).all()


def test_jax_reads_bf16_pool_views():
    jnp = pytest.importorskip("jax.numpy")
    pool = A.MhaKvPool(num_layers=1, num_slots=8, h_kv=1, head_dim=4, head_dim_v=4)
    A.set_kv_buffer(np.full((1, 1, 4), 2.0, np.float32), np.zeros((1, 1, 4), np.float32), pool.k(0), pool.v(0),
                    np.array([5], np.int32))
    k = jnp.asarray(pool.k(0))
    assert k.dtype == jnp.bfloat16 and float(k[5].sum()) == 8.0


@pytest.mark.parametrize("bad, name, what", [
    (dict(v_out=[[0.0]]), "v_out", "must be an array"),
    (dict(s_a=None), "s_a", "is required"),
    (dict(v_b=np.zeros((2, 2, 4), np.uint16)), "v_b", "unsupported array dtype uint16"),
    (dict(v_a=np.zeros((2, 2, 4), bool)), "v_a", "unsupported array dtype bool"),
    (dict(stream="default"), "stream", "must be int"),
])
def test_conversion_failures_name_the_argument(bad, name, what):
    args = dict(v_a=np.zeros((2, 2, 4), np.float32), s_a=np.zeros((2, 2), np.float32),
                v_b=np.zeros((2, 2, 4), np.float32), s_b=np.zeros((2, 2), np.float32),
                v_out=np.zeros((2, 2, 4), np.float32))
    args.update(bad)
    with pytest.raises(A.Error, match=f"merge_state: argument '{name}'.*{what}"):
        A.merge_state(**args)


def test_call_shape_errors_are_attnserve_errors():
    x = np.zeros((2, 2, 4), np.float32)
    s = np.zeros((2, 2), np.float32)
    with pytest.raises(A.Error, match="unknown argument 'lse'"):
        A.merge_state(x, s, x, s, x, lse=s)
    with pytest.raises(A.Error, match="takes 6 positional"):
        A.merge_state(x, s, x, s, x, s, 0)
    with pytest.raises(A.Error, match="'softmax_scale' must be float"):
        A.sparse_mla(x, x, x, x, softmax_scale="0.1")
    with pytest.raises(A.Error, match="'transform' must be attnserve.TopkTransform"):
        A.topk(s, np.zeros(2, np.int32), np.zeros((2, 1), np.int32), topk=1, transform="decode")


def test_retyped_view_is_reusable_and_keeps_memory_alive():
    a = np.arange(6, dtype=np.float32).astype(BF16).reshape(2, 3)
    view = A._attnserve._retyped(a, a.view(np.uint16), "bf16")
    assert (view.shape, view.strides, view.dtype, view.device) == ((2, 3), (3, 1), "bf16", "cpu")
    del a
    for _ in range(3):
        assert view.__dlpack__() is not None  # a fresh capsule each time
    assert view.__dlpack_device__() == (1, 0)


def test_jax_inputs_and_array_view_through_jax_dlpack():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    x = jnp.ones((2, 2, 4), jnp.bfloat16)
    s = jnp.zeros((2, 2), jnp.float32)
    out = np.zeros((2, 2, 4), BF16)
    A.merge_state(x, s, x * 3, s, out)  # JAX bf16 inputs through DLPack
    assert (out.astype(np.float32) == 2).all()
    a = np.arange(6, dtype=np.float32).astype(BF16)
    view = A._attnserve._retyped(a, a.view(np.uint16), "bf16")
    for _ in range(2):  # reusable: a fresh capsule per consumer
        j = jax.dlpack.from_dlpack(view)
        assert j.dtype == jnp.bfloat16 and j.tolist() == list(range(6))
