import os
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent / "helpers"))  # oracle, assertions, tiny models, tolerances

settings.register_profile("ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("slow", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

from tolerances import ATOL64  # noqa: E402,F401  (the tolerances live in tests/helpers/tolerances.py)

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "bench" / "circuits"


@pytest.fixture
def bench_circuits() -> Path:
    if not SHARED.exists():
        pytest.skip(f"benchmark circuits not found at {SHARED} (../shared beside the checkout)")
    return SHARED


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def float64_default():
    """torch's default dtype float64 for the test (brute-force comparisons), restored after it."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.fixture
def one_thread():
    """torch on one thread for the test (many small calls: two threads on a loaded 2-core machine made them ten
    times slower), the caller's setting restored after it."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
