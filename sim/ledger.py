"""Where a run's time went, and what a rollback would take back.

Every second of the run span lands in exactly one bucket: running time becomes useful (or
redundant) compute when its iteration commits, lost work when the iteration is abandoned
or its commit is rolled back; pauses go to reconfiguration, restart or checkpoint; the rest
is waiting. Committed iterations since the last checkpoint are kept apart (`pending_*`) so a
rollback can move exactly their time to lost work. Node-seconds and idle GPU-seconds are
integrated alongside (idle GPUs are outside the sum).
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.records import TimeBreakdown

PAUSE_BUCKETS = {"reconfiguring": "reconfiguration_s", "restarting": "restart_s", "checkpointing": "checkpoint_s"}


@dataclass
class Ledger:
    useful_s: float = 0.0  # committed and checkpointed (or never at risk)
    redundant_s: float = 0.0
    pending_useful_s: float = 0.0  # committed since the last checkpoint
    pending_redundant_s: float = 0.0
    inflight_useful_s: float = 0.0  # part of the iteration in flight (before a fail-over)
    inflight_redundant_s: float = 0.0
    lost_work_s: float = 0.0
    reconfiguration_s: float = 0.0
    restart_s: float = 0.0
    checkpoint_s: float = 0.0
    waiting_s: float = 0.0
    node_s: float = 0.0
    idle_gpu_s: float = 0.0
    unfinished_s: float = 0.0  # the iteration cut off by the end of the run (in lost work)

    def pause(self, state: str, seconds: float) -> None:
        bucket = PAUSE_BUCKETS[state]
        setattr(self, bucket, getattr(self, bucket) + seconds)

    def hold_inflight(self, seconds: float, useful_fraction: float) -> None:
        """Running time of the iteration in flight, kept until it commits or is lost."""
        useful = seconds * useful_fraction
        self.inflight_useful_s += useful
        self.inflight_redundant_s += seconds - useful

    def commit(self, seconds: float, useful_fraction: float) -> None:
        """Running time up to a commit (with the in-flight part held before) is progress."""
        useful = seconds * useful_fraction
        self.pending_useful_s += self.inflight_useful_s + useful
        self.pending_redundant_s += self.inflight_redundant_s + seconds - useful
        self.inflight_useful_s = self.inflight_redundant_s = 0.0

    def abort(self, seconds: float) -> float:
        """The iteration in flight is abandoned; returns the seconds lost."""
        lost = self.inflight_useful_s + self.inflight_redundant_s + seconds
        self.lost_work_s += lost
        self.inflight_useful_s = self.inflight_redundant_s = 0.0
        return lost

    def checkpointed(self) -> None:
        self.useful_s += self.pending_useful_s
        self.redundant_s += self.pending_redundant_s
        self.pending_useful_s = self.pending_redundant_s = 0.0

    def rollback(self) -> float:
        lost = self.pending_useful_s + self.pending_redundant_s
        self.lost_work_s += lost
        self.pending_useful_s = self.pending_redundant_s = 0.0
        return lost

    def breakdown(self) -> TimeBreakdown:
        return TimeBreakdown(
            useful_compute_s=self.useful_s + self.pending_useful_s,
            reconfiguration_s=self.reconfiguration_s,
            restart_s=self.restart_s,
            checkpoint_s=self.checkpoint_s,
            lost_work_s=self.lost_work_s,
            redundant_compute_s=self.redundant_s + self.pending_redundant_s,
            waiting_s=self.waiting_s,
            idle_gpu_s=self.idle_gpu_s,
        )
