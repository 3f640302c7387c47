"""The job as it runs: the state the coordinator and its recovery flow share.

One owner: the coordinator creates a `JobState` and hands it to `RecoveryFlow`; nothing
else writes it. Everything either of them reads about the job's progress is a field
here, so no part of the control side keeps job state behind `hasattr`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.policies import Decision

from ..protocol.directive import Directive
from ..protocol.manifest import Manifest
from ..state.transfers import Holding
from .recovery import Recovery


@dataclass(frozen=True)
class PendingCheckpoint:
    """A checkpoint being written: attempt `attempt` (0: periodic) of step `step`, taken in
    generation `generation`, due by `deadline_wall` (wall clock)."""

    generation: int
    attempt: int
    step: int
    deadline_wall: float


@dataclass
class JobState:
    """Generation, progress and what is pending between two watches of the store."""

    gen: int = -1  # the generation last published (-1: none yet)
    directive: Directive | None = None  # its directive
    committed: int = 0  # steps committed so far (after a rollback: since the checkpoint)
    decision: Decision | None = None  # the policy's last decision (its memory rides on it)
    pending_ready: list[str] = field(default_factory=list)  # nodes usable, not yet offered to the policy
    pending_decision: Decision | None = None  # a disruptive decision waiting for its stop
    removed: list[str] = field(default_factory=list)  # nodes lost since the policy last heard of them
    manifest: Manifest | None = None  # the last complete checkpoint
    recovery: Recovery | None = None  # the recovery under way, if any
    failure_detected_s: float = 0.0  # wall clock of the failure being handled
    holdings: dict[int, Holding] = field(default_factory=dict)  # worker id -> layers it holds
    ckpt_pending: list[PendingCheckpoint] = field(default_factory=list)  # periodic checkpoints being written
    save_attempts: int = 0  # on-demand saves ordered so far (each one's attempt number)
    last_beat_check_s: float = 0.0  # wall clock of the last heartbeat poll

    def current(self) -> Directive:
        """The directive of the generation last published; only asked for once one is."""
        if self.directive is None:
            raise RuntimeError("internal error: no generation has been published yet")
        return self.directive

    def last_decision(self) -> Decision:
        """The policy's last decision; only asked for once generation 0 was planned."""
        if self.decision is None:
            raise RuntimeError("internal error: the policy has made no decision yet")
        return self.decision
