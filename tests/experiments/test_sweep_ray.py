"""The sweep's Ray backend: the same table as the local pool, row for row, from chunks of
runs on a local Ray instance (num_cpus=2, started once for the module by the backend's
own `ray_session`, which must leave no process or port behind); and, without ray, one
line saying how to install it."""

from __future__ import annotations

import contextlib
import io
import math
import os
import socket
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from experiments import sweep_ray
from experiments.reproduce import results
from experiments.sweep import run_sweep
from experiments.sweep_ray import CHUNKS_PER_CPU, MAX_CHUNK_RUNS, SweepBackendError, auto_chunk_size, run_chunk
from ooblab.cli import main

from .test_sweep import specs, square_runner


def _descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rpartition(")")[2].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its exit status is left


@pytest.fixture(scope="module")
def ray_local():
    pytest.importorskip("ray")
    before = _descendants(os.getpid())
    said = io.StringIO()
    with contextlib.ExitStack() as stack:
        with contextlib.redirect_stderr(said):
            ray = stack.enter_context(sweep_ray.ray_session(None, 2))
        assert "starting a local Ray instance (2 CPUs, no dashboard)" in said.getvalue()
        assert ray.cluster_resources()["CPU"] == 2
        gcs_host, _, gcs_port = ray.get_runtime_context().gcs_address.rpartition(":")
        # Ray's own processes (GCS, raylet, ...; not e.g. multiprocessing's resource tracker
        # that a local pool starts later), and at the end the workers they started
        ours = _descendants(os.getpid()) - before
        assert ours  # so the check below can fail
        yield ray
        started = ours.union(*(_descendants(pid) for pid in ours))
    assert not ray.is_initialized()
    deadline = time.monotonic() + 15
    while any(_alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in started if _alive(pid)], "Ray left processes behind"
    with pytest.raises(OSError):
        socket.create_connection((gcs_host, int(gcs_port)), timeout=2).close()


def test_ray_table_equals_the_local_pools_row_for_row(ray_local, tmp_path):
    local = run_sweep(specs(10), square_runner, tmp_path / "local", processes=2, progress=False)
    on_ray = run_sweep(specs(10), square_runner, tmp_path / "ray", progress=False, backend="ray", chunk_size=3)
    pd.testing.assert_frame_equal(on_ray, local)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "ray" / "results.parquet"), local)
    left = sorted(p.name for p in (tmp_path / "ray").iterdir() if p.name != ".sweep.lock")  # the sweeps' lock stays
    assert left == ["results.parquet", "runs"]  # parts merged, gone
    for spec in specs(10):
        assert (tmp_path / "ray" / "runs" / spec.key / "calls.txt").read_text() == "1"


def test_reproduce_on_ray_equals_the_local_pool(ray_local, tmp_path, monkeypatch, capsys):
    """A real experiment (12 simulations, 3 chunks), through the CLI, on the module's Ray session."""
    monkeypatch.setenv("OOBLAB_RESULTS", str(tmp_path))
    ray_dir = tmp_path / "ray"
    cli = ["reproduce", "real-traces", "--quick", "--no-progress", "--backend", "ray", "--chunk-size", "5"]
    assert main([*cli, "--out", str(ray_dir)]) == 0
    assert "real-traces: 12 runs" in capsys.readouterr().out
    results("real-traces", quick=True, out_dir=tmp_path / "local", processes=1, progress=False)
    pd.testing.assert_frame_equal(
        pd.read_parquet(ray_dir / "results.parquet"), pd.read_parquet(tmp_path / "local" / "results.parquet")
    )
    assert list(ray_dir.glob("*.png")) and not (ray_dir / "parts").exists()


def test_finished_runs_are_skipped_and_force_reruns(ray_local, tmp_path):
    run_sweep(specs(2), square_runner, tmp_path, processes=1, progress=False)  # local first: same directories
    run_sweep(specs(5), square_runner, tmp_path, progress=False, backend="ray", chunk_size=2)
    assert [int((tmp_path / "runs" / s.key / "calls.txt").read_text()) for s in specs(5)] == [1] * 5
    run_sweep(specs(1), square_runner, tmp_path, progress=False, force=True, backend="ray")
    assert (tmp_path / "runs" / specs(1)[0].key / "calls.txt").read_text() == "2"


class _Recorder:
    def __init__(self):
        self.updates: list[int] = []
        self.closed = False

    def update(self, n: int) -> None:
        self.updates.append(n)

    def close(self) -> None:
        self.closed = True


def test_progress_moves_per_finished_chunk(ray_local, tmp_path):
    bar = _Recorder()
    done = sweep_ray.run_chunks(
        specs(7), square_runner, tmp_path, address=None, processes=None, chunk_size=3, make_bar=lambda: bar
    )
    assert sorted(bar.updates) == [1, 3, 3] and bar.closed
    assert sorted(done) == sorted(s.key for s in specs(7))
    assert done[specs(7)[4].key]["square"] == 16


def test_an_unreachable_address_is_one_line(ray_local, capsys):
    with socket.socket() as sock:  # a port the OS chose, then freed: nobody listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(SweepBackendError, match=f"cannot reach the Ray cluster at 127.0.0.1:{port}"):
        sweep_ray._check_reachable(f"127.0.0.1:{port}")


# -- without a Ray instance --------------------------------------------------------------


def test_without_ray_the_backend_says_how_to_install_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if it were not installed
    with pytest.raises(SweepBackendError, match=r"pip install -e '\.\[ray\]'"):
        run_sweep(specs(2), square_runner, tmp_path, progress=False, backend="ray")
    assert not (tmp_path / "runs").exists()
    monkeypatch.setenv("OOBLAB_RESULTS", str(tmp_path))
    assert main(["reproduce", "cost", "--quick", "--backend", "ray"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ooblab reproduce: error:" in err and "pip install -e '.[ray]'" in err
    assert not list(tmp_path.rglob("summary.json"))


def test_bad_backend_options_are_named(capsys):
    assert main(["reproduce", "cost", "--quick", "--address", "10.0.0.1:6379"]) == 2
    assert "--address and --chunk-size apply to --backend ray only" in capsys.readouterr().err
    assert main(["reproduce", "cost", "--quick", "--backend", "ray", "--chunk-size", "0"]) == 2
    assert "--chunk-size must be >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown sweep backend"):
        run_sweep(specs(1), square_runner, "/tmp/unused", progress=False, backend="dask")


def test_a_chunk_that_cannot_see_the_results_directory_says_so(tmp_path):
    with pytest.raises(SweepBackendError, match="cannot see the results directory"):
        run_chunk(square_runner, specs(1), str(tmp_path), str(tmp_path / "parts" / "gone" / "part-000000.parquet"))
    assert not (tmp_path / "runs").exists()


@given(pending=st.integers(1, 100_000), cpus=st.integers(1, 512))
def test_auto_chunk_size_is_the_smallest_with_at_most_four_chunks_per_cpu(pending, cpus):
    size = auto_chunk_size(pending, cpus)
    smallest = next(s for s in range(1, pending + 1) if math.ceil(pending / s) <= CHUNKS_PER_CPU * cpus)
    assert size == min(MAX_CHUNK_RUNS, smallest)
