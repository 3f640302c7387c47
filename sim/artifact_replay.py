"""The artifact's simulators as they ran: an event-heap replay with `ArtifactQuirks` switches.

`--calibration artifact-as-run` (and `artifact` with any of the first nine quirks on) runs
here instead of `sim.engine`: the published numbers depend on the order of the artifact's
event heap, which a simpy engine does not have. The replay is written for this project
from the behaviour of SymbioticLab/Oobleck@7966556 tools/simulator/ (see
`sim.artifact_quirks` for the ten behaviours and where the artifact does each).

How the heap order is reproduced. The artifact keeps one `heapq` list of events ordered
by (time in ms, kind) only, its payload not compared: equal keys never swap, so their pop
order is the binary heap's, deterministic for a given trace file. Here every entry is an
`int` subclass whose value is time_ms x 16 + kind, carrying its payload as an attribute,
so `heapq` compares exactly the same keys and leaves exactly the same ties; the replay
pushes, pops and `heapify`s in the artifact's sequence (trace rows pushed in file order,
then one `heapify`; the ready event pushed when its add is processed; timeouts, steps and
checkpoint-complete events where the artifact creates them), so the list's storage order,
which Varuna's checkpoint test scans, is the artifact's too. With `bamboo_heap_order` off
ties pop in push order instead (a sequence number below the key).

Other facts carried over: times are whole milliseconds and an iteration takes
int(batch / rate x 1000) ms; the run stops at the first event at or after the trace's last
event time; average throughput is the artifact's: the area under its per-step throughput
points (Varuna zeroes the points of rolled-back steps, and its 10-step zeroing on a
failed checkpoint can replace a shorter list outright) over (last step end - first start).
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


class _Entry(int):
    """A heap entry: its value is the sort key, `data` its payload (not compared)."""

    data: Any


@dataclass
class _Node:
    state: int = CREATING
    ready_ms: int = -1  # when its ready event is due
    coords: list[tuple[int, int]] = field(default_factory=list)


class Replay:
    """One run of the artifact's `system` simulator on `trace`; call `run()` once."""

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
        self.heap: list[_Entry] = []
        self.nodes: dict[str, _Node] = {}
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
        entry = _Entry(key)
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

    # -- the run -------------------------------------------------------------------------
    def run(self) -> Replay:
        if self.infeasible is None:
            for event in self.trace.events:  # pushed in file order, then heapified, as the artifact does
                self._push(round(event.time_s * 1000), ADD if event.kind == "add" else REMOVE, event.node)
            heapq.heapify(self.heap)
            self._loop()
        self._finish()
        return self

    def _loop(self) -> None:
        heap, pop, push = self.heap, heapq.heappop, heapq.heappush
        stop = (self.end_ms * 16) << self.shift
        tshift = self.shift + 4
        kshift = self.shift
        self.stop_key = stop
        varuna = self.system == "varuna" and not self.iteration_rows
        xs_append, ys_append, batch, every = self.xs.append, self.ys.append, self.batch, self.every
        while heap:
            entry = pop(heap)
            if entry >= stop:
                break
            t = entry >> tshift
            kind = (entry >> kshift) & 15
            if kind == STEP:
                if entry.data != self.version:
                    continue
                if varuna:  # the hot path, inline: a Varuna step that writes no checkpoint
                    steps = self.steps + 1
                    if steps % every and not self.after_restart:
                        self.steps = steps
                        prev = self.prev_end
                        xs_append(prev)
                        xs_append(t)
                        ys_append(batch / ((t - prev) / 1000))
                        self.last_step_t = self.prev_end = t
                        nxt = _Entry((t + self.step_ms) * 16 + STEP)
                        nxt.data = self.version
                        push(heap, nxt)
                        continue
                self._step(t)
                continue
            if kind == CHECKPOINT_DONE:
                continue
            self._account(t)
            if kind == ADD:
                self._nodes_changed(t)
                node = self.nodes[entry.data] = _Node(ready_ms=t + self.startup_ms)
                self._push(node.ready_ms, READY, entry.data)
                self._note(t, "add", node=entry.data)
            elif kind == REMOVE:
                self._nodes_changed(t)
                self.counts["removals"] += 1
                self._note(t, "remove", node=entry.data)
                self._remove(t, entry.data)
            elif kind == READY:
                self._ready(t, entry.data)
            else:
                self._timeout(t, entry.data, kind == TIMEOUT_LOCAL)
            self._row(t)

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

    def _timeout(self, t: int, gen: int, local: bool) -> None:
        if not self.q.stale_timeouts and gen != self.gen:
            return
        if any(name not in self.nodes for name in self.rdv):
            self._relist()
            self.rdv_local = local
            self._rdv_timer(t)
            return
        stale = self.status != RENDEZVOUS or not self.rdv
        self._assign()
        self.fallback, self.fallback_handled = None, False
        self.version += 1
        self.rdv = []
        step = self._iteration_ms(self._usable()) if self.pipelines else 0
        if self.pipelines and not (step == ZERO_RATE_STEP_MS and not self.q.oobleck_zero_rate_runs):
            self.status = RUNNING
            self.step_ms = step
            if self.system == "varuna" and self.m.varuna_restart_s is None:
                self.varuna_restart_ms = self._varuna_restart_for(self._usable())
            self._push(t + step, STEP, self.version)
            if self.first_ms is None:
                self.first_ms = self.prev_end = t
            self._note(t, "resumed", nodes=self._usable(), iteration_ms=step)
        else:
            self.status = STOPPED
            if stale:
                self.counts["stalls"] += 1
            self._note(t, "stopped", stale=stale)

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

    # -- nodes ---------------------------------------------------------------------------
    def _ready(self, t: int, name: str) -> None:
        node = self.nodes.get(name)
        if node is None:
            return  # removed while starting
        node.state = IDLE if node.state == CREATING else node.state
        self._note(t, "ready", node=name)
        if self.status == STOPPED:
            self._rdv_start(t)
        elif self.status == RENDEZVOUS:
            self.rdv.append(name)
        else:
            self.waiting_nodes += 1

    def _remove(self, t: int, name: str) -> None:
        node = self.nodes.pop(name)
        if self.system == "bamboo":
            self._bamboo_remove(t, name, node)
            return
        if self.system == "varuna":
            self.after_restart = True
            if self.rollback:
                self._varuna_rollback(t)
        self._rdv_start(t)

    def _varuna_rollback(self, t: int) -> None:
        if self.pending_ckpt is not None:  # the stated model: written unless this removal cut it
            end, steps = self.pending_ckpt
            self.pending_ckpt = None
            if t > end:
                self.prev_ckpt, self.ckpt_steps = end, steps
            else:
                self.counts["checkpoints_failed"] += 1
                self._note(t, "checkpoint_failed", iterations=steps)
        ys = self.ys
        if self.prev_ckpt is None:
            first = 0
        else:
            try:
                first = (self.xs.index(self.prev_ckpt) + 1) // 2
            except ValueError:
                first = len(self.xs) // 2
        if first < len(ys):
            ys[first:] = [0.0] * (len(ys) - first)
            self.counts["rollbacks"] += 1
            self._note(t, "rollback", from_pair=first)
        if not self.q.varuna_counter_keeps_rolled_back:
            self.steps = self.ckpt_steps if self.prev_ckpt is not None else 0

    def _bamboo_remove(self, t: int, name: str, node: _Node) -> None:
        failed_over = False
        if node.state == WORKING:
            if len(node.coords) > 1:
                self._rdv_start(t)  # fatal: it covered a neighbour
                return
            p, s = node.coords[0]
            search = (p, s - 1 if s > 0 else self.stages - 1)
            for other in self.nodes.values():
                if search in other.coords:
                    if len(other.coords) > 1:
                        self._rdv_start(t)  # fatal: its predecessor already covers one
                        return
                    other.coords.append(node.coords[0])
                    failed_over = True
                    break
        if self.status == RUNNING and self.fallback is None:
            if failed_over or self.q.bamboo_slow_on_any_removal:
                self.fallback, self.fallback_handled = (self.steps, t), False
                self.step_ms = int(self.step_ms * art.BAMBOO_FAILOVER_SLOWDOWN)
        if not self.q.bamboo_stale_waiting:
            if node.state == IDLE and self.status == RUNNING:
                self.waiting_nodes = max(0, self.waiting_nodes - 1)
            elif self.status == RENDEZVOUS and name in self.rdv:
                self._relist()  # the reconfiguration starts over from the removal
                self._rdv_timer(t)

    # -- steps -----------------------------------------------------------------------------
    def _step(self, t: int) -> None:
        if self.fallback is not None and not self.fallback_handled and self.fallback[0] == self.steps:
            self.fallback_handled = True  # the rest of the step in flight runs 1.5x slower
            self._push(t + int((t - self.fallback[1]) * (art.BAMBOO_FAILOVER_SLOWDOWN - 1.0)), STEP, self.version)
            return
        self.steps += 1
        self.last_step_t = end = t
        if self.system == "varuna":
            prev = self.prev_end
            self.xs.append(prev)
            self.xs.append(t)
            self.ys.append(self.batch / ((t - prev) / 1000))
            if self.steps % self.every == 0 or self.after_restart:
                end = self._varuna_checkpoint(t)
        else:
            self.kept_steps += 1
            if self.system == "oobleck" and not self.iteration_rows:
                end = self._oobleck_fast_forward(end)
        self.prev_end = end
        if self.iteration_rows:
            self._row(t)
        if self.system == "bamboo" and self._bamboo_should_reconfigure():
            self._account(end)
            self._rdv_start(end, local=True)
            self._row(end)
            return
        self._push(end + self.step_ms, STEP, self.version)

    def _oobleck_fast_forward(self, end: int) -> int:
        """Oobleck's steps before the next other event, counted at once: nothing in Oobleck's
        outcome depends on where entries sit in the heap, only on what pops when."""
        limit = min(self.heap[0], self.stop_key) if self.heap else self.stop_key
        last_t = (limit - 8) // 16  # a step at t pops first when t x 16 + STEP < limit
        k = (last_t - end) // self.step_ms if last_t >= end + self.step_ms else 0
        if k > 0:
            self.steps += k
            self.kept_steps += k
            end += k * self.step_ms
            self.last_step_t = end
        return end

    def _varuna_checkpoint(self, t: int) -> int:
        self.after_restart = False
        end = t + self.ckpt_ms
        self._push(end + self.ckpt_ms, CHECKPOINT_DONE)
        self.counts["checkpoints"] += 1
        if self.q.varuna_checkpoint_scan:
            heapq.heapify(self.heap)
            if self.rollback and self._scan_says_fail():
                self.counts["checkpoints_failed"] += 1
                self.steps = max(0, self.steps - self.every)
                ys = self.ys
                if len(ys) >= self.every:
                    ys[-self.every :] = [0.0] * self.every
                else:
                    ys[:] = [0.0] * self.every  # the artifact's slice assignment on a shorter list
                self._note(t, "checkpoint_failed", iterations=self.steps)
            else:
                self.prev_ckpt, self.ckpt_steps = end, self.steps
        else:
            if self.pending_ckpt is not None:  # the previous write ended before this step did
                self.prev_ckpt, self.ckpt_steps = self.pending_ckpt
            self.pending_ckpt = (end, self.steps)
        return end

    def _scan_says_fail(self) -> bool:
        """The artifact's test: a removal before the first checkpoint-complete event in the
        heap's storage order."""
        removal = False
        for entry in self.heap:
            kind = (entry >> self.shift) & 15
            if kind == REMOVE:
                removal = True
            elif kind == CHECKPOINT_DONE:
                return removal
        return False

    def _bamboo_should_reconfigure(self) -> bool:
        overloaded = sum(1 for n in self.nodes.values() if n.state == WORKING and len(n.coords) > 1)
        waiting = self.waiting_nodes
        if overloaded and waiting >= overloaded:
            return True
        active = self.pipelines * self.stages - overloaded
        if overloaded and 2 * overloaded / active > art.BAMBOO_OVERLOAD_THRESHOLD:
            return True
        return (active + waiting) // STAGES > self.pipelines

    # -- the end ---------------------------------------------------------------------------
    def _finish(self) -> None:
        self._account(self.end_ms)
        self._nodes_changed(self.end_ms)
        self._row(self.end_ms, "finished")

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
