"""Launchers: all processes on this machine (`run_local`), or one node's workers (`run_node`).

`run_local` is `ooblab run`: this process is the coordinator; `LocalProcesses` spawns one
worker per (node, GPU) with the *spawn* start method, lets the coordinator kill, freeze
and start workers (fencing, failure injection, trace replay, replacements, Varuna's
restarts), and always reaps them (terminate, then kill) on the way out. Workers also die
with their launcher (Linux parent-death signal), so a killed launcher leaves nothing
behind.

Workers get the job's secret through the spawn pipe (never argv or the environment).

`run_node` is the per-node launcher of a multi-machine job (`ooblab node`): it checks that
the coordinator is reachable and accepts its secret (bounded by `connect_timeout_s`), then
starts this node's workers, which connect to a coordinator elsewhere, and kills any of them the
coordinator fences (a frozen worker cannot exit by itself); torchrun can play the same
role without the fencing (`torchrun ... --max-restarts 0 -m ooblab.cli worker ...`).
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path

from planner.records import EventRecord, RunSummary

from ..config import RunConfig
from ..control.coordinator import Coordinator
from ..control.outcome import RunOutcome
from ..control.results import write_results
from ..protocol.secret import JobSecret
from ..worker.main import CONNECT_TIMEOUT_S

PR_SET_PDEATHSIG = 1
GRACE_S = 10.0  # finished job: workers are saving and tearing down
ABORT_GRACE_S = 1.0  # failed job: workers were told to exit at once
ORPHANED_EXIT = 1  # a child whose parent died before it could ask to die with it


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no-op elsewhere), and exit
    at once if the parent that spawned it is gone already: a spawned child imports its
    modules (torch among them, seconds) before its target can ask, and a parent killed in
    those seconds (an `ooblab run` stopped while 32 workers were starting) left them
    running until their connect timeout, 60 s later."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    parent = mp.parent_process()
    if parent is not None and os.getppid() != parent.pid:
        os._exit(ORPHANED_EXIT)


def _worker_entry(
    address: str, secret_hex: str, node: str, gpu: int, threads: int | None, connect_timeout_s: float, local_rank: int
) -> None:
    die_with_parent()
    # Ctrl-C reaches the terminal's whole process group: the launcher ends the run and
    # stops its workers, which would otherwise each print a KeyboardInterrupt traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from ..worker.main import exit_now, run_worker

    exit_now(
        run_worker(
            address,
            node,
            gpu,
            JobSecret(secret_hex),
            connect_timeout_s=connect_timeout_s,
            threads=threads,
            local_rank=local_rank,
        )
    )


class LocalProcesses:
    """Worker processes of this machine, started with the spawn method, keyed by pid.

    Each (node, GPU) worker slot gets a machine-local rank, the first free number when
    the slot is first started and the same for every later process of the slot (a
    replacement): the worker's CUDA device (`worker.devices`). One machine playing
    several nodes thus gives each NCCL worker its own GPU."""

    def __init__(
        self, address: str, secret: JobSecret, threads: int | None, connect_timeout_s: float = CONNECT_TIMEOUT_S
    ):
        self.address, self.threads = address, threads
        self._secret, self.connect_timeout_s = secret, connect_timeout_s
        self._ctx = mp.get_context("spawn")
        self.processes: dict[int, BaseProcess] = {}
        self.nodes: dict[int, str] = {}
        self._reported: set[int] = set()
        self._slots: dict[tuple[str, int], int] = {}

    def local_rank(self, node: str, gpu: int) -> int:
        return self._slots.setdefault((node, gpu), len(self._slots))

    def spawn(self, node: str, gpu: int) -> int:
        args = (
            self.address,
            self._secret.hex,
            node,
            gpu,
            self.threads,
            self.connect_timeout_s,
            self.local_rank(node, gpu),
        )
        process = self._ctx.Process(target=_worker_entry, args=args, name=f"{node}/gpu{gpu}", daemon=True)
        with _children_ignore_sigint():
            process.start()
        pid = process.pid
        assert pid is not None  # set by start()
        self.processes[pid] = process
        self.nodes[pid] = node
        return pid

    def owns(self, pid: int) -> bool:
        process = self.processes.get(pid)
        return process is not None and process.exitcode is None

    def signal(self, pid: int, sig: int) -> bool:
        if not self.owns(pid):
            return False
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return False
        return True

    def exited(self) -> dict[int, int]:
        out = {}
        for pid, process in self.processes.items():
            if pid not in self._reported and process.exitcode is not None:
                self._reported.add(pid)
                out[pid] = process.exitcode
        return out

    def pids_of(self, node: str) -> list[int]:
        return [pid for pid, n in self.nodes.items() if n == node and self.owns(pid)]

    def stop_all(self, grace_s: float = GRACE_S) -> None:
        """Wait up to `grace_s` for the workers to exit, then terminate, then kill; reap all."""
        stop_workers(list(self.processes.values()), grace_s)


def stop_workers(processes: list[BaseProcess], grace_s: float = GRACE_S) -> None:
    deadline = time.time() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.time()))
    for process in processes:
        if process.is_alive():
            assert process.pid is not None  # alive: started
            try:
                os.kill(process.pid, signal.SIGCONT)  # a frozen worker cannot act on SIGTERM
            except ProcessLookupError:
                pass
            process.terminate()
    deadline = time.time() + 1.0
    for process in processes:
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


@contextlib.contextmanager
def _children_ignore_sigint():
    """A worker started inside ignores Ctrl-C from its first instant (an ignored signal stays
    ignored across the spawn's exec): a terminal sends Ctrl-C to the whole process group, and
    the launcher, which owns the workers, ends them itself, in one line rather than a
    traceback from each worker's imports. Only the main thread may change a handler;
    elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def default_run_dir(root: str | Path = "results/real") -> Path:
    """results/real/<run-id>, the run id being the start time plus a random suffix."""
    return Path(root) / (time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6])


