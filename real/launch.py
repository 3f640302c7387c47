"""Launchers: all processes on this machine (`run_local`), or one node's workers (`run_node`).

`run_local` is `ooblab run`: this process is the coordinator; it spawns one worker per
(node, GPU) with the *spawn* start method, watches them, and always reaps them (terminate,
then kill) on the way out. Workers also die with their launcher (Linux parent-death
signal), so a killed launcher leaves nothing behind.

`run_node` is the per-node launcher of a multi-machine job (`ooblab node`): it starts this
node's workers, which connect to a coordinator elsewhere; torchrun can play the same role
(`torchrun --standalone --nnodes 1 --nproc-per-node G --max-restarts 0 -m real.worker_main`).
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from planner.records import EventRecord, RunSummary

from .config import RunConfig
from .coordinator import Coordinator, RunOutcome
from .results import write_results

PR_SET_PDEATHSIG = 1
GRACE_S = 10.0  # finished job: workers are saving and tearing down
ABORT_GRACE_S = 1.0  # failed job: workers were told to exit at once


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no-op elsewhere)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _worker_entry(address: str, node: str, gpu: int, threads: int | None) -> None:
    die_with_parent()
    from .worker import run_worker

    raise SystemExit(run_worker(address, node, gpu, threads=threads))


def start_workers(address: str, slots: list[tuple[str, int]], threads: int | None) -> dict[str, mp.Process]:
    ctx = mp.get_context("spawn")
    processes = {}
    for node, gpu in slots:
        process = ctx.Process(target=_worker_entry, args=(address, node, gpu, threads), name=f"{node}/gpu{gpu}", daemon=True)
        process.start()
        processes[process.name] = process
    return processes


def stop_workers(processes: dict[str, mp.Process], grace_s: float = GRACE_S) -> None:
    """Wait up to `grace_s` for the workers to exit, then terminate, then kill; reap all."""
    deadline = time.time() + grace_s
    for process in processes.values():
        process.join(max(0.0, deadline - time.time()))
    for process in processes.values():
        if process.is_alive():
            process.terminate()
    deadline = time.time() + 1.0
    for process in processes.values():
        process.join(max(0.0, deadline - time.time()))
        if process.is_alive():
            process.kill()
            process.join()


def default_threads(config: RunConfig, workers_here: int) -> int:
    """Intra-op threads per worker: this machine's cores shared out, at least one."""
    if config.threads_per_worker:
        return config.threads_per_worker
    return max(1, (os.cpu_count() or 1) // max(1, workers_here))


@dataclass(frozen=True)
class RunResult:
    summary: RunSummary
    directory: Path
    outcome: RunOutcome

    @property
    def ok(self) -> bool:
        return self.outcome.status == "finished"


def default_run_dir(root: str | Path = "results/real") -> Path:
    """results/real/<run-id>, the run id being the start time plus a random suffix."""
    return Path(root) / (time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6])


def run_local(config: RunConfig, out_dir: str | Path | None = None, on_event: Callable[[EventRecord], None] | None = None) -> RunResult:
    """Coordinator here, nodes x GPUs workers spawned here; writes the run's four files."""
    coordinator = Coordinator(config, bind_host="127.0.0.1", on_event=on_event)
    slots = [(node, gpu) for node in config.node_names() for gpu in range(config.gpus_per_node)]
    threads = default_threads(config, len(slots))
    processes: dict[str, mp.Process] = {}
    outcome = None
    try:
        processes = start_workers(coordinator.address, slots, threads)
        outcome = coordinator.run(alive=lambda: {name: p.exitcode for name, p in processes.items()})
    finally:
        stop_workers(processes, GRACE_S if outcome is not None and outcome.status == "finished" else ABORT_GRACE_S)
        coordinator.close()
    directory = Path(out_dir) if out_dir else default_run_dir()
    summary, path = write_results(outcome, directory)
    return RunResult(summary, path, outcome)


def run_node(address: str, node: str, gpus: int, threads: int | None = None) -> int:
    """Start this node's `gpus` workers against the coordinator at `address`; wait for
    them; the worst exit status wins."""
    processes = start_workers(address, [(node, gpu) for gpu in range(gpus)], threads)
    try:
        for process in processes.values():
            process.join()
    finally:
        stop_workers(processes, grace_s=0.0)
    return max((p.exitcode or 0) if p.exitcode is not None and p.exitcode >= 0 else 1 for p in processes.values())
