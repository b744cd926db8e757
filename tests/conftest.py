import os
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))  # tests/oracle.py

settings.register_profile("ci", max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("slow", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Tolerances in one place: bounds on rounding error, named by the precision and the depth of the computation.
# Statistical bounds computed from sample sizes are not tolerances: they stay beside their tests.
ATOL64 = 1e-9  # float64 through a circuit, an enumeration or autograd (sums over many terms)
RTOL64 = 1e-9  # float64, relative: values far from 1 (log-probabilities, gradients of long sums)
ATOL64_FEW_OPS = 1e-12  # float64 results a few operations deep (a closed form, one table, one softmax)
RTOL64_FEW_OPS = 1e-12  # the same, relative
ATOL32 = 1e-4  # float32 sums over many terms in different orders (compiled or GPU against eager float64)
ATOL32_FEW_OPS = 1e-5  # float32 (or bfloat16 inputs computed in float32) a few operations deep
RTOL32 = 1e-5  # float32, relative
ATOL32_BOARD = 1e-3  # float32 log-probabilities summed over a Sudoku board's cells and groups (~100 terms of ~10)
P_VALUE_MIN = 1e-6  # significance level of the chi-square tests of samplers: a correct one fails 1 run in 1e6

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
