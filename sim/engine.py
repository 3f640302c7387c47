"""The trace-replay engine: simpy processes around a policy and its prices (DESIGN 4).

The engine takes every price in one object, `sim.pricing.Pricing` (the timing of
iterations and pauses, a node's start-up, a node-hour's price, detection, the start-up cores
and the notice rule), which `sim.pricing.price` builds from a run's costs.

`Simulation` is built in layers, none calling up: its state and records
(`sim.engine_state`), start-ups and pauses (`sim.engine_pauses`), running and committed
progress (`sim.engine_running`), decisions (`sim.engine_decide`); this module has the
processes that drive them.

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

With `Pricing.startup_cores` (a testbed that emulates its nodes on one host), start-ups share
that host's cores (`sim.startup_pool`): a node added once training has begun starts in
the pool instead of in node_startup_s, and so does each restart's start-up, whose pause
segment (or the hold of an abandoned one) then ends when the pool says. A node removed
while its processes start leaves the pool.

With `Pricing.sync_notice`, a removal while the job trains is noticed only when the survivors next
communicate (`sim.notice`): a reconfiguration it causes starts after the mean wait for the
plan's single-stage pipelines, which talk only at the gradient sync, to end their compute.
"""

from __future__ import annotations

import math
from itertools import groupby
from typing import Any

import simpy

from planner.policies import (
    Checkpoint,
    Detect,
    IterationEnd,
    NodesReady,
    NodesRemoved,
    PauseEnded,
    Restart,
    RestartFromCheckpoint,
    RestartFromSnapshot,
)
from planner.records import (
    CHECKPOINTING,
    FINISHED,
    RECONFIGURING,
    RUNNING,
    WAITING,
    EventRecord,
)

from .engine_decide import DecidingPart
from .engine_state import PAUSED, _Urgent


class Simulation(DecidingPart):
    """One run of `policy` over `trace`, priced by `pricing`; call `run()` once."""

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
    def _interrupted(self, kind: str, nodes: tuple) -> None:
        self._advance()
        if self.mode == RUNNING:
            self._settle()
        if kind == "wake":  # the wait a decision asked for is over: ask again, if it still stands
            if self.mode == WAITING and self.decision is nodes[0]:
                self._decide(PauseEnded(WAITING))
        elif kind == "ready":
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
        if not self.segments and not self.then_wait and self.declared_t > now:
            # training does not go on before every loss so far is declared (`sim.engine_decide`)
            self.segments = [(RECONFIGURING, self.declared_t - now, Detect("failure detection"))]
        if self.segments:
            self._begin_segment()
        elif self.resume:  # a decision that keeps training waited for the declaration: train on
            self.resume = False
            self._start_running()
            if self.pending_ready:
                self._deliver_ready()
            elif self.boundary:
                self.boundary = False
                self._decide(IterationEnd(self.iterations))
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
                self._wake_later()
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
