"""The trace-replay engine's state and its records (`sim.engine` has the whole story).

What every part of a `Simulation` reads: the cluster (present, starting and usable nodes),
the job (its mode, decision, pause queue, committed iterations and samples), the clock and
the ledger that time is billed to, and the records a run leaves (timeline rows, events).
The parts build on it in layers, none calling up: start-ups and pauses
(`sim.engine_pauses`), running and committed progress (`sim.engine_running`), decisions
(`sim.engine_decide`), and the processes (`sim.engine`).
"""

from __future__ import annotations

import math
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
    Policy,
    Reinstantiate,
    Restart,
    RestartFromCheckpoint,
    RestartFromSnapshot,
    Start,
    describe_plan,
)
from planner.records import (
    CHECKPOINTING,
    RECONFIGURING,
    RESTARTING,
    RUNNING,
    WAITING,
    EventRecord,
    TimelineRow,
)
from traces.model import Trace

from .bounds import check_timeline_rows
from .errors import SimError
from .ledger import Ledger
from .pricing import Pricing
from .startup_pool import StartupPool
from .stretch import Stretch

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


class EngineState:
    """The state every part of a run reads (set once here, one run per object)."""

    job: simpy.Process  # the job's process (`Simulation.run` starts it)

    def __init__(
        self,
        trace: Trace,
        policy: Policy,
        pricing: Pricing,
        *,
        iteration_rows: bool = False,
        duration_s: float | None = None,
        adaptive_checkpoints: AdaptiveCheckpoints | None = None,
    ):
        if not trace.events:
            raise SimError(f"trace {trace.name!r} has no events")
        if duration_s is not None and not duration_s > 0:
            raise SimError(f"duration_s must be > 0, got {duration_s!r}")
        if not isinstance(pricing, Pricing):
            raise SimError(f"internal: the engine takes a Pricing (sim.pricing), got {type(pricing).__name__}")
        self.trace, self.policy, self.pricing = trace, policy, pricing
        self.timing = pricing.timing
        self.startup_s = pricing.node_startup_s
        # start-ups sharing one host's cores (`sim.startup_pool`; None: each node starts on
        # its own, in node_startup_s): nodes that join once training has begun, and the
        # start-up of every restart's processes
        cores = pricing.startup_cores
        self.pool = None if cores is None else StartupPool(cores, trace.start_s)
        self._pool_wake = 0  # the pool's pending wake-up; older ones are stale
        # the restart whose processes are starting: (pool key, seconds after, its nodes)
        self._crowd: tuple[tuple[str, int], float, frozenset[str]] | None = None
        self._crowds = 0
        self._relaunched: frozenset[str] = frozenset()  # the nodes the last restart priced relaunches
        self.sync_notice = pricing.sync_notice
        self.detection = pricing.detection
        # every loss of a working node so far is declared by then (`sim.engine_decide`)
        self.declared_t = -math.inf
        self.launch_s = 0.0  # the last start's or restart's pause (why a run that never trained did not)
        self._causes: dict[str, str | None] = {}  # node -> cause of its removal being decided on
        self._removing: tuple[str, ...] = ()  # the nodes whose removal is being decided on
        self.iteration_rows = iteration_rows
        self.price_per_s = pricing.price_per_node_hour / 3600.0
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
        self.resume = False  # the pause holds a decision that keeps training: then it trains on
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
        self.iter_samples = pricing.timing.samples_per_iteration  # what an iteration of the running plan commits
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
