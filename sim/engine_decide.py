"""Asking the policy, and turning its decision into pauses (`sim.engine`).

A decision's actions become timed pause segments (the timing's prices); a restart's
start-up already running is held to its end first; with `sync_notice`, a reconfiguration
starts once the survivors have noticed the loss.

One rule for detection, whatever the design decides: nothing that follows a loss of a
working node (a recovery, a fail-over, training on) begins before the loss is declared
(`sim.detection`: the profile's time for its kind, or the design's own detector, a `Detect`
action, where that is sooner). Each loss keeps its own declaration time (`declared_t`, the
latest of them): a second loss during the first's detection never shortens it, and a job
that waits for nodes meanwhile restarts only once every loss is declared. A decision that
keeps training (a fail-over, a spare taking over) stalls the job until then, the iteration
in flight lost, as a synchronous job's collectives stall; the decision's event records when
and by which detector the loss was declared.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from planner.policies import (
    Admit,
    Checkpoint,
    CopyLayers,
    Decision,
    Detect,
    NodesRemoved,
    Reinstantiate,
    Restart,
    RestartFromCheckpoint,
    RestartFromSnapshot,
    Start,
    WaitForNodes,
    describe_action,
    describe_event,
)
from planner.records import (
    RECONFIGURING,
    RESTARTING,
    RUNNING,
    WAITING,
    EventRecord,
)

from .engine_running import RunningPart
from .engine_state import PAUSE_STATE, PAUSED, STARTUP_HOLD
from .errors import SimError
from .notice import notice_s
from .timing import RESTARTS, restart_startup_s


class DecidingPart(RunningPart):
    """Asking the policy, and turning its decision into pauses."""

    def _wake_later(self) -> None:
        """While the job waits on a decision that names when to ask again (`wake_at_s`),
        ask the policy then (a `PauseEnded` of the wait), unless another decision came."""
        decision = self.decision
        if self.mode == WAITING and decision is not None and decision.wake_at_s is not None:
            self.env.process(self._wake(decision, max(0.0, decision.wake_at_s - self.env.now)))

    def _wake(self, decision: Decision, delay_s: float):
        yield self.env.timeout(delay_s)
        if self.mode == WAITING and self.decision is decision:
            self.job.interrupt(("wake", (decision,)))

    def _decide(self, event, job_state: str | None = None) -> None:
        decision = self.policy.decide(self._view(job_state), event, self.decision)
        plan = decision.plan
        previous = self.decision.plan if self.decision is not None else None
        if plan is not None and plan is not previous:  # an unchanged plan was checked when it came
            members = self._plan_nodes(plan)
            if not self.ready.keys() >= members:
                strays = [n for n in plan.nodes if n not in self.ready]
                raise SimError(f"{self.policy.name} planned on nodes that are not usable: {strays}")
        self.counts["decisions"] += 1
        if isinstance(event, NodesRemoved):
            working = self._plan_nodes(previous) if previous is not None else frozenset()
            hit = sum(1 for n in set(event.nodes) if n in working)
            self.counts["working_removed"] += hit
            if hit and self.adaptive is not None:
                self.adaptive.interrupted(self.env.now)
            restarts = (Restart, RestartFromCheckpoint, RestartFromSnapshot, WaitForNodes)
            if hit and not any(isinstance(a, restarts) for a in decision.actions):
                self.counts["failures_survived"] += hit
        self.events.append(
            EventRecord(
                self.env.now,
                "decision",
                {
                    **describe_event(event),
                    "actions": [describe_action(a) for a in decision.actions],
                    "plan": self._describe(plan),
                    **({"notes": list(decision.notes)} if decision.notes else {}),
                },
            )
        )
        self._apply(decision)

    def _apply(self, decision: Decision) -> None:
        previous, self.decision = self.decision, decision
        wait = self._declare(decision, previous)
        if not decision.disruptive:
            if decision.check_at_iteration_end:
                self.boundary = True
            if self.mode == RUNNING and wait > 0:  # the survivors' collectives stall until it is declared
                self._lose_iteration(self.env.now)
                self.then_wait = False
                self._pause([(RECONFIGURING, wait, Detect("failure detection"))], periodic=False, resume=True)
                return
            admit = self._admit_s(decision) if self.mode == RUNNING else 0.0
            if admit > 0:  # everyone waits at this step boundary while the quorum grows
                self._lose_iteration(self.env.now)
                self.then_wait = False
                admitted = next(a for a in decision.actions if isinstance(a, Admit))
                self._pause([(RECONFIGURING, admit, admitted)], periodic=False, resume=True)
                return
            if self.mode == RUNNING:
                if previous is None or decision.plan is not previous.plan:
                    self._retime(decision.plan)
                self._reschedule()
            return
        now = self.env.now
        notice = self._notice_s()
        if self.mode == RUNNING:
            self._lose_iteration(now)
        elif self.mode == PAUSED and self.segments and isinstance(self.segments[0][2], Checkpoint):
            self.counts["checkpoints_failed"] += 1
            self.events.append(EventRecord(now, "checkpoint_failed", {"iterations": self.iterations}))
        self.boundary = False
        hold = self._startup_left_s(previous)
        self.segments = []  # a disruptive decision abandons the pause in progress, if any
        if decision.rolls_back:
            self._rollback(decision.snapshot)
        segments: list[tuple[str, float, Any]] = [(RESTARTING, hold, STARTUP_HOLD)] if hold > 0 else []
        own = None
        for action in decision.actions:
            state = PAUSE_STATE.get(type(action))
            if state is None:
                continue
            if isinstance(action, Detect):  # the design's own detector: `_declare` took its time
                own = action
                continue
            if isinstance(action, Checkpoint):  # the survivors of the plan that trained write it
                seconds = self.timing.pause_s(
                    action, decision.plan if self.state_plan is None else self.state_plan, self.ready
                )
            else:  # a relaunch starts a process on every node up, as the real backend's does
                if isinstance(action, RESTARTS):
                    self._relaunched = frozenset(self.ready)
                seconds = self.timing.pause_s(action, decision.plan, self.ready)
            if isinstance(action, CopyLayers) and segments and segments[-1][0] == RECONFIGURING:
                segments[-1] = (RECONFIGURING, segments[-1][1] + seconds, segments[-1][2])
            else:
                segments.append((state, seconds, action))
            if isinstance(action, Reinstantiate):
                self.counts["reconfigurations"] += 1
            elif isinstance(action, (Restart, RestartFromCheckpoint, RestartFromSnapshot)):
                self.counts["restarts"] += 1
                self.launch_s = seconds
            elif isinstance(action, Start):
                self.counts["starts"] += 1
                self.launch_s = seconds
        if wait > 0:  # nothing that follows begins before every loss so far is declared; its time
            # is the recovery's (a restart's, a reconfiguration's), not that of a checkpoint before it
            state = next((s for s, _, a in segments if not isinstance(a, Checkpoint)), RECONFIGURING)
            segments.insert(0, (state, wait, own or Detect("failure detection")))
        if notice > 0 and segments and segments[0][0] == RECONFIGURING:  # it starts once all have stopped
            segments[0] = (RECONFIGURING, segments[0][1] + notice, segments[0][2])
        self.then_wait = any(isinstance(a, WaitForNodes) for a in decision.actions)
        if segments:
            self._pause(segments, periodic=False)
        elif self.then_wait:
            self.mode = WAITING
            self._wake_later()
        else:
            self._start_running()

    def _admit_s(self, decision: Decision) -> float:
        """What the decision's `Admit` costs every node (0: nodes join at no cost, the
        iteration in flight re-timed on the new plan); a design prices it where the plan
        changes for all (replica groups' quorum rejoin). Admission comes at a step boundary."""
        return sum(self.timing.pause_s(a, decision.plan, self.ready) for a in decision.actions if isinstance(a, Admit))

    def _lose_iteration(self, now: float) -> None:
        """The iteration in flight is lost (its time billed as lost work)."""
        lost = self.ledger.abort(now - self.acct_t)
        self.acct_t = now
        if lost > 0:
            self.counts["iterations_lost"] += 1
            self.events.append(EventRecord(now, "iteration_lost", {"seconds": lost}))

    def _declare(self, decision: Decision, previous: Decision | None) -> float:
        """Seconds from now until every loss so far is declared (0: all are): the losses
        being decided on are declared by the cluster's detector for their kinds
        (`_detect_s`), or by the design's own (a `Detect` action) where that is sooner; an
        earlier loss keeps its own time (`declared_t`), which a later one never shortens."""
        now = self.env.now
        cluster = self._detect_s(previous)
        own = next((a for a in decision.actions if isinstance(a, Detect)), None)
        if own is not None:
            own_s = self.timing.pause_s(own, decision.plan, self.ready)
            seconds = own_s if cluster is None else min(own_s, cluster)
            self._declared(now + seconds, "design" if cluster is None or own_s < cluster else "cluster")
        elif cluster is not None and self._removing:
            self._declared(now + cluster, "cluster")
        return max(0.0, self.declared_t - now)

    def _declared(self, at_s: float, by: str) -> None:
        """A loss being decided on is declared at `at_s` by `by` ("cluster": the profile's
        detection for its kind; "design": the design's own detector); the decision's event
        says so where that is later than now."""
        self.declared_t = max(self.declared_t, at_s)
        last = self.events[-1] if self.events else None
        if at_s > self.env.now and last is not None and last.kind == "decision":
            self.events[-1] = replace(last, detail={**last.detail, "declared_at_s": at_s, "declared_by": by})

    def _detect_s(self, previous: Decision | None) -> float | None:
        """Seconds until the cluster declares the removal being decided on: the slowest
        detection among the working nodes it took (`sim.detection`); 0 where nothing was
        working; None where the costs price no detection. A design with a detector of its
        own (a `Detect` action) pays the sooner of the two."""
        if self.detection.free or not self._removing:
            return None
        if previous is None or previous.plan is None:
            return 0.0
        working = self._plan_nodes(previous.plan)
        hit = [n for n in self._removing if n in working]
        return max((self.detection.seconds(self._causes.get(n)) for n in hit), default=0.0)

    def _notice_s(self) -> float:
        """With `sync_notice`, the mean seconds until the survivors of the removal being
        decided on have noticed it (`sim.notice`; 0 unless the job is training)."""
        if not (self.sync_notice and self._removing and self.mode == RUNNING):
            return 0.0
        return notice_s(self.state_plan, frozenset(self._removing), self.stretch.tau)

    def _startup_left_s(self, previous: Decision | None) -> float:
        """Seconds left of the start-up of the restart in progress (0: none is starting)."""
        if self.mode != PAUSED or not self.segments:
            return 0.0
        _, seconds, action = self.segments[0]
        now = self.env.now
        if action is STARTUP_HOLD:
            return self.pause_end_t - now
        if not isinstance(action, RESTARTS) or previous is None:
            return 0.0
        if self.pool is not None:  # its processes go on starting in the pool; the rest is dropped
            if self._crowd_end_s() is None or self._crowd is None:
                return 0.0
            key, _, nodes = self._crowd
            self._crowd = (key, 0.0, nodes)  # from now on it ends the hold, not the restart
            return self.pool.finish_s(key) - now
        elapsed = now - (self.pause_end_t - seconds)
        return max(0.0, restart_startup_s(self.timing, action, previous.plan, self._relaunched) - elapsed)
