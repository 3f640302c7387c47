"""The background checkpoint writer of one worker, and what it reports.

`CheckpointWriter.submit` takes copies of the layers at a commit (the only synchronous
part) and queues them; a thread saves them (`checkpoint.save_layer`: durable) and reports
each layer written, or the checkpoint failed with its reason, through `CheckpointReports`
(the worker's store keys, on a connection of the writer's own). The queue holds one job
besides the one being written, so memory holds at most three copies; a submit waits at
most `timeout_s` for room, and not at all when the job being written has already taken
longer than that (a stalled disk): the new checkpoint is then failed at once, so a hung
file system costs checkpoints, never the training loop.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..config import CheckpointFault
from .checkpoint import DEV_FULL, save_layer
from .layer_state import LayerState
from .staging import stage_state


@dataclass(frozen=True)
class CheckpointJob:
    """Layer copies for attempt `attempt` of the checkpoint of step `step` in `generation`."""

    generation: int
    attempt: int
    step: int
    states: tuple[LayerState, ...]


class CheckpointReports(Protocol):
    def written(self, job: CheckpointJob, layer: int) -> None: ...
    def failed(self, job: CheckpointJob, reason: str) -> None: ...


class CheckpointWriter:
    """One background thread writing `CheckpointJob`s into `directory`, in order."""

    def __init__(
        self, directory: str | Path, reports: CheckpointReports, faults: Sequence[CheckpointFault] = (), node: str = ""
    ):
        self.directory = Path(directory)
        self._reports = reports
        self._faults = [f for f in faults if f.node in (None, node)]
        self._jobs: queue.Queue = queue.Queue(maxsize=1)
        self._busy_since: float | None = None  # wall clock the job being written started
        self._thread = threading.Thread(target=self._run, name="checkpoint-writer", daemon=True)
        self._thread.start()

    def submit(
        self, generation: int, attempt: int, step: int, states: Iterable[LayerState], timeout_s: float
    ) -> str | None:
        """Queue copies of `states` (the caller's tensors may change right after); None,
        or why the checkpoint failed at once (the writer is stalled)."""
        busy = self._busy_since
        if busy is not None and time.time() - busy > timeout_s and self._jobs.full():
            return f"the writer has been busy for {time.time() - busy:.1f} s on an earlier checkpoint (stalled disk?)"
        job = CheckpointJob(
            generation, attempt, step, tuple(stage_state(s) for s in states)
        )  # host copies, pinned for GPU layers
        try:
            self._jobs.put(job, timeout=timeout_s)
        except queue.Full:
            return (
                f"no room in the writer's queue within {timeout_s:.1f} s (an earlier checkpoint is still being written)"
            )
        return None

    def flush(self, timeout_s: float = 60.0) -> bool:
        """Wait until everything submitted is written (or failed); False on timeout."""
        deadline = time.time() + timeout_s
        while self._jobs.unfinished_tasks and time.time() < deadline:
            time.sleep(0.01)
        return not self._jobs.unfinished_tasks

    def _fault(self, step: int) -> str | None:
        for fault in self._faults:
            if fault.step == step:
                self._faults.remove(fault)  # at most once per process
                return fault.kind
        return None

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            self._busy_since = time.time()
            try:
                self._write(job)
            except Exception as exc:  # a failed write costs this checkpoint, which the coordinator learns
                self._report(self._reports.failed, job, f"{type(exc).__name__}: {exc}")
            finally:
                self._busy_since = None
                self._jobs.task_done()

    def _write(self, job: CheckpointJob) -> None:
        fault = self._fault(job.step)
        if fault == "hang":
            threading.Event().wait()  # never returns
        for i, state in enumerate(job.states):
            save_layer(self.directory, state, sink=DEV_FULL if fault == "full" and i == 0 else None)
        if fault == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        for state in job.states:
            self._report(self._reports.written, job, state.layer)

    @staticmethod
    def _report(method, *args) -> None:
        try:
            method(*args)
        except Exception as exc:  # the coordinator is gone: the heartbeat thread ends the process
            print(f"ooblab worker {os.getpid()}: cannot report a checkpoint: {exc!r}", file=sys.stderr, flush=True)
