"""The trace-replay engine: simpy processes around a policy and a timing (DESIGN 4).

Processes
- trace replay: applies each timestamp's add / remove events, in trace order;
- node readiness: one per group of nodes added together; they become usable after the
  start-up delay unless removed first (a node re-added under the same name is a new one);
- the job: a state machine (running, paused in a reconfiguration / restart / checkpoint,
  waiting) that the other two interrupt.

Granularity: whole iterations. A running stretch is one simpy timeout to the next point
where something is due (a checkpoint, or an iteration boundary a decision asked for);
iterations inside it are counted arithmetically (iteration k of the stretch ends at
t_next + (k - 1) x T), so a quiet day costs a handful of events, with the same committed
samples as stepping each one. An interruption commits the iterations that ended strictly
before it; the one in flight continues (`Continue`, `FailOver`: its remaining fraction is
re-timed on the new plan) or is lost (every other action). Trace events and readiness are
scheduled ahead of the job at equal times, so an iteration ending exactly at a removal is
lost, and the run ends at the trace's last event without processing it.

A decision's `wake_at_s` adds one more stop: the first iteration boundary at or after that
time, where the policy sees an `IterationEnd` (a clock for interval-based policies that
costs one stop per wake, not one per iteration).

Samples: an iteration commits the timing's samples for its plan (`IterationCost.samples`:
the global batch, or the part of it a plan over some replica groups trains on), counted
alongside the iterations and rolled back with them.

Pauses are sequences of timed actions; a failure during one goes to the policy like any
other: `Continue` lets the pause go on, anything else abandons it (a checkpoint in progress
then fails), except a restart's start-up (`timing.restart_startup_s`), which runs to its
end first: the new pause then waits for it (a `STARTUP_HOLD` segment).
`RestartFromCheckpoint` and `WaitForNodes(rollback=True)` roll committed work back to the
last completed checkpoint, the run's start counting as one; `RestartFromSnapshot` to the
iteration it names (a policy that uses it says so with `restores_snapshots = True`,
and the ledger then keeps what each commit added, to take back exactly the later ones).

With `startup_cores` (a testbed that emulates its nodes on one host), start-ups share
that host's cores (`sim.startup_pool`): a node added once training has begun starts in
the pool instead of in node_startup_s, and so does each restart's start-up, whose pause
segment (or the hold of an abandoned one) then ends when the pool says. A node removed
while its processes start leaves the pool.

With `sync_notice`, a removal while the job trains is noticed only when the survivors next
communicate (`sim.notice`): a reconfiguration it causes starts after the mean wait for the
plan's single-stage pipelines, which talk only at the gradient sync, to end their compute.
"""

from __future__ import annotations

import math
from itertools import groupby
from typing import Any

import simpy
from simpy.core import URGENT

from planner.checkpoint_interval import AdaptiveCheckpoints, IntervalTracker
from planner.policies import (
    Checkpoint,
    ClusterView,
    CopyLayers,
    Decision,
    Detect,
    IterationEnd,
    NodesReady,
    NodesRemoved,
    PauseEnded,
    Policy,
    Reinstantiate,
    Restart,
    RestartFromCheckpoint,
    RestartFromSnapshot,
    Start,
    WaitForNodes,
    describe_action,
    describe_event,
    describe_plan,
)
from planner.records import (
    CHECKPOINTING,
    FINISHED,
    RECONFIGURING,
    RESTARTING,
    RUNNING,
    WAITING,
    EventRecord,
    TimelineRow,
)
from traces.model import Trace

from .bounds import check_timeline_rows
from .detection import Detection
from .errors import SimError
from .ledger import Ledger
from .notice import notice_s
from .startup_pool import StartupPool
from .stretch import Stretch
from .timing import RESTARTS, Timing, restart_startup_s

PAUSED = "paused"
PAUSE_STATE = {
    Start: RESTARTING,
    Restart: RESTARTING,
    RestartFromCheckpoint: RESTARTING,
    RestartFromSnapshot: RESTARTING,
    Reinstantiate: RECONFIGURING,
    CopyLayers: RECONFIGURING,
    Checkpoint: CHECKPOINTING,
    Detect: RECONFIGURING,  # waiting for the failure detector, before the reconfiguration
}


class _StartupHold:
    """The pause segment of an abandoned restart's start-up still running (no action)."""

    def __repr__(self) -> str:
        return "STARTUP_HOLD"


STARTUP_HOLD = _StartupHold()


class _Urgent(simpy.events.Event):
    """A timeout processed before ordinary events at the same time (trace and readiness)."""

    def __init__(self, env: simpy.Environment, delay: float):
        super().__init__(env)
        self._ok, self._value = True, None
        env.schedule(self, URGENT, delay)


