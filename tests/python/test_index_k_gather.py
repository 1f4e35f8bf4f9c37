"""gather_index_k from Python (NumPy on the CPU): keys stored by set_index_k, gathered by slot, equal the
pool bytes read through the page layout; uint8 out_k; an out-of-range slot raises attnserve.Error.
Skipped until the binding is wired into the module."""
import numpy as np
import pytest

import attnserve as A

pytestmark = pytest.mark.skipif(not hasattr(A, "gather_index_k"), reason="gather_index_k not wired in")


@pytest.mark.parametrize("page_size", [1, 5, 64])
@pytest.mark.parametrize("slot_dtype", [np.int32, np.int64])
def test_gather_matches_page_layout(rng, page_size, slot_dtype):
    pages = 300 // page_size + 2
    cache = rng.integers(0, 256, size=(pages, page_size * 132), dtype=np.uint8)
    written = rng.permutation(pages * page_size)[:200].astype(np.int64)
    A.set_index_k(rng.standard_normal((200, 128)).astype(np.float32), cache, written, page_size=page_size)
    slots = rng.choice(written, size=150).astype(slot_dtype)
    out_k = np.full((150, 128), 0x7F, np.uint8)
    out_s = np.full(150, np.nan, np.float32)
    A.gather_index_k(cache, slots, out_k, out_s, page_size=page_size)
    for j, s in enumerate(slots):
        p, i = divmod(int(s), page_size)
        np.testing.assert_array_equal(out_k[j], cache[p, i * 128:(i + 1) * 128])
        assert out_s[j] == cache[p, page_size * 128 + 4 * i:page_size * 128 + 4 * i + 4].view(np.float32)[0]


def test_out_of_range_slot_raises(rng):
    cache = rng.integers(0, 256, size=(4, 5 * 132), dtype=np.uint8)
    out_k = np.zeros((2, 128), np.uint8)
    out_s = np.zeros(2, np.float32)
    with pytest.raises(A.Error, match="slots"):
        A.gather_index_k(cache, np.array([0, 20], np.int32), out_k, out_s, page_size=5)
    assert not out_k.any() and not out_s.any()
