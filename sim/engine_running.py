"""Training between interruptions, and the progress it commits (`sim.engine`).

A running stretch is one simpy timeout to the next point where something is due (a
checkpoint, an iteration boundary a decision asked for); iterations inside it are counted
arithmetically. Commits count iterations and samples; a rollback takes them back to the
last completed checkpoint (or the snapshot a policy names).
"""

from __future__ import annotations

import math

from planner.policies import (
    Checkpoint,
)
from planner.records import (
    RUNNING,
    EventRecord,
)

from .engine_pauses import PausesPart
from .errors import SimError


class RunningPart(PausesPart):
    """Training between interruptions, and the progress it commits."""

    # -- running ---------------------------------------------------------------------------
    def _start_running(self) -> None:
        assert self.decision is not None  # runs the plan of the policy's last decision
        self.state_plan = self.decision.plan
        cost = self.timing.iteration(self.decision.plan)
        self.iter_samples = self.timing.samples_per_iteration if cost.samples is None else cost.samples
        self.mode = RUNNING
        now = self.env.now
        self.stretch.start(now, cost.total_s, cost.useful_s / cost.total_s)
        self.acct_t = now
        if self.first_start_t is None:
            self.first_start_t = now
        self._reschedule()

    def _next_checkpoint(self) -> int | None:
        s = self.policy.checkpoints
        options = []
        if s.after_restart and self.after_restart:
            options.append(self.iterations + 1)
        if self.adaptive is not None:
            every = max(1, round(self._adaptive_interval_s() / self.stretch.tau))
            options.append(max(self.iterations + 1, self.ckpt_iterations + every))
            return min(options)
        if s.every_iterations:
            options.append((self.iterations // s.every_iterations + 1) * s.every_iterations)
        if s.every_s:
            options.append(max(self.iterations + 1, self.ckpt_iterations + max(1, round(s.every_s / self.stretch.tau))))
        return min(options) if options else None

    def _adaptive_interval_s(self) -> float:
        """The adaptive rule's interval now; before any checkpoint completed, its cost is
        the price of one on the plan that trains."""
        assert self.adaptive is not None
        profiled = 0.0 if self.adaptive.costs_s else self.timing.pause_s(Checkpoint("periodic"), self.state_plan)
        return self.adaptive.interval_s(self.env.now, profiled)

    def _wake_iteration(self) -> int | None:
        """The iteration whose end is the first at or after the decision's `wake_at_s`."""
        wake = self.decision.wake_at_s if self.decision is not None else None
        if wake is None:
            return None
        s = self.stretch
        k = 1 if s.next_done_t >= wake else int((wake - s.next_done_t) // s.tau) + 1
        while s.end_of(k) < wake:
            k += 1
        while k > 1 and s.end_of(k - 1) >= wake:
            k -= 1
        return self.iterations + k

    def _reschedule(self) -> None:
        ckpt = self._next_checkpoint()
        wake = self._wake_iteration()
        options = [
            i
            for i in (ckpt, self.iterations + 1 if (self.boundary or self.pending_ready) else None, wake)
            if i is not None
        ]
        self.stop_iter = min(options) if options else None
        self.stop_ckpt = ckpt is not None and ckpt == self.stop_iter
        self.stop_wake = wake is not None and wake == self.stop_iter
        self.stop_t = math.inf if self.stop_iter is None else self.stretch.end_of(self.stop_iter - self.iterations)

    def _commit(self, count: int) -> None:
        """The next `count` iterations of the stretch have ended."""
        if self.iteration_rows:
            for k in range(1, count):
                self.iterations += 1
                self.samples += self.iter_samples
                self._row(self.stretch.end_of(k), RUNNING)
        else:
            self.iterations += count - 1
            self.samples += (count - 1) * self.iter_samples
        last_t = self.stretch.advance(count)
        self.iterations += 1
        self.samples += self.iter_samples
        self.ledger.commit(last_t - self.acct_t, self.stretch.useful_fraction)
        if self.snapshots:
            self.ledger.mark(self.iterations, self.stretch.tau, self.stretch.useful_fraction)
            self.sample_marks.append((self.iterations, self.samples, self.iter_samples))
        self.acct_t = self.last_iteration_t = last_t
        if self.iteration_rows:
            self._row(last_t, RUNNING)

    def _settle(self) -> None:
        """Commit the iterations of the stretch that ended strictly before now."""
        count = self.stretch.ended_before(self.env.now)
        if count:
            self._commit(count)

    def _retime(self, plan) -> None:
        """A fail-over changed the plan: the iteration in flight finishes at the new pace."""
        now = self.env.now
        self.ledger.hold_inflight(now - self.acct_t, self.stretch.useful_fraction)
        self.acct_t = now
        self.state_plan = plan
        cost = self.timing.iteration(plan)
        self.iter_samples = self.timing.samples_per_iteration if cost.samples is None else cost.samples
        self.stretch.retime(now, cost.total_s, cost.useful_s / cost.total_s)

    def _samples_at(self, iteration: int) -> int:
        """Committed samples after `iteration` (last checkpoint <= it <= now): within one commit
        every iteration committed the same samples; marks after it are dropped."""
        samples = self.ckpt_samples
        kept: list[tuple[int, int, int]] = []
        for after, total, per in self.sample_marks:
            if after <= iteration:
                kept.append((after, total, per))
                samples = total
            else:
                before = kept[-1][0] if kept else self.ckpt_iterations
                if iteration > before:
                    samples = total - (after - iteration) * per
                    kept.append((iteration, samples, per))
                break
        self.sample_marks = kept
        return samples

    def _rollback(self, snapshot: int | None = None) -> None:
        """Back to the last checkpoint, or to the policy's `snapshot` iteration."""
        if snapshot is None:
            to, seconds = self.ckpt_iterations, self.ledger.rollback()
            self.samples = self.ckpt_samples
            self.sample_marks.clear()
        else:
            if not (self.snapshots and self.ckpt_iterations <= snapshot <= self.iterations):
                raise SimError(
                    f"{self.policy.name} restarted from iteration {snapshot}, outside the last checkpoint's "
                    f"{self.ckpt_iterations} .. the {self.iterations} committed"
                    + ("" if self.snapshots else " (and its policy does not set restores_snapshots)")
                )
            to, seconds = snapshot, self.ledger.rollback_to(snapshot, self.ckpt_iterations)
            self.samples = self._samples_at(to)
        undone = self.iterations - to
        self.iterations = to
        if undone:
            self.counts["rollbacks"] += 1
            self.events.append(
                EventRecord(
                    self.env.now,
                    "rollback",
                    {"iterations_undone": undone, "seconds": seconds, "to_iteration": self.iterations},
                )
            )
