"""`benchmarks/validation_repeat.py`: two validations' real runs against each other, with
the validation's own comparison (hand-made output directories, no processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..conftest import benchmark_module


@pytest.fixture(scope="module")
def repeat():
    return benchmark_module("validation_repeat")


def _validation(out: Path, iteration_s: float, recovery: tuple[float, float], steps: int, nodes: int = 8) -> Path:
    """An output directory with one Varuna run: `steps` iterations of `iteration_s`, one of
    them stretched by a recovery from `recovery[0]` (since training start) of `recovery[1]` s."""
    fail, length = recovery
    times, t = [], 0.0
    for _ in range(steps):
        dt = iteration_s + (length if t <= fail < t + iteration_s else 0.0)
        times.append(dt)
        t += dt
    run_dir = out / "varuna" / "real"
    run_dir.mkdir(parents=True)
    done = fail + length + iteration_s
    summary = {
        "startup_s": 10.0,
        "iteration_times_s": times,
        "committed_samples": 16 * steps,
        "num_iterations": steps,
        "recoveries": [{"t_fail_s": 10.0 + fail, "t_done_s": 10.0 + done}],
    }
    (run_dir / "summary.json").write_text(json.dumps(summary))
    report = {
        "spec": {
            "trace": "fixed:interval=1h",
            "window": None,
            "nodes": nodes,
            "global_batch": 16,
            "compute": "emulated",
            "model": "synthetic",
        },  # fmt: skip
        "trace_events_s": [20.05],
        "runs": [{"policy": "varuna", "run_dir": str(run_dir), "comparison": {"samples_error": 0.1}}],
        "errors": {"samples_error": 0.1},
    }
    (out / "report.json").write_text(json.dumps(report))
    return out


def test_the_second_run_is_measured_against_the_first(repeat, tmp_path, capsys):
    first = _validation(tmp_path / "a", 0.5, (20.05, 10.0), 100)
    second = _validation(tmp_path / "b", 0.55, (20.05, 12.0), 100)  # 10% slower steps, a longer restart
    assert repeat.main(first, second) == 0
    out = capsys.readouterr().out
    headline = json.loads(out.split("real against real: ")[1].splitlines()[0])
    # throughput 1/0.55 against 1/0.5 in both phases; recovery 12.55 against 10.5 s
    assert headline["throughput_error"] == pytest.approx(1 - 0.5 / 0.55, abs=1e-9)
    assert headline["recovery_error"] == pytest.approx((12.0 + 0.55) / (10.0 + 0.5) - 1, rel=1e-6)
    assert headline["runs_compared"] == 1 and headline["phases_compared"] == 2
    # samples over the shorter (first) run: the second has fewer iterations done by then
    end = 100 * 0.5 + 10.0
    t, done = 0.0, 0
    while True:
        t += 0.55 + (12.0 if t <= 20.05 < t + 0.55 else 0.0)
        if t > end:
            break
        done += 1
    assert headline["samples_error"] == pytest.approx(abs(done / 100 - 1))


def test_validations_of_different_settings_are_refused(repeat, tmp_path, capsys):
    first = _validation(tmp_path / "a", 0.5, (20.05, 10.0), 50)
    second = _validation(tmp_path / "b", 0.5, (20.05, 10.0), 50, nodes=16)
    assert repeat.main(first, second) == 2
    assert "differ in nodes" in capsys.readouterr().err
    assert repeat.main(first, tmp_path / "nothing") == 2
