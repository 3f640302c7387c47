"""The sweep runner: one directory per run, finished runs skipped, one tidy table."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from experiments.sweep import RunSpec, flatten, run_sweep


def square_runner(spec: RunSpec, run_dir: Path) -> dict:
    """A small real runner: computes something from its parameters and counts its calls."""
    x = spec.params["x"]
    calls = run_dir / "calls.txt"
    calls.write_text(str(int(calls.read_text()) + 1) if calls.exists() else "1")
    return {"square": x * x, "breakdown": {"a_s": float(x), "b_s": 2.0 * x}, "x": x + 1}


def specs(n):
    return [RunSpec("demo", "test", {"x": i, "label": f"run{i}"}) for i in range(n)]


def test_results_table_and_files(tmp_path):
    table = run_sweep(specs(3), square_runner, tmp_path, processes=1, progress=False)
    assert list(table["square"]) == [0, 1, 4]
    assert list(table["breakdown_b_s"]) == [0.0, 2.0, 4.0]
    assert list(table["x"]) == [0, 1, 2] and list(table["result_x"]) == [1, 2, 3]
    stored = pd.read_parquet(tmp_path / "results.parquet")
    pd.testing.assert_frame_equal(stored, table)
    for spec in specs(3):
        assert (
            json.loads((tmp_path / "runs" / spec.key / "summary.json").read_text())["square"] == spec.params["x"] ** 2
        )


def test_finished_runs_are_skipped_and_force_reruns(tmp_path):
    run_sweep(specs(2), square_runner, tmp_path, processes=1, progress=False)
    run_sweep(specs(3), square_runner, tmp_path, processes=1, progress=False)
    calls = [int((tmp_path / "runs" / s.key / "calls.txt").read_text()) for s in specs(3)]
    assert calls == [1, 1, 1]
    run_sweep(specs(1), square_runner, tmp_path, processes=1, progress=False, force=True)
    assert (tmp_path / "runs" / specs(1)[0].key / "calls.txt").read_text() == "2"


def test_interrupted_run_is_redone(tmp_path):
    spec = specs(1)[0]
    run_dir = tmp_path / "runs" / spec.key
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text("{}")  # no spec.json: the run never finished
    table = run_sweep([spec], square_runner, tmp_path, processes=1, progress=False)
    assert table["square"][0] == 0


def test_process_pool_gives_the_same_table(tmp_path):
    serial = run_sweep(specs(4), square_runner, tmp_path / "a", processes=1, progress=False)
    parallel = run_sweep(specs(4), square_runner, tmp_path / "b", processes=2, progress=False)
    pd.testing.assert_frame_equal(serial, parallel)


def test_keys_depend_on_parameters_only():
    a = RunSpec("e1", "sim", {"x": 1, "y": [1, 2]})
    b = RunSpec("e2", "sim", {"y": [1, 2], "x": 1})
    assert a.key == b.key
    assert a.key != RunSpec("e1", "sim", {"x": 2, "y": [1, 2]}).key
    with pytest.raises(ValueError, match="same run twice"):
        run_sweep([a, b], square_runner, "/tmp/unused", processes=1, progress=False)


def test_flatten():
    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": [1]}) == {"a_b": 1, "a_c_d": 2, "e": [1]}


def slow_square_runner(spec: RunSpec, run_dir: Path) -> dict:
    """`square_runner`, slow enough that two sweeps started together overlap."""
    import time

    time.sleep(0.3)
    return square_runner(spec, run_dir)


def _sweep_into(out: str, start) -> None:
    start.wait(60)  # both sweeps begin together
    run_sweep(specs(3), slow_square_runner, Path(out), processes=1, progress=False)


@pytest.mark.timeout(120)
def test_two_processes_sweeping_into_one_directory_run_each_spec_once(tmp_path):
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(2)
    procs = [ctx.Process(target=_sweep_into, args=(str(tmp_path), start)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=90)
        if p.is_alive():
            p.kill()
    assert [p.exitcode for p in procs] == [0, 0]
    # without the lock both start before either has finished a run, and each runs all three
    assert [(tmp_path / "runs" / s.key / "calls.txt").read_text() for s in specs(3)] == ["1", "1", "1"]
    assert list(pd.read_parquet(tmp_path / "results.parquet")["square"]) == [0, 1, 4]


def test_a_file_system_without_locks_sweeps_unlocked_and_says_so(tmp_path, monkeypatch, capsys):
    import errno
    import fcntl

    def refuse(handle, how):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", refuse)
    run_sweep(specs(2), square_runner, tmp_path, processes=1, progress=False)
    assert list(pd.read_parquet(tmp_path / "results.parquet")["square"]) == [0, 1]
    err = capsys.readouterr().err
    assert "cannot lock" in err and "No locks available" in err