class Simulation:
    """One run of `policy` over `trace`, timed by `timing`; call `run()` once."""

    def __init__(
        self,
        trace: Trace,
        policy: Policy,
        timing: Timing,
        *,
        node_startup_s: float,
        price_per_node_hour: float,
        iteration_rows: bool = False,
        duration_s: float | None = None,
        adaptive_checkpoints: AdaptiveCheckpoints | None = None,
        startup_cores: float | None = None,
        sync_notice: bool = False,
        detection: Detection | None = None,
    ):
        if not trace.events:
            raise SimError(f"trace {trace.name!r} has no events")
        if duration_s is not None and not duration_s > 0:
            raise SimError(f"duration_s must be > 0, got {duration_s!r}")
        self.trace, self.policy, self.timing = trace, policy, timing
        self.startup_s = node_startup_s
        # start-ups sharing one host's cores (`sim.startup_pool`; None: each node starts on
        # its own, in node_startup_s): nodes that join once training has begun, and the
        # start-up of every restart's processes
        self.pool = None if startup_cores is None else StartupPool(startup_cores, trace.start_s)
        self._pool_wake = 0  # the pool's pending wake-up; older ones are stale
        # the restart whose processes are starting: (pool key, seconds after, its nodes)
        self._crowd: tuple[tuple[str, int], float, frozenset[str]] | None = None
        self._crowds = 0
        self._relaunched: frozenset[str] = frozenset()  # the nodes the last restart priced relaunches
        self.sync_notice = sync_notice
        self.detection = detection or Detection()  # none given: failures are noticed at once
        self._causes: dict[str, str | None] = {}  # node -> cause of its removal being decided on
        self._removing: tuple[str, ...] = ()  # the nodes whose removal is being decided on
        self.iteration_rows = iteration_rows
        self.price_per_s = price_per_node_hour / 3600.0
        self.start_s = trace.start_s
        self.end_s = trace.stop_s if duration_s is None else trace.start_s + duration_s
        self.env = simpy.Environment(initial_time=self.start_s)
        self.present: dict[str, int] = {}
        self.ready: dict[str, None] = {}
        self.starting: dict[str, None] = {}  # present, not yet usable (arrival order)
        self._nodes_of: dict[int, tuple[Any, frozenset[str]]] = {}  # id -> (plan, its nodes): recent plans
        self._born = 0
        self._described: tuple[Any, dict] = (None, {})
        self._ready_tuple: tuple[str, ...] | None = None  # tuple(self.ready), reset when it changes
        self.ledger = Ledger()
        self.mark_t = self.start_s
        self.timeline: list[TimelineRow] = []
        self.events: list[EventRecord] = []
        # the job
        self.mode = WAITING
        self.decision: Decision | None = None
        self.state_plan = None  # the plan that last trained: its nodes hold the model state
        self.segments: list[tuple[str, float, Any]] = []  # pause queue: (state, seconds, action)
        self.pause_end_t = math.inf
        self.periodic = False  # the pause is a periodic checkpoint, not a decision's
        self.then_wait = False
        self.pending_ready: list[str] = []
        self.boundary = False
        self.stop_wake = False  # the scheduled stop is the decision's wake-up (`wake_at_s`)
        self.after_restart = False
        self.iterations = 0
        self.ckpt_iterations = 0
        self.samples = 0  # committed samples (iterations x samples per iteration of their plans)
        self.ckpt_samples = 0
        # (iterations, samples) after each commit since the last checkpoint, with the samples
        # per iteration of that commit: where a snapshot restore finds its samples
        self.sample_marks: list[tuple[int, int, int]] = []
        self.iter_samples = timing.samples_per_iteration  # what an iteration of the running plan commits
        self.stretch = Stretch()
        # the adaptive interval replaces the policy's periodic one (planner.checkpoint_interval)
        self.adaptive = None if adaptive_checkpoints is None else IntervalTracker(adaptive_checkpoints, self.start_s)
        self.acct_t = self.start_s  # running time before this is accounted for
        self.stop_iter: int | None = None
        self.stop_t = math.inf
        self.stop_ckpt = False
        self.first_start_t: float | None = None
        self.last_iteration_t: float | None = None
        self.counts = dict(
            reconfigurations=0,
            restarts=0,
            starts=0,
            checkpoints=0,
            checkpoints_failed=0,
            rollbacks=0,
            removals=0,
            working_removed=0,
            failures_survived=0,
            iterations_lost=0,
            decisions=0,
        )
        self.infeasible = policy.infeasible_reason()
        self.snapshots = bool(getattr(policy, "restores_snapshots", False))  # keep the ledger's marks
        self._never = self.env.event()

    # -- processes ---------------------------------------------------------------------
    def run(self) -> Simulation:
        self.job = self.env.process(self._job())
        self.env.process(self._replay())
        self._row()
        self.env.run(until=self.end_s)
        self._finish()
        return self

    def _replay(self):
        for time_s, group in groupby(self.trace.events, key=lambda e: e.time_s):
            if time_s >= self.end_s:
                return
            yield _Urgent(self.env, time_s - self.env.now)
            self._advance()
            added, removed = [], []
            for event in group:
                if event.kind == "add":
                    self._born += 1
                    self.present[event.node] = self._born
                    self.starting[event.node] = None
                    added.append((event.node, self._born))
                else:
                    born = self.present.pop(event.node)
                    if self.ready.pop(event.node, 0) is None:
                        self._ready_tuple = None
                    self.starting.pop(event.node, None)
                    removed.append(event.node)
                    self._causes[event.node] = event.cause
                    if self.pool is not None:
                        self._pool_lose(event.node, born)
                self.events.append(EventRecord(time_s, event.kind, {"node": event.node}))
            if added and self.pool is not None and self.first_start_t is not None:
                self._pool_sync()
                for node, born in added:
                    self.pool.add(("node", node, born), self.timing.gpus_per_node, self.startup_s)
                self._pool_changed()
            elif added:
                self.env.process(self._boot(added))
            if removed:
                self.job.interrupt(("removed", tuple(removed)))
            if self.mode == RUNNING:
                self._settle()  # the row carries the iterations ended by now, and comes after theirs
            self._row()

    def _boot(self, added):
        yield _Urgent(self.env, self.startup_s)
        self._advance()
        nodes = tuple(n for n, born in added if self.present.get(n) == born)
        if nodes:
            self._ready_tuple = None
            for node in nodes:
                self.ready[node] = None
                del self.starting[node]
            self.events.append(EventRecord(self.env.now, "ready", {"nodes": list(nodes)}))
            self.job.interrupt(("ready", nodes))

    # -- start-ups sharing the host (`startup_cores`) ---------------------------------------
    def _pool_lose(self, node: str, born: int) -> None:
        """`node` left: its start-up, or its processes in the restart starting, stop."""
        assert self.pool is not None
        self._pool_sync()
        self.pool.remove(("node", node, born))
        if self._crowd is not None and node in self._crowd[2]:
            self.pool.shrink(self._crowd[0], self.timing.gpus_per_node)
        self._pool_changed()

    def _pool_sync(self) -> None:
        """Bring the pool to now; nodes whose start-up ended are ready (their wake-up,
        an urgent event, normally got there first)."""
        assert self.pool is not None
        started = [
            k[1]
            for k in self.pool.advance(self.env.now)
            if isinstance(k, tuple) and k[0] == "node" and self.present.get(k[1]) == k[2]
        ]
        if not started:
            return
        self._ready_tuple = None
        for node in started:
            self.ready[node] = None
            del self.starting[node]
        self.events.append(EventRecord(self.env.now, "ready", {"nodes": started}))
        if self.env.active_process is self.job:
            self.pending_ready.extend(started)  # seen at the job's next stop
        else:
            self.job.interrupt(("ready", tuple(started)))

    def _pool_changed(self) -> None:
        """The starting processes changed: re-time the restart starting and wake at the
        next start-up to finish."""
        assert self.pool is not None
        self._retime_crowd()
        self._pool_wake += 1
        at = self.pool.next_finish()
        if at < math.inf:
            self.env.process(self._pool_wait(self._pool_wake, at))

    def _pool_wait(self, wake: int, at: float):
        yield _Urgent(self.env, max(0.0, at - self.env.now))
        if wake == self._pool_wake:
            self._pool_done()

    def _pool_done(self) -> None:
        self._advance()
        self._pool_sync()
        self._pool_changed()

    def _crowd_end_s(self) -> float | None:
        """When the restart starting now will end its segment (None: none is starting)."""
        if self.pool is None or self._crowd is None or self._crowd[0] not in self.pool:
            return None
        self._pool_sync()
        return self.pool.finish_s(self._crowd[0]) + self._crowd[1]

    def _retime_crowd(self) -> None:
        """The pause segment waiting on the restart's start-up ends when it does."""
        end = self._crowd_end_s()
        if end is None or self.mode != PAUSED or not self.segments:
            return
        action = self.segments[0][2]
        if (action is STARTUP_HOLD or isinstance(action, RESTARTS)) and abs(end - self.pause_end_t) > 1e-9:
            self.pause_end_t = end
            if self.env.active_process is not self.job:
                self.job.interrupt(("retime", ()))

    def _begin_segment(self) -> None:
        """The pause's first segment starts now: a restart's start-up joins the pool."""
        state, seconds, action = self.segments[0]
        self.pause_end_t = self.env.now + seconds
        if self.pool is None or self.decision is None or not isinstance(action, RESTARTS):
            return
        plan = self.decision.plan
        nodes = self._relaunched  # the nodes whose processes it starts, as priced
        startup = restart_startup_s(self.timing, action, plan, nodes)
        if startup <= 0 or plan is None:
            return
        self._pool_sync()
        if self._crowd is not None:
            self.pool.remove(self._crowd[0])
        self._crowds += 1
        key = ("restart", self._crowds)
        self.pool.add(key, len(nodes) * self.timing.gpus_per_node, startup)
        self._crowd = (key, max(0.0, seconds - startup), nodes)
        self._pool_changed()

    def _job(self):
        while True:
            try:
                if self.mode == RUNNING:
                    yield self.env.timeout(self.stop_t - self.env.now) if self.stop_t < math.inf else self._never
                    self._at_stop()
                elif self.mode == PAUSED:
                    yield self.env.timeout(self.pause_end_t - self.env.now)
                    self._segment_done()
                else:
                    yield self._never
            except simpy.Interrupt as interrupt:
                if interrupt.cause[0] != "retime":  # a new end for the pause: wait for it
                    self._interrupted(*interrupt.cause)

    # -- clock and records ---------------------------------------------------------------
    def _advance(self) -> None:
        """Attribute the time since the last mark (running time is settled separately)."""
        now = self.env.now
        dt = now - self.mark_t
        if dt <= 0:
            return
        led = self.ledger
        led.node_s += len(self.present) * dt
        busy = 0
        plan = self.decision.plan if self.decision is not None else None
        if plan is not None and self.mode != WAITING:
            busy = len(self._plan_nodes(plan)) * self.timing.gpus_per_node - self.timing.idle_gpus(plan)
        led.idle_gpu_s += max(0, len(self.present) * self.timing.gpus_per_node - busy) * dt
        if self.mode == WAITING:
            led.waiting_s += dt
        elif self.mode == PAUSED:
            led.pause(self.segments[0][0], dt)
        self.mark_t = now

    def state(self) -> str:
        return self.segments[0][0] if self.mode == PAUSED else self.mode

    def _row(self, time_s: float | None = None, state: str | None = None) -> None:
        """A timeline row for the job as it stands (one per instant: a later row at the
        same time replaces the earlier one)."""
        now = self.env.now if time_s is None else time_s
        plan = self.decision.plan if self.decision is not None else None
        state = state or self.state()
        row = TimelineRow(
            time_s=now,
            live_nodes=len(self.present),
            working_nodes=len(self._plan_nodes(plan)) if plan is not None and self.mode != WAITING else 0,
            state=state,
            iterations_done=self.iterations,
            samples_done=self.samples,
            throughput_samples_per_s=self.iter_samples / self.stretch.tau if state == RUNNING else 0.0,
            cost_usd=(self.ledger.node_s + len(self.present) * (now - self.mark_t)) * self.price_per_s,
        )
        if self.timeline and self.timeline[-1].time_s == now:
            self.timeline[-1] = row
        else:
            if self.iteration_rows:
                check_timeline_rows(len(self.timeline), now, self.end_s)
            self.timeline.append(row)

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

    def _at_stop(self) -> None:
        self._advance()
        assert self.stop_iter is not None  # the stop fires only at a scheduled iteration
        self._commit(self.stop_iter - self.iterations)
        if self.stop_ckpt:
            action = Checkpoint("periodic")
            self._pause([(CHECKPOINTING, self.timing.pause_s(action, self.state_plan), action)], periodic=True)
        elif self.pending_ready:
            self._deliver_ready()
        elif self.boundary or self.stop_wake:
            self.boundary = False
            self._decide(IterationEnd(self.iterations))
        else:
            self._reschedule()
        self._row()

    # -- interruptions -------------------------------------------------------------------
    def _interrupted(self, kind: str, nodes: tuple[str, ...]) -> None:
        self._advance()
        if self.mode == RUNNING:
            self._settle()
        if kind == "ready":
            if self.mode == WAITING and not self.segments:
                self._decide(NodesReady(nodes))
            else:
                self.pending_ready.extend(nodes)
                if self.mode == RUNNING:
                    self._reschedule()
        else:
            self.counts["removals"] += len(nodes)
            self._removing = nodes
            try:
                notice = all(self._causes.get(n) is None for n in nodes)
                self._decide(NodesRemoved(nodes, notice))
            finally:
                self._removing = ()
        self._row()

    def _deliver_ready(self) -> None:
        nodes = tuple(n for n in self.pending_ready if n in self.ready)
        self.pending_ready = []
        self.boundary = False
        if nodes:
            self._decide(NodesReady(nodes))
        elif self.mode == RUNNING:
            self._reschedule()

    # -- decisions ---------------------------------------------------------------------
    def _plan_nodes(self, plan) -> frozenset[str]:
        """The plan's nodes as a set, kept for the last few plans (one plan serves many
        events; building the set is O(nodes))."""
        hit = self._nodes_of.get(id(plan))
        if hit is None or hit[0] is not plan:
            if len(self._nodes_of) >= 4:
                del self._nodes_of[next(iter(self._nodes_of))]
            hit = self._nodes_of[id(plan)] = (plan, frozenset(plan.nodes))
        return hit[1]

    def _describe(self, plan) -> dict:
        """`describe_plan`, once per plan (the event log repeats the plan at every decision
        that keeps it; describing a 12,500-node plan walks every node)."""
        if self._described[0] is not plan or plan is None:
            self._described = (plan, describe_plan(plan))
        return self._described[1]

    def _ready_nodes(self) -> tuple[str, ...]:
        """The usable nodes in order, rebuilt only after they changed."""
        if self._ready_tuple is None:
            self._ready_tuple = tuple(self.ready)
        return self._ready_tuple

    def _view(self, job_state: str | None = None) -> ClusterView:
        return ClusterView(
            time_s=self.env.now,
            ready=self._ready_nodes(),
            starting=tuple(self.starting),
            job_state=job_state or self.state(),
            iterations_done=self.iterations,
            checkpoint_iterations=self.ckpt_iterations,
        )

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

    # -- pauses ----------------------------------------------------------------------------
    def _pause(self, segments, *, periodic: bool) -> None:
        self.mode = PAUSED
        self.periodic = periodic
        self.segments = list(segments)
        self._begin_segment()

    def _segment_done(self) -> None:
        self._advance()
        state, seconds, action = self.segments.pop(0)
        now = self.env.now
        if isinstance(action, Checkpoint):
            self.ledger.checkpointed()
            self.ckpt_iterations = self.iterations
            self.ckpt_samples = self.samples
            self.sample_marks.clear()
            self.counts["checkpoints"] += 1
            self.after_restart = False
            detail: dict[str, Any] = {"iterations": self.iterations}
            if self.adaptive is not None:
                self.adaptive.checkpointed(seconds)
                detail.update(
                    cost_s=self.adaptive.checkpoint_s(seconds),
                    mtbf_s=self.adaptive.mtbf_s(now),
                    interval_s=self._adaptive_interval_s(),
                )
            self.events.append(EventRecord(now, "checkpoint", detail))
        elif isinstance(action, (Restart, RestartFromCheckpoint, RestartFromSnapshot)):
            self.after_restart = True
        if self.segments:
            self._begin_segment()
        elif self.periodic:
            self.mode = RUNNING  # back to the stretch; the next iteration starts now
            self.stretch.start(now, self.stretch.tau, self.stretch.useful_fraction)
            self.acct_t = now
            if self.pending_ready:
                self._deliver_ready()
            elif self.boundary:  # the iteration end a decision asked to see came with it
                self.boundary = False
                self._decide(IterationEnd(self.iterations))
            else:
                self._reschedule()
        elif self.then_wait:
            self.mode = WAITING
            if self.pending_ready:
                self._deliver_ready()
        else:
            newly = tuple(n for n in self.pending_ready if n in self.ready)
            self.pending_ready = []
            self.mode = WAITING  # the pause is over and nothing is in flight
            self._decide(PauseEnded(state, newly), job_state=state)
            decision = self.decision  # `_decide` just set it
            if self.mode == WAITING and decision is not None and not decision.disruptive and decision.plan is not None:
                self._start_running()
        self._row()

    # -- the end -------------------------------------------------------------------------
    def _finish(self) -> None:
        self._advance()
        if self.mode == RUNNING:
            self._settle()
            self.ledger.unfinished_s = self.ledger.abort(self.end_s - self.acct_t)
            self.acct_t = self.end_s
        self.mode = FINISHED
        self._row(state=FINISHED)
