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

from . import artifact_data as art
from .artifact_replay_state import (
    ADD,
    CHECKPOINT_DONE,
    CREATING,
    IDLE,
    READY,
    REMOVE,
    RENDEZVOUS,
    RUNNING,
    STAGES,
    STEP,
    STOPPED,
    TIMEOUT_LOCAL,
    WORKING,
    ZERO_RATE_STEP_MS,
    HeapEntry,
    ReplayNode,
    ReplayState,
)


class Replay(ReplayState):
    """One run of the artifact's `system` simulator on `trace`; call `run()` once."""

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
                        nxt = HeapEntry((t + self.step_ms) * 16 + STEP)
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
                node = self.nodes[entry.data] = ReplayNode(ready_ms=t + self.startup_ms)
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

    def _bamboo_remove(self, t: int, name: str, node: ReplayNode) -> None:
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
