"""Shared fixtures: where the reference data lives, and a clean skip when it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = Path(os.environ.get("OOBLAB_SHARED", REPO_ROOT.parent / "shared"))


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The read-only reference folder (real traces, a real profile, calibration tables).

    Tests that need it skip, saying why, when it is not beside the checkout.
    """
    if not (SHARED_DIR / "traces").is_dir():
        pytest.skip(f"reference data not found at {SHARED_DIR} (set OOBLAB_SHARED to its path)")
    return SHARED_DIR
