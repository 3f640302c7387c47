"""The artifact replay's state, its event heap and its results (`sim.artifact_replay` has the
story): the nodes and their states, the heap of (time in ms, kind) entries, the
rendezvous and its timers, the grid assignment, the timeline rows, and the figures the
artifact reports (its average throughput, recoveries, committed steps, the time breakdown).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

from planner.records import EventRecord, TimeBreakdown, TimelineRow
from traces.model import Trace

from . import artifact_data as art
from .artifact_quirks import ArtifactQuirks
from .bounds import check_timeline_rows
from .errors import SimError

ADD, REMOVE, READY, TIMEOUT_GLOBAL, TIMEOUT_LOCAL, STEP, CHECKPOINT_DONE = 1, 2, 4, 5, 6, 7, 8
CREATING, IDLE, WORKING = 0, 1, 2  # a node: starting, usable outside the grid, in the grid
STOPPED, RENDEZVOUS, RUNNING = "waiting", "rendezvous", "running"
ZERO_RATE_STEP_MS = 10**12  # the artifact's Oobleck iteration when the table rate is 0
STAGES = art.MIN_NODES  # the artifact's pipeline stage target
BAMBOO_RESTART_MS = round(art.BAMBOO_RESTART_S * 1000)


class HeapEntry(int):
    """A heap entry: its value is the sort key, `data` its payload (not compared)."""

    data: Any


@dataclass
class ReplayNode:
    state: int = CREATING
    ready_ms: int = -1  # when its ready event is due
    coords: list[tuple[int, int]] = field(default_factory=list)


class ReplayState:
    """What the replay knows and records; `Replay` adds the event handlers."""

    def __init__(
        self,
        trace: Trace,
        system: str,
        model: str,
        quirks: ArtifactQuirks,
        *,
        rollback: bool,
        node_startup_s: float,
        price_per_node_hour: float,
        duration_s: float | None = None,
        iteration_rows: bool = False,
    ):
        if not trace.events:
            raise SimError(f"trace {trace.name!r} has no events")
        self.trace, self.system, self.q = trace, system, quirks
        self.m = art.get_model(model)
        self.batch = self.m.global_batch
        self.rollback = rollback
        self.startup_ms = round(node_startup_s * 1000)
        self.price_per_s = price_per_node_hour / 3600.0
        self.iteration_rows = iteration_rows
        self.start_ms = round(trace.start_s * 1000)
        last = round(trace.stop_s * 1000)
        self.end_ms = last if duration_s is None else self.start_ms + round(duration_s * 1000)
        # ties pop in heap order (the artifact) or in push order (a sequence below the key)
        self.shift = 0 if (system != "bamboo" or quirks.bamboo_heap_order) else 24
        self.seq = 0
        self.heap: list[HeapEntry] = []
        self.nodes: dict[str, ReplayNode] = {}
        self.status = STOPPED
        self.rdv: list[str] = []
        self.rdv_local = False
        self.version = 0
        self.gen = 0
        self.pipelines = 0
        self.stages = 0
        self.waiting_nodes = 0
        self.step_ms = 0
        self.steps = 0
        self.first_ms: int | None = None
        self.prev_end = 0
        self.last_step_t: int | None = None
        self.kept_steps = 0  # Oobleck and Bamboo: every step counts
        self.xs: list[int] = []  # Varuna: the artifact's performance x pairs (ms)
        self.ys: list[float] = []  # Varuna: the y of each pair (the list the artifact zeroes)
        self.after_restart = False
        self.prev_ckpt: int | None = None
        self.ckpt_steps = 0
        self.pending_ckpt: tuple[int, int] | None = None  # stated model: (write end, steps)
        self.fallback: tuple[int, int] | None = None  # Bamboo: (steps, removal time)
        self.fallback_handled = False
        self.varuna_restart_ms = 76_000  # the artifact's initial value (BERT-large)
        self.ckpt_ms = round(self.m.varuna_checkpoint_s * 1000)
        self.every = art.VARUNA_CHECKPOINT_EVERY
        self.counts = dict(removals=0, rendezvous=0, stalls=0, checkpoints=0, checkpoints_failed=0, rollbacks=0)
        self.events: list[EventRecord] = []
        self.timeline: list[TimelineRow] = []
        self.state_s = {RUNNING: 0.0, STOPPED: 0.0, "reconfiguring": 0.0, "restarting": 0.0}
        self.mark = self.start_ms
        self.stop_key = 0
        self.node_s = 0.0
        self.node_mark = self.start_ms
        self.infeasible = None
        if system == "bamboo" and not art.runnable("bamboo", self.m.name):
            self.infeasible = f"out of memory: the artifact gives Bamboo no throughput on {self.m.name}"

    # -- the heap ------------------------------------------------------------------------
    def _push(self, t_ms: int, kind: int, data: Any = None) -> None:
        key = (t_ms * 16 + kind) << self.shift
        if self.shift:
            self.seq += 1
            key += self.seq
        entry = HeapEntry(key)
        entry.data = data
        heapq.heappush(self.heap, entry)

    def _kind(self, entry: int) -> int:
        return (entry >> self.shift) & 15

    # -- tables ----------------------------------------------------------------------------
    def _usable(self) -> int:
        return sum(1 for n in self.nodes.values() if n.state != CREATING)

    def _iteration_ms(self, count: int) -> int:
        rate = art.row(self.system, self.m.name, count).samples_per_s
        if rate <= 0:
            if self.system == "oobleck":
                return ZERO_RATE_STEP_MS
            raise SimError(f"internal: the artifact gives {self.system} no throughput on {self.m.name} at {count}")
        return int(self.batch / rate * 1000)

    def _varuna_restart_for(self, count: int) -> int:
        if self.m.varuna_restart_s is not None:
            return round(self.m.varuna_restart_s * 1000)
        restart = art.row("varuna", self.m.name, count).varuna_restart_s
        assert restart is not None  # BERT-large has the column
        return round(restart * 1000)

    def _timeout_ms(self, local: bool, t: int) -> int:
        if self.system == "oobleck":
            return round(self.m.oobleck_reconfigure_s * 1000)
        if self.system == "bamboo":
            return round(self.m.bamboo_reconfigure_s * 1000) if local else BAMBOO_RESTART_MS
        if self.m.varuna_restart_s is None and not self.q.varuna_restart_previous_count:
            # the count it restarts with: usable now plus those becoming usable this instant
            soon = sum(1 for n in self.nodes.values() if n.state == CREATING and n.ready_ms == t)
            return self._varuna_restart_for(self._usable() + soon) - self.ckpt_ms
        restart = self.varuna_restart_ms if self.m.varuna_restart_s is None else self._varuna_restart_for(0)
        return restart - self.ckpt_ms

    # -- records ---------------------------------------------------------------------------
    def _state_name(self) -> str:
        if self.status != RENDEZVOUS:
            return self.status
        restart = self.system == "varuna" or (self.system == "bamboo" and not self.rdv_local)
        return "restarting" if restart else "reconfiguring"

    def _account(self, t: int) -> None:
        if t > self.mark:
            self.state_s[self._state_name()] += (t - self.mark) / 1000
            self.mark = t

    def _nodes_changed(self, t: int) -> None:
        self.node_s += len(self.nodes) * (t - self.node_mark) / 1000
        self.node_mark = t

    def _row(self, t: int, state: str | None = None) -> None:
        """A timeline row when the state or the live node count changed (or every step
        with `iteration_rows`), the engine's rule."""
        state = state or self._state_name()
        last = self.timeline[-1] if self.timeline else None
        if last is not None and state == last.state and len(self.nodes) == last.live_nodes and not self.iteration_rows:
            return
        running = state == RUNNING
        row = TimelineRow(
            time_s=t / 1000,
            live_nodes=len(self.nodes),
            working_nodes=self.pipelines * self.stages if running else 0,
            state=state,
            iterations_done=self.steps,
            samples_done=self.steps * self.batch,
            throughput_samples_per_s=self.batch / self.step_ms * 1000 if running and self.step_ms else 0.0,
            cost_usd=(self.node_s + len(self.nodes) * (t - self.node_mark) / 1000) * self.price_per_s,
        )
        if self.timeline and self.timeline[-1].time_s == row.time_s:
            self.timeline[-1] = row
        else:
            if self.iteration_rows:
                check_timeline_rows(len(self.timeline), row.time_s, self.end_ms / 1000)
            self.timeline.append(row)

    def _note(self, t: int, kind: str, **detail: Any) -> None:
        self.events.append(EventRecord(t / 1000, kind, detail))

    # -- rendezvous ----------------------------------------------------------------------
    def _relist(self) -> None:
        self.rdv = [name for name, n in self.nodes.items() if n.state != CREATING]

    def _rdv_timer(self, t: int) -> None:
        if not self.q.stale_timeouts:
            self.gen += 1  # the pending timeout, if any, no longer counts
        self._push(
            t + self._timeout_ms(self.rdv_local, t), TIMEOUT_LOCAL if self.rdv_local else TIMEOUT_GLOBAL, self.gen
        )

    def _rdv_start(self, t: int, local: bool = False) -> None:
        self.counts["rendezvous"] += 1
        self.status = RENDEZVOUS
        self.rdv_local = local
        if not self.q.train_through_pause:
            self.version += 1  # the step in flight is lost now
        self._relist()
        self._rdv_timer(t)
        self._note(t, "rendezvous", nodes=len(self.rdv), local=local)

    def _assign(self) -> None:
        """The first whole pipelines of the rendezvous list get coordinates, in list order."""
        count = len(self.rdv)
        self.stages = STAGES if count >= STAGES else 0
        self.pipelines = count // STAGES if self.stages else 0
        slots = self.pipelines * self.stages
        self.waiting_nodes = 0
        if self.system != "bamboo":  # only Bamboo's coordinates matter
            self.waiting_nodes = count - slots
            return
        for i, name in enumerate(self.rdv):
            node = self.nodes[name]
            if i < slots:
                node.state, node.coords = WORKING, [(i // self.stages, i % self.stages)]
            else:
                node.state, node.coords = IDLE, []
                self.waiting_nodes += 1

    def avg_samples_per_s(self) -> float:
        """The artifact's average: area under the per-step points over the training span."""
        if self.last_step_t is None or self.first_ms is None:
            return 0.0
        span_ms = self.last_step_t - self.first_ms
        if span_ms <= 0:
            return 0.0
        if self.system != "varuna":
            return self.kept_steps * self.batch / (span_ms / 1000)
        xs, ys = self.xs, self.ys
        area = sum((xs[2 * k + 1] - xs[2 * k]) / 1000 * ys[k] for k in range(min(len(xs) // 2, len(ys))))
        return area / (span_ms / 1000)

    def recoveries(self) -> tuple[int, int]:
        """(reconfigurations, restarts) over the run: every rendezvous is a restart in
        Varuna's program and a reconfiguration in the other two."""
        n = self.counts["rendezvous"]
        return (0, n) if self.system == "varuna" else (n, 0)

    def committed_steps(self) -> int:
        if self.system != "varuna":
            return self.kept_steps
        return sum(1 for k in range(min(len(self.xs) // 2, len(self.ys))) if self.ys[k] > 0)

    def breakdown(self) -> TimeBreakdown:
        """Where the time went, by the job's state (the artifact overlaps some: steps that
        complete during a pause are counted there)."""
        running = self.state_s[RUNNING]
        ckpt = min(running, self.counts["checkpoints"] * self.ckpt_ms / 1000) if self.system == "varuna" else 0.0
        lost = 0.0
        if self.system == "varuna":
            xs, ys = self.xs, self.ys
            lost = sum((xs[2 * k + 1] - xs[2 * k]) / 1000 for k in range(min(len(xs) // 2, len(ys))) if ys[k] == 0)
        lost = min(lost, running - ckpt)
        return TimeBreakdown(
            useful_compute_s=running - ckpt - lost,
            reconfiguration_s=self.state_s["reconfiguring"],
            restart_s=self.state_s["restarting"],
            checkpoint_s=ckpt,
            lost_work_s=lost,
            waiting_s=self.state_s[STOPPED],
        )
