import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))


@pytest.fixture
def rng(request):
    """Seeded per test (ATTNSERVE_SEED or random); the seed is printed so failures reproduce."""
    base = int(os.environ.get("ATTNSERVE_SEED", np.random.SeedSequence().entropy % (2**32)))
    print(f"ATTNSERVE_SEED={base}")
    return np.random.default_rng([base, abs(hash(request.node.name)) % (2**32)])
