"""Run many configurations, in parallel, once each, into one tidy table (DESIGN 7).

An experiment is a list of `RunSpec`s. `run_sweep` gives every spec its own directory
`<out>/runs/<key>/` (key: a hash of the spec's canonical JSON), skips specs whose
`summary.json` is already there with the same configuration, runs the rest with a progress
bar, and writes `<out>/results.parquet`: one row per spec, the spec's parameters and the
run's summary side by side (nested summary fields flattened with `_`, e.g.
`breakdown_useful_compute_s`).

Backends: `local` (a process pool on this machine) and `ray` (chunks of runs as Ray
tasks, `sweep_ray`; the optional `ray` extra). Both write the same run directories and
build the table with `results_table`, so it is the same row for row.

Two sweeps into one `<out>` (two notebooks, a notebook and `ooblab reproduce`, two test
workers) take turns: a sweep holds an exclusive lock on `<out>/.sweep.lock` from its
check of finished runs to its table, so the second finds the first's runs finished
instead of running them again over the same files (POSIX `flock`; elsewhere, no lock).
"""

from __future__ import annotations

import concurrent.futures as futures
import contextlib
import functools
import json
import multiprocessing
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from planner.records import upgrade_summary

from .run_spec import Bar, Runner, RunSpec, execute_run

__all__ = ["BACKENDS", "Bar", "RunSpec", "Runner", "execute_run", "flatten", "results_table", "run_sweep", "sweep_lock"]


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a_b': 1}; lists stay as they are (Parquet stores them)."""
    flat: dict[str, Any] = {}
    for name, value in data.items():
        full = f"{prefix}{name}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{full}_"))
        else:
            flat[full] = value
    return flat


def _done(spec: RunSpec, run_dir: Path) -> Mapping[str, Any] | None:
    summary, marker = run_dir / "summary.json", run_dir / "spec.json"
    if summary.exists() and marker.exists() and marker.read_text() == spec.canonical():
        try:
            return upgrade_summary(json.loads(summary.read_text()))
        except (ValueError, AttributeError):  # a summary cut short (a full disk, a kill): run it again
            return None
    return None


BACKENDS = ("local", "ray")


def run_sweep(
    specs: Sequence[RunSpec],
    runner: Runner,
    out_dir: str | Path,
    *,
    processes: int | None = None,
    progress: bool = True,
    force: bool = False,
    backend: str = "local",
    address: str | None = None,
    chunk_size: int | None = None,
) -> pd.DataFrame:
    """Run `specs` (skipping finished ones unless `force`) and return the results table.

    `runner(spec, run_dir)` must be a module-level function (it crosses process
    boundaries), write its files into `run_dir` and return the run's summary.
    `backend="ray"` runs `chunk_size` runs per Ray task (default: `sweep_ray.auto_chunk_size`)
    on the cluster at `address` (default: a local instance of `processes` CPUs, started
    and stopped here); `processes` then caps the chunks in flight.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown sweep backend {backend!r}; known: {', '.join(BACKENDS)}")
    if backend != "ray" and (address is not None or chunk_size is not None):
        raise ValueError("address and chunk_size apply to backend='ray' only")
    out_dir = Path(out_dir)
    keys = [spec.key for spec in specs]
    if len(set(keys)) != len(keys):
        raise ValueError("the sweep holds the same run twice; give the duplicates a distinguishing parameter")
    with sweep_lock(out_dir, progress):
        return _sweep(specs, runner, out_dir, processes, progress, force, backend, address, chunk_size)


@contextlib.contextmanager
def sweep_lock(out_dir: Path, progress: bool = False):
    """Hold `<out_dir>/.sweep.lock` exclusively for the block (waiting, and saying so
    when `progress`, while another process holds it). Where the file system refuses
    locks, the block runs unlocked after a warning on stderr."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".sweep.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if progress:
                print(f"{out_dir}: another sweep is writing here; waiting for it", flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError as exc:  # a file system without locks (some NFS mounts): sweep unlocked, and say so
            print(
                f"warning: {out_dir}: cannot lock {handle.name} ({exc.strerror or exc}); "
                "two sweeps into this directory at once may run a spec twice",
                file=sys.stderr,
                flush=True,
            )
            yield
            return
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sweep(
    specs: Sequence[RunSpec],
    runner: Runner,
    out_dir: Path,
    processes: int | None,
    progress: bool,
    force: bool,
    backend: str,
    address: str | None,
    chunk_size: int | None,
) -> pd.DataFrame:
    summaries: dict[str, Mapping[str, Any]] = {}
    pending = []
    for spec in specs:
        found = None if force else _done(spec, out_dir / "runs" / spec.key)
        if found is None:
            pending.append(spec)
        else:
            summaries[spec.key] = found
    make_bar = functools.partial(_bar, len(specs), len(specs) - len(pending), progress, out_dir.name)
    if backend == "ray":
        from .sweep_ray import run_chunks

        ran = run_chunks(
            pending, runner, out_dir, address=address, processes=processes, chunk_size=chunk_size, make_bar=make_bar
        )
    else:
        ran = _run_local(pending, runner, out_dir, processes, make_bar)
    summaries.update(ran)
    table = results_table(specs, summaries)
    out_dir.mkdir(parents=True, exist_ok=True)
    table.to_parquet(out_dir / "results.parquet", index=False)
    return table


def _run_local(
    pending: Sequence[RunSpec], runner: Runner, out_dir: Path, processes: int | None, make_bar: Callable[[], Bar]
) -> dict[str, Mapping[str, Any]]:
    summaries: dict[str, Mapping[str, Any]] = {}
    workers = processes if processes is not None else min(os.cpu_count() or 1, len(pending))
    bar = make_bar()
    try:
        if workers <= 1 or len(pending) <= 1:
            for spec in pending:
                summaries[spec.key] = execute_run(runner, spec, out_dir / "runs" / spec.key)
                bar.update(1)
        else:
            context = multiprocessing.get_context("spawn")
            with futures.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
                jobs = {pool.submit(execute_run, runner, spec, out_dir / "runs" / spec.key): spec for spec in pending}
                for job in futures.as_completed(jobs):
                    summaries[jobs[job].key] = job.result()
                    bar.update(1)
    finally:
        bar.close()
    return summaries


def results_table(specs: Sequence[RunSpec], summaries: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One row per spec, in the specs' order: its parameters, then its summary flattened."""
    rows = []
    for spec in specs:
        row = {"key": spec.key, "experiment": spec.experiment, "kind": spec.kind}
        row.update(flatten(spec.params))
        for name, value in flatten(summaries[spec.key]).items():
            # A summary field named like a parameter (e.g. `model`) is kept once when equal,
            # and under `result_<name>` when the run reports something else.
            if name in row and row[name] != value:
                row[f"result_{name}"] = value
            else:
                row[name] = value
        rows.append(row)
    return pd.DataFrame(rows)


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(total: int, done: int, enabled: bool, label: str) -> Bar:
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, initial=done, desc=label, unit="run", leave=False)
