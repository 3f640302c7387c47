"""What a real run did, as the coordinator records it (times: seconds since it started).

`RunOutcome` collects the committed iterations (their end times and global losses; a
restart from a checkpoint truncates them to the checkpoint's step), the generations
published, the recoveries (`recovery.Recovery`), counters, the timeline rows and the
events; `results` turns it into the shared run record.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from planner.records import EventRecord, TimelineRow

from ..config import RunConfig
from ..protocol.layout import Layout
from .cpu_meter import CpuReading, read_cpu
from .recovery import Recovery


def committed_samples(outcome: RunOutcome) -> int:
    """Samples of the committed steps: the global batch each, or the part a step's layout
    trained on."""
    mb = outcome.config.microbatch_size
    return sum(
        outcome.config.global_batch if r is None else sum(count for _, count in r) * mb for r in outcome.step_ranges
    )


def headline(traceback_text: str) -> str:
    """'worker 3 (node1 gpu 0, pid 42): RuntimeError: ...' from a reported traceback."""
    lines = [line for line in traceback_text.strip().splitlines() if line.strip()]
    first = lines[0].rstrip(":") if lines else "a worker"
    return f"{first}: {lines[-1].strip()}" if len(lines) > 1 else first


class JobFailed(RuntimeError):
    """The job cannot go on (a fatal worker error, no nodes left, nothing registered)."""


@dataclass
class RunOutcome:
    config: RunConfig
    t0_wall: float
    status: str = "running"
    reason: str = ""
    plan: Any = None  # the plan of the last generation published
    initial_plan: Any = None
    layout: Layout | None = None
    workers: list = field(default_factory=list)
    planned_s: float | None = None
    ready_s: float | None = None  # training first started
    step_end_s: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    # per committed step, the (first microbatch, count) ranges its layout trained on when
    # that was part of the batch (replica groups with groups out); None: the whole batch
    step_ranges: list[tuple[tuple[int, int], ...] | None] = field(default_factory=list)
    schedules: dict[int, str] = field(default_factory=dict)
    end_s: float | None = None
    events: list[EventRecord] = field(default_factory=list)
    rows: list[TimelineRow] = field(default_factory=list)
    recoveries: list[Recovery] = field(default_factory=list)
    # planned stops that changed the plan with nobody lost (a join: replica groups' quorum
    # growing, Oobleck's morph): step, the last commit before it (`t_stop_s`), the new
    # generation's readiness (`t_ready_s`) and the decision's actions
    planned_stops: list[dict[str, Any]] = field(default_factory=list)
    generations: int = 0
    reconfigurations: int = 0
    restarts: int = 0
    checkpoints: int = 0
    failed_checkpoints: list[int] = field(default_factory=list)  # the step of each failed checkpoint
    checkpoint_accounts: list = field(default_factory=list)  # checkpoint_accounting.CheckpointAccount, in order
    failures_survived: int = 0
    lost_iterations: int = 0
    injections_fired: list[int] = field(default_factory=list)
    # --inject entries the coordinator was to carry out that the run ended before
    injections_not_fired: list[str] = field(default_factory=list)
    design_options: dict[str, Any] = field(default_factory=dict)  # the design's options as built
    # the machine's CPU counters at the start of training and at each commit, by the time
    # (s) they stand for (`ready_s`, a `step_end_s`); `cpu_meter`
    cpu_at_s: dict[float, CpuReading | None] = field(default_factory=dict)
    listener: Callable[[EventRecord], None] | None = None

    def now_s(self) -> float:
        return time.time() - self.t0_wall

    def note_cpu(self, t_s: float) -> None:
        """Read the machine's CPU counters for the moment `t_s` (training's start, a commit)."""
        self.cpu_at_s[t_s] = read_cpu()

    def event(self, kind: str, **detail) -> None:
        record = EventRecord(self.now_s(), kind, detail)
        self.events.append(record)
        if self.listener is not None:
            self.listener(record)
