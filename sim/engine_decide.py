"""Asking the policy, and turning its decision into pauses (`sim.engine`).

A decision's actions become timed pause segments (the timing's prices), after the failure
is declared (`sim.detection`; a design's own detector and the cluster's, the sooner) and,
with `sync_notice`, noticed by the survivors; a restart's start-up already running is held
to its end first.
"""

from __future__ import annotations

from typing import Any

from planner.policies import (
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
        if not decision.disruptive:
            if decision.check_at_iteration_end:
                self.boundary = True
            if self.mode == RUNNING:
                if previous is None or decision.plan is not previous.plan:
                    self._retime(decision.plan)
                self._reschedule()
            return
        now = self.env.now
        notice = self._notice_s()
        if self.mode == RUNNING:
            lost = self.ledger.abort(now - self.acct_t)
            self.acct_t = now
            if lost > 0:
                self.counts["iterations_lost"] += 1
                self.events.append(EventRecord(now, "iteration_lost", {"seconds": lost}))
        elif self.mode == PAUSED and self.segments and isinstance(self.segments[0][2], Checkpoint):
            self.counts["checkpoints_failed"] += 1
            self.events.append(EventRecord(now, "checkpoint_failed", {"iterations": self.iterations}))
        self.boundary = False
        hold = self._startup_left_s(previous)
        self.segments = []  # a disruptive decision abandons the pause in progress, if any
        if decision.rolls_back:
            self._rollback(decision.snapshot)
        segments: list[tuple[str, float, Any]] = [(RESTARTING, hold, STARTUP_HOLD)] if hold > 0 else []
        cluster_detect = self._detect_s(previous)
        for action in decision.actions:
            state = PAUSE_STATE.get(type(action))
            if state is None:
                continue
            if isinstance(action, Checkpoint):  # the survivors of the plan that trained write it
                seconds = self.timing.pause_s(
                    action, decision.plan if self.state_plan is None else self.state_plan, self.ready
                )
            else:  # a relaunch starts a process on every node up, as the real backend's does
                if isinstance(action, RESTARTS):
                    self._relaunched = frozenset(self.ready)
                seconds = self.timing.pause_s(action, decision.plan, self.ready)
            if isinstance(action, Detect) and cluster_detect is not None:
                seconds = min(seconds, cluster_detect)  # whichever detector declares the loss first
            if isinstance(action, CopyLayers) and segments and segments[-1][0] == RECONFIGURING:
                segments[-1] = (RECONFIGURING, segments[-1][1] + seconds, segments[-1][2])
            else:
                segments.append((state, seconds, action))
            if isinstance(action, Reinstantiate):
                self.counts["reconfigurations"] += 1
            elif isinstance(action, (Restart, RestartFromCheckpoint, RestartFromSnapshot)):
                self.counts["restarts"] += 1
            elif isinstance(action, Start):
                self.counts["starts"] += 1
        if notice > 0 and segments and segments[0][0] == RECONFIGURING:  # it starts once all have stopped
            segments[0] = (RECONFIGURING, segments[0][1] + notice, segments[0][2])
        detect = 0.0 if any(isinstance(a, Detect) for a in decision.actions) else cluster_detect or 0.0
        if detect > 0 and segments:  # the recovery starts once the loss is declared; its time is
            # the recovery's (a restart's, a reconfiguration's), not that of a checkpoint before it
            state = next((s for s, _, a in segments if not isinstance(a, Checkpoint)), segments[0][0])
            segments.insert(0, (state, detect, Detect("failure detection")))
        self.then_wait = any(isinstance(a, WaitForNodes) for a in decision.actions)
        if segments:
            self._pause(segments, periodic=False)
        elif self.then_wait:
            self.mode = WAITING
        else:
            self._start_running()

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
