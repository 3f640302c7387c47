"""Where a run's time went, and what a rollback would take back.

Every second of the run span lands in exactly one bucket: running time becomes useful (or
redundant) compute when its iteration commits, lost work when the iteration is abandoned
or its commit is rolled back; pauses go to reconfiguration, restart or checkpoint; the rest
is waiting. Committed iterations since the last checkpoint are kept apart (`pending_*`) so a
rollback can move exactly their time to lost work; `mark` after each commit lets a rollback
to a later committed iteration (`rollback_to`, a design's own snapshot) take back exactly
the iterations after it. Node-seconds and idle GPU-seconds are
integrated alongside (idle GPUs are outside the sum).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    # since the last checkpoint, per commit: (iterations after it, pending useful and
    # redundant seconds after it, seconds of each of its iterations but the first, their
    # useful fraction)
    marks: list[tuple[int, float, float, float, float]] = field(default_factory=list)

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

    def mark(self, iterations: int, tau_s: float, useful_fraction: float) -> None:
        """A commit just brought the committed iterations to `iterations`; every one of its
        iterations but the first took `tau_s`."""
        self.marks.append((iterations, self.pending_useful_s, self.pending_redundant_s, tau_s, useful_fraction))

    def checkpointed(self) -> None:
        self.useful_s += self.pending_useful_s
        self.redundant_s += self.pending_redundant_s
        self.pending_useful_s = self.pending_redundant_s = 0.0
        self.marks.clear()

    def rollback(self) -> float:
        lost = self.pending_useful_s + self.pending_redundant_s
        self.lost_work_s += lost
        self.pending_useful_s = self.pending_redundant_s = 0.0
        self.marks.clear()
        return lost

    def rollback_to(self, iteration: int, checkpoint_iterations: int) -> float:
        """Undo the committed iterations after `iteration` (>= the last checkpoint's
        `checkpoint_iterations`); returns the seconds moved to lost work."""
        if iteration <= checkpoint_iterations or not self.marks:
            return self.rollback()
        keep = 0
        while keep < len(self.marks) and self.marks[keep][0] < iteration:
            keep += 1
        if keep == len(self.marks):
            return 0.0  # nothing committed after `iteration`
        after, useful, redundant, tau, fraction = self.marks[keep]
        before = self.marks[keep - 1][0] if keep else checkpoint_iterations
        if iteration > before:  # inside that commit, past its first iteration: the rest took tau each
            undo = (after - iteration) * tau
            useful -= undo * fraction
            redundant -= undo - undo * fraction
            del self.marks[keep + 1 :]
            self.marks[keep] = (iteration, useful, redundant, tau, fraction)
        else:  # iteration == before: the mark before it holds the totals
            useful, redundant = (self.marks[keep - 1][1], self.marks[keep - 1][2]) if keep else (0.0, 0.0)
            del self.marks[keep:]
        lost = (self.pending_useful_s - useful) + (self.pending_redundant_s - redundant)
        self.lost_work_s += lost
        self.pending_useful_s, self.pending_redundant_s = useful, redundant
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
        )
