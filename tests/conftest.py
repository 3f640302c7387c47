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
    if str(REPO_ROOT / "benchmarks") not in sys.path:  # as when run as a script: its siblings import
        sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
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
# the fixture is built once. Everything else is spread test by test. pytest-xdist's own
# loadgroup reads `xdist_group` marks from the node ids it rewrites, which pytest 9.2 no
# longer reads back, so every test was its own group: the notebook of the validation then
# waited about 190 s, in the other worker, on the sweep lock of the quick validation that
# test_reproduce was running (the lock stays: a run without xdist, or another dist mode,
# still shares the tree on disk, `quick_results_dir`). The scheduler below groups by path.
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


# -- left out of CI (`-m "not slow"` in pyproject; `pytest -m slow` runs them) --------------
# CI's 20 minutes on 2 cores are spent mostly starting processes that import torch (about
# 6 CPU-s each with the pipelining schedules); these real-backend tests repeat, through
# another door, a path that the named CI test takes with the same signal or schedule.
SLOW: dict[str, tuple[str, ...]] = {  # a test left out -> the CI tests covering it
    # the same SIGKILL, sent by the failure probe
    "tests/real/test_real_launch.py::test_a_worker_killed_or_frozen_by_hand_is_survived[kill]": (
        "tests/real/test_real_recovery.py::test_crashes_at_every_point_one_after_another",
    ),
    # the same SIGSTOP, on three workers
    "tests/real/test_real_launch.py::test_a_worker_killed_or_frozen_by_hand_is_survived[hang]": (
        "tests/real/test_real_recovery.py::test_hangs_are_detected_fenced_and_survived",
    ),
    # the general case of both: unequal pipelines and microbatches
    "tests/real/test_real_correctness.py::test_one_pipeline_matches_single_process": (
        "tests/real/test_real_correctness.py::test_heterogeneous_pipelines_with_unequal_microbatches_match_single_process",
    ),
    "tests/real/test_real_correctness.py::test_two_homogeneous_pipelines_match_single_process": (
        "tests/real/test_real_correctness.py::test_heterogeneous_pipelines_with_unequal_microbatches_match_single_process",
    ),
    # the hang on a Hugging Face model: the same freeze as tiny-gpt's, after the HF crash
    "tests/real/test_real_hf_run.py::test_a_crash_mid_backward_and_a_second_failure_are_survived_exactly[hang]": (
        "tests/real/test_real_hf_run.py::test_a_crash_mid_backward_and_a_second_failure_are_survived_exactly[step-boundary]",
        "tests/real/test_real_recovery.py::test_hangs_are_detected_fenced_and_survived",
    ),
    # the stalled teardown on a Hugging Face model: tiny-gpt's replacement, the HF state carried
    # to fresh processes as Varuna's restart carries it
    "tests/real/test_real_hf_run.py::test_a_worker_stalled_in_its_teardown_is_replaced_from_a_replica_exactly": (
        "tests/real/test_real_recovery.py::test_a_worker_that_cannot_tear_down_is_replaced_from_a_replica",
        "tests/real/test_real_hf_run.py::test_restarts_from_a_checkpoint_or_peers_memory_are_exact[varuna]",
    ),
    # GEMINI's restart on a Hugging Face model: the HF state through Varuna's restart, GEMINI's
    # memory path on tiny-gpt
    "tests/real/test_real_hf_run.py::test_restarts_from_a_checkpoint_or_peers_memory_are_exact[gemini]": (
        "tests/real/test_real_hf_run.py::test_restarts_from_a_checkpoint_or_peers_memory_are_exact[varuna]",
        "tests/real/test_real_gemini.py::test_two_failures_restart_from_the_copy_in_the_survivors_memory",
    ),
    # a link cut as a recovery begins: the cut on its own, a failure during a reconfiguration
    "tests/real/test_real_netns.py::test_a_link_cut_during_a_recovery_is_survived_exactly": (
        "tests/real/test_real_netns.py::test_a_cut_link_is_survived_exactly_and_when_restored_its_node_is_fenced",
        "tests/real/test_real_recovery.py::test_f_simultaneous_crashes_then_one_during_the_reconfiguration",
    ),
    # SIGTERM takes the path Ctrl-C takes (a SystemExit where Ctrl-C is a KeyboardInterrupt)
    "tests/real/test_real_interrupted.py::test_an_interrupted_run_says_so_and_keeps_its_record[sigterm-143]": (
        "tests/real/test_real_interrupted.py::test_an_interrupted_run_says_so_and_keeps_its_record[ctrl-c-130]",
    ),
    # a Llama-shaped family on the backend: Llama's run through a crash, Qwen2's layers exactly
    "tests/real/test_real_hf_run.py::test_heterogeneous_pipelines_train_the_model_as_one_process[qwen2]": (
        "tests/real/test_real_hf_run.py::test_a_crash_mid_backward_and_a_second_failure_are_survived_exactly[step-boundary]",
        "tests/real/test_real_hf_models.py::test_weights_from_a_directory_compute_what_transformers_loads_from_it",
    ),
    # the torn checkpoint at the state level, the restart from a checkpoint end to end
    "tests/real/test_real_checkpoint_faults.py::"
    "test_writers_killed_between_their_files_and_the_manifest_restart_from_the_newest_complete_one": (
        "tests/real/test_real_checkpoints.py::test_a_writer_killed_between_its_files_and_the_manifest_leaves_the_last_checkpoint",
        "tests/real/test_real_recovery.py::test_more_than_f_failures_restart_from_the_last_checkpoint",
    ),
    # the GPU check's harness on the CPU: its jobs are the backend's crash, hang and HF runs
    "tests/real/test_real_gpu_path.py::test_gpu_check_dry_runs_its_cpu_parts_on_the_cpu": (
        "tests/real/test_real_recovery.py::test_hangs_are_detected_fenced_and_survived",
        "tests/real/test_real_hf_run.py::test_a_crash_mid_backward_and_a_second_failure_are_survived_exactly[step-boundary]",
    ),
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid in SLOW:
            item.add_marker(pytest.mark.slow)


def worker_group(nodeid: str) -> str:
    """The unit of work a test belongs to under `--dist loadgroup`: its group, else itself."""
    path = nodeid.split("::", 1)[0]
    if path in QUICK_RESULTS:
        return "quick-results"
    if path in ONE_WORKER_MODULES:
        return path
    return nodeid


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadgroup":
        return None  # another dist mode asked for: xdist's own

    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class ByGroup(LoadScopeScheduling):
        """xdist's scope scheduling, its scopes being `worker_group`'s."""

        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    return ByGroup(config, log)
