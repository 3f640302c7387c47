"""The sweep's Ray backend: runs grouped in chunks, one Ray task and one Parquet part each.

A sweep of 10^5 simulations is too many for one task per run (Ray's per-task cost would
rival a short run's) and too many rows to funnel through the driver one by one. So
`run_chunks` cuts the pending runs into chunks (`auto_chunk_size`: about four chunks per
CPU of the cluster, at most `MAX_CHUNK_RUNS` runs each), and each chunk, a Ray task:

1. runs its specs with `run_spec.execute_run`, exactly as the local pool does, so every run
   gets its directory `<out>/runs/<key>/` and finished runs are skipped next time;
2. writes its part `<out>/parts/<sweep id>/part-NNNNNN.parquet`: one row per run (key,
   canonical spec, summary as JSON text, which round-trips the summary's types exactly);
3. returns the part's path and its run count (the progress bar moves per finished chunk).

The driver then reads the parts, checks that every pending run is there exactly once, and
deletes them; `sweep.results_table` builds the table from the summaries, as it does for
the local pool. Workers must see the results directory at the same path (one machine, or
a filesystem every Ray node mounts); a chunk that cannot see it fails at once, saying so.

`ray_session` starts a local instance (no dashboard) only when no address is given, and
says so; it stops what it started. ray is an optional extra: without it the backend is a
`SweepBackendError` naming the install command.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from .run_spec import Bar, Runner, RunSpec, execute_run

MAX_CHUNK_RUNS = 200  # runs per task at most: hundreds amortise Ray's per-task cost
CHUNKS_PER_CPU = 4  # several chunks per CPU so that a slow chunk does not hold up the end
INSTALL_HINT = "pip install -e '.[ray]' (or pip install 'ray>=2.9')"
_FORWARDED_ENV = ("OOBLAB_SHARED",)  # what runners read from the environment (experiments.paths)


class SweepBackendError(RuntimeError):
    """The Ray backend cannot run here: ray missing, a cluster out of reach, or a results
    directory the workers cannot see. A setup problem, not a bug (the CLI exits 2)."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise SweepBackendError(f"the ray sweep backend needs the optional ray package: {INSTALL_HINT}") from None
    return ray