def run_local(
    config: RunConfig, out_dir: str | Path | None = None, on_event: Callable[[EventRecord], None] | None = None
) -> RunResult:
    """Coordinator here, the workers spawned here; writes the run's four files."""
    directory = Path(out_dir) if out_dir else default_run_dir()
    coordinator = Coordinator(config, bind_host="127.0.0.1", on_event=on_event, run_dir=directory)
    config = coordinator.config
    threads = default_threads(config, config.nodes * config.gpus_per_node)
    processes = LocalProcesses(coordinator.address, coordinator.secret, threads)
    outcome = None
    try:
        for node in coordinator.initial_nodes:
            for gpu in range(config.gpus_per_node):
                processes.spawn(node, gpu)
        outcome = coordinator.run(processes)
    except (KeyboardInterrupt, SystemExit) as exc:  # stopped from outside: the run so far, marked so
        coordinator.interrupted(exc)
        write_results(coordinator.outcome, directory)
        raise
    finally:
        processes.stop_all(GRACE_S if outcome is not None and outcome.status == "finished" else ABORT_GRACE_S)
        coordinator.close()
    summary, path = write_results(outcome, directory)
    return RunResult(summary, path, outcome)


def run_node(
    address: str,
    secret: JobSecret,
    node: str,
    gpus: int,
    threads: int | None = None,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
) -> int:
    """Start this node's `gpus` workers against the coordinator at `address`, kill any the
    coordinator fences, wait for them; the worst exit status wins. Raises ConnectError or
    SecretError, before starting anything, when the coordinator cannot be reached or
    refuses the secret."""
    from ..protocol import keys, transport
    from ..protocol import rendezvous as rv

    store = transport.connect(address, secret, connect_timeout_s)
    processes = LocalProcesses(address, secret, threads, connect_timeout_s)
    for gpu in range(gpus):
        processes.spawn(node, gpu)
    fenced: set[int] = set()  # pids this launcher killed on the coordinator's fence
    try:
        host = socket.gethostname()
        mine: dict[int, int] = {}  # worker id -> pid
        seen = 0
        while any(p.exitcode is None for p in processes.processes.values()):
            count = store.add(keys.WORKER_COUNT, 0)
            while seen < count and store.check([keys.worker_key(seen)]):
                try:
                    info = rv.parse_registration(store.get(keys.worker_key(seen)), seen, secret)
                    if info.host == host and info.pid in processes.processes:
                        mine[info.worker_id] = info.pid
                except rv.RegistrationRefused:
                    pass  # the coordinator logs it; nothing of this node's
                seen += 1
            for wid, pid in mine.items():
                if processes.owns(pid) and store.check([keys.fence_key(wid)]):
                    if processes.signal(pid, signal.SIGKILL):
                        fenced.add(pid)
            time.sleep(0.2)
    except Exception:  # the coordinator's store is gone (the job ended): let the workers finish
        for process in processes.processes.values():
            process.join()
    finally:
        stop_workers(list(processes.processes.values()), grace_s=0.0)
    for pid, process in processes.processes.items():
        line = worker_exit_line(process, fenced=pid in fenced)
        if line:
            print(f"ooblab node: {line}", file=sys.stderr, flush=True)
    return max(
        (p.exitcode or 0) if p.exitcode is not None and p.exitcode >= 0 else 1 for p in processes.processes.values()
    )


def worker_exit_line(process: BaseProcess, fenced: bool = False) -> str | None:
    """One line on a worker that did not end with status 0 (None when it did), so a
    launcher's non-zero status always says which worker and why."""
    code = process.exitcode
    if code == 0:
        return None
    what = f"worker {process.name} (pid {process.pid})"
    if fenced:
        return f"{what} was fenced by the coordinator and killed"
    if code is None:
        return f"{what} did not exit"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"{what} was killed by {name}"
    return f"{what} exited with status {code}"
