"""Shared fixtures: where the reference data lives, and a clean skip when it is absent."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
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


def benchmark_module(name: str):
    """`benchmarks/<name>.py` imported as a module (the benchmarks are scripts, not a
    package), registered under `name` so that its dataclasses and pickling work."""
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "benchmarks" / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"no benchmark script {name!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def quick_results_dir(tmp_path_factory) -> Path:
    """The session's quick-results tree: the one test_reproduce fills and the notebooks,
    the scale tests and the quick validation read. One for the whole session, shared by
    pytest-xdist's workers (their base temporary directories are siblings): the sweeps
    into it take turns (`experiments.sweep.sweep_lock`), so each experiment's quick setting
    runs once, not once per worker (the quick validation alone takes about 4 minutes)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "ooblab-quick-results"


@contextlib.contextmanager
def session_quick_results(tmp_path_factory):
    """`$OOBLAB_RESULTS` pointed at the session's quick-results tree (`quick_results_dir`)
    for the block; for module-scoped fixtures, which cannot use monkeypatch."""
    path = quick_results_dir(tmp_path_factory)
    old = os.environ.get("OOBLAB_RESULTS")
    os.environ["OOBLAB_RESULTS"] = str(path)
    try:
        yield path
    finally:
        if old is None:
            os.environ.pop("OOBLAB_RESULTS")
        else:
            os.environ["OOBLAB_RESULTS"] = old


# -- running in two processes (pytest-xdist, `-n 2 --dist loadgroup` in the test command) ----
# Tests that share the session's quick-results tree (every experiment's quick setting, run
# once by test_reproduce and read by the notebooks, the scale tests and the quick
# validation) run in one worker, in collection order; a module whose fixture is costly and
# module-scoped (a local Ray instance, a campaign, a big trace) runs in one worker too, so
# the fixture is built once. Everything else is spread test by test. Without xdist these
# marks do nothing. pytest 9.2 with pytest-xdist 3.8 ignores them (xdist writes the group
# into `item._nodeid`, which pytest 9.2 no longer reads), so the quick-results tree is
# also shared between the workers on disk (`quick_results_dir`), where sweeps take turns.
QUICK_RESULTS = {
    "tests/experiments/test_reproduce.py",
    "tests/experiments/test_scale.py",
    "tests/notebooks/test_notebooks.py",
    "tests/validation/test_validate_quick.py",
}
ONE_WORKER_MODULES = {
    "tests/experiments/test_sweep_ray.py",
    "tests/real/test_failure_campaign.py",
    "tests/sim/test_sim_artifact_as_run.py",
    "tests/traces/test_traces_datacenter.py",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if path in QUICK_RESULTS:
            item.add_marker(pytest.mark.xdist_group("quick-results"))
        elif path in ONE_WORKER_MODULES:
            item.add_marker(pytest.mark.xdist_group(path))