@contextmanager
def ray_session(address: str | None, num_cpus: int | None) -> Iterator[Any]:
    """Ray, connected: to `address`, or to a local instance started here (and stopped on
    the way out); a session this process already holds is used as it is."""
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    if address is None:
        cpus = num_cpus or os.cpu_count() or 1
        print(
            f"sweep: starting a local Ray instance ({cpus} CPUs, no dashboard); pass an address to use a running cluster",
            file=sys.stderr,
            flush=True,
        )
        ray.init(address="local", num_cpus=cpus, include_dashboard=False, logging_level="WARNING")
    else:
        _check_reachable(address)
        try:
            ray.init(address=address, logging_level="WARNING")
        except (ConnectionError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SweepBackendError(f"cannot join the Ray cluster at {address}: {first}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast on a HOST:PORT nobody listens on (ray.init would retry for minutes);
    `auto` and `ray://` addresses are left to Ray."""
    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise SweepBackendError(
            f"cannot reach the Ray cluster at {address}: {exc.strerror or exc} (is `ray start --head` running there?)"
        ) from None


def auto_chunk_size(pending: int, cpus: int) -> int:
    """Runs per chunk: about `CHUNKS_PER_CPU` chunks per CPU, 1 to `MAX_CHUNK_RUNS` runs."""
    return max(1, min(MAX_CHUNK_RUNS, math.ceil(pending / (CHUNKS_PER_CPU * max(1, cpus)))))


def chunks(specs: Sequence[RunSpec], size: int) -> list[list[RunSpec]]:
    return [list(specs[start : start + size]) for start in range(0, len(specs), size)]


def run_chunk(runner: Runner, specs: Sequence[RunSpec], out_dir: str, part_path: str) -> tuple[str, int]:
    """One Ray task: run `specs` into `out_dir/runs/`, write their part, return (part, runs)."""
    part = Path(part_path)
    if not part.parent.is_dir():  # made by the driver just before: absent means another filesystem
        raise SweepBackendError(
            f"Ray node {socket.gethostname()} cannot see the results directory {out_dir}: "
            "the ray backend needs it on a filesystem every Ray node mounts at the same path"
        )
    rows = []
    for spec in specs:
        summary = execute_run(runner, spec, Path(out_dir) / "runs" / spec.key)
        rows.append({"key": spec.key, "spec": spec.canonical(), "summary": json.dumps(summary)})
    tmp = part.with_name(part.name + ".tmp")
    pd.DataFrame(rows, columns=["key", "spec", "summary"]).to_parquet(tmp, index=False)
    os.replace(tmp, part)
    return str(part), len(rows)


def run_chunks(
    pending: Sequence[RunSpec],
    runner: Runner,
    out_dir: Path,
    *,
    address: str | None,
    processes: int | None,
    chunk_size: int | None,
    make_bar: Callable[[], Bar],
) -> dict[str, Mapping[str, Any]]:
    """The summaries of `pending`, run on Ray in chunks (see the module's docstring)."""
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if processes is not None and processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    import_ray()  # a missing ray is named before anything starts
    if not pending:
        make_bar().close()
        return {}
    out_dir = Path(out_dir).resolve()
    part_dir = out_dir / "parts" / uuid.uuid4().hex[:12]
    part_dir.mkdir(parents=True)
    try:
        with ray_session(address, processes) as ray:
            cpus = int(ray.cluster_resources().get("CPU", 1))
            in_flight = min(cpus, processes) if processes is not None else cpus
            size = chunk_size or auto_chunk_size(len(pending), in_flight)
            parts = _submit_all(ray, runner, chunks(pending, size), out_dir, part_dir, processes, make_bar)
        return _merge(parts, pending)
    finally:
        shutil.rmtree(part_dir, ignore_errors=True)
        try:
            part_dir.parent.rmdir()  # `parts/` goes too once no sweep is using it
        except OSError:
            pass


def _submit_all(
    ray: Any,
    runner: Runner,
    todo: list[list[RunSpec]],
    out_dir: Path,
    part_dir: Path,
    cap: int | None,
    make_bar: Callable[[], Bar],
) -> list[Path]:
    """Submit the chunks (at most `cap` in flight), collect their parts as they finish."""
    env = {name: os.environ[name] for name in _FORWARDED_ENV if name in os.environ}
    task = ray.remote(num_cpus=1)(run_chunk).options(runtime_env={"env_vars": env} if env else None)
    waiting = list(enumerate(todo))
    flying: dict[Any, int] = {}
    parts: list[Path] = []
    bar = make_bar()
    try:
        while waiting or flying:
            while waiting and (cap is None or len(flying) < cap):
                index, specs = waiting.pop(0)
                ref = task.remote(runner, specs, str(out_dir), str(part_dir / f"part-{index:06d}.parquet"))
                flying[ref] = index
            ready, _ = ray.wait(list(flying), num_returns=1)
            for ref in ready:
                del flying[ref]
                try:
                    path, runs = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    if isinstance(exc.cause, SweepBackendError):
                        raise exc.cause from None
                    raise
                parts.append(Path(path))
                bar.update(runs)
    finally:
        for ref in flying:
            ray.cancel(ref)
        bar.close()
    return parts


def _merge(parts: Sequence[Path], pending: Sequence[RunSpec]) -> dict[str, Mapping[str, Any]]:
    """The summaries in the parts, checked to be exactly the pending runs'."""
    table = pd.concat([pd.read_parquet(path) for path in parts], ignore_index=True)
    expected = {spec.key: spec.canonical() for spec in pending}
    found = dict(zip(table["key"], table["spec"]))
    if len(table) != len(expected) or found != expected:
        missing = sorted(set(expected) - set(found))[:3]
        raise RuntimeError(
            f"internal error: the Ray chunks' parts hold {len(table)} runs, not the {len(expected)} submitted"
            f" (missing e.g. {missing})"
        )
    return {key: json.loads(text) for key, text in zip(table["key"], table["summary"])}
