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

# Tolerances in one place.
ATOL64 = 1e-9
ATOL32 = 1e-4

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "bench" / "circuits"


@pytest.fixture
def bench_circuits() -> Path:
    if not SHARED.exists():
        pytest.skip(f"benchmark circuits not found at {SHARED} (../shared beside the checkout)")
    return SHARED


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)

