from __future__ import annotations

import pytest

from planner.oobleck_format import load_oobleck_profile


@pytest.fixture(scope="session")
def gpt2_profile(shared_dir):
    return load_oobleck_profile(shared_dir / "traces/profiles/gpt2-xl-h-oobleck")
