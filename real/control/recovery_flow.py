"""What the coordinator does between two generations: after a failure, after a planned stop.

After a failure (`after_failure`):

1. Wait a moment for failures that came together, fence every dead or hung worker
   (SIGKILL; a frozen process keeps its sockets open until then) and the rest of its node.
2. Abort the generation: `go` = "abort" if it had not started, and the first step
   without a verdict gets "abort" (`commit.resolve`), which gives the resume step R.
3. Collect every survivor's report (it tore down and holds its layers ready for R). A
   survivor that does not report within the teardown timeout cannot tear down cleanly:
   it is fenced and replaced by a fresh process (local launcher), which will receive
   its layers from replicas; without a launcher its node counts as lost.
4. Ask the policy (`NodesRemoved`) and carry out its decision (`execute`): a live
   reconfiguration (copies planned from what the survivors really hold), a restart from
   the last checkpoint (Oobleck when a layer lost every replica; Varuna always, after
   saving the survivors' state when every stage still has a replica, and after stopping
   every process), a restart from an in-memory copy (`RestartFromSnapshot`, GEMINI: the
   copies the generation completed are booked first, `memory.MemoryBook`; when the one
   asked for is not held any more, the newest that is, else the checkpoint), or waiting
   for nodes.

A planned stop (a join the policy accepted) goes through steps 3 and 4 without a
failure. Failures during any of this are handled the same way: the recovery in progress
goes on (and counts the extra failure), from what the survivors then hold.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any, Protocol

import torch.distributed as dist

from designs import Design
from planner.planner import Planner
from planner.policies import (
    Admit,
    Checkpoint,
    CopyLayers,
    Decision,
    Event,
    NodesReady,
    NodesRemoved,
    Reinstantiate,
    Restart,
    RestartFromCheckpoint,
    RestartFromSnapshot,
    Start,
)
from planner.records import RUNNING, WAITING

from ..config import RunConfig
from ..protocol import keys
from ..protocol import rendezvous as rv
from ..protocol.commit import resolve
from ..protocol.directive import RECONFIGURE, RESTART, START, Directive
from ..protocol.failures import Injection
from ..protocol.manifest import Manifest
from ..protocol.secret import JobSecret
from ..protocol.sources import CHECKPOINT, INIT, uniform_sources
from ..state.transfers import Holding, LostLayers, memory_sources, plan_sources
from .checkpoints import CheckpointBook
from .job import JobState
from .membership import Membership
from .memory import HeldCopy, MemoryBook
from .outcome import JobFailed, RunOutcome, headline
from .recovery import RESTART as RESTART_KIND
from .recovery import Recovery
from .schedule import EventSchedule

STRAGGLER_MIN_S = 6.0  # a severed rank reports within 0.8 s (issue-15 runs, 32 ranks on 2 cores)
STRAGGLER_STEPS = 3.0
SETTLE_S = 0.1  # after the first sign of a failure, wait this long for others that came with it
POLL_S = 0.005


class JobControl(Protocol):
    """What the flow uses of its coordinator: the job's fixed pieces, its live views of the
    workers and the schedule, and the coordinator's own steps (one watch round, asking the
    policy, publishing a generation, recording a commit, a timeline row)."""

    config: RunConfig
    design: Design
    planner: Planner
    store: dist.Store
    outcome: RunOutcome
    secret: JobSecret
    members: Membership
    schedule: EventSchedule
    injections: tuple[Injection, ...]
    memory: MemoryBook

    def tick(self) -> None: ...
    def decide(self, event: Event, job_state: str) -> Decision: ...
    def publish(
        self,
        plan: Any,
        kind: str,
        resume_step: int,
        sources_for: Callable,
        manifest: Manifest | None = None,
        memory_from: int | None = None,
    ) -> None: ...
    def record_commit(self, g: int, step: int, d: Directive) -> None: ...
    def row(self, state: str, time_s: float | None = None) -> None: ...


class NodesLost(RuntimeError):
    """Nodes a decision relies on died before its generation could be published."""


class RecoveryFlow:
    """What happens between two generations, on the coordinator's `JobState` (`job`) and
    through its store, membership, policy and publishing (`control`, a `JobControl`)."""

    def __init__(self, job: JobState, control: JobControl):
        self.job = job
        self.c = control
        self.checkpoints = CheckpointBook(job, control)

    def mark_phase(self, phase: str, t_wall: float | None = None) -> None:
        if self.job.recovery is not None:
            self.job.recovery.enter(phase, (time.time() if t_wall is None else t_wall) - self.c.outcome.t0_wall)

    def on_commit(self, step: int, t_end_s: float) -> None:
        rec = self.job.recovery
        if rec is not None and rec.until_step is not None and step >= rec.until_step:
            rec.finish(t_end_s)
            self.c.outcome.recoveries.append(rec)
            self.c.outcome.event("recovered", **{k: v for k, v in rec.to_dict().items() if k != "kind"}, how=rec.kind)
            self.job.recovery = None
        self.checkpoints.on_commit(step)

    def _failure_time(self, t_detect: float) -> float:
        """The earliest failure behind this detection: an injected victim's own stamp, a
        coordinator-driven kill, else the detection itself."""
        times = self.c.schedule.take_failure_times() + self.note_fired()
        return min(times) if times else t_detect

    def note_fired(self) -> list[float]:
        """Record the worker-fired injections not yet recorded; the stamps of those that
        are failures. Called at each failure and once at the end, so one that fires after
        its failure was seen (a stall in a slow teardown) is counted all the same. One at
        `teardown` gives no failure time: it strikes inside a recovery already under way
        (its rank is fenced or lost there), and its stamp must not start the next one."""
        fired, times = set(self.c.outcome.injections_fired), []
        for item in self.c.injections:
            if item.by_worker and item.index not in fired and self.c.store.check([keys.fired_key(item.index)]):
                self.c.outcome.injections_fired.append(item.index)
                if item.point != "teardown":
                    times.append(float(self.c.store.get(keys.fired_key(item.index)).decode()))
        return times

    # -- a failure ---------------------------------------------------------------------
    def after_failure(self) -> bool:
        """Handle a failure in the current generation; True when the job is complete."""
        out, store, g, d = self.c.outcome, self.c.store, self.job.gen, self.job.current()
        t_detect = self.job.failure_detected_s
        time.sleep(SETTLE_S)
        self.c.tick()
        if self.job.recovery is None:
            self.job.recovery = Recovery(len(out.recoveries), self._failure_time(t_detect) - out.t0_wall)
            self.c.schedule.at_recovery(self.job.committed)
        else:
            self.job.recovery.failures += 1
            self._failure_time(t_detect)
        self.mark_phase("rebuild", max(t_detect, out.t0_wall + self.job.recovery.t_fail_s))
        never_started = store.compare_set(keys.go_key(g), "", "abort").decode() == "abort"
        resume = resolve(store, g, self.job.committed, self.c.config.steps)
        while self.job.committed < resume:
            self.c.record_commit(g, self.job.committed, d)
        store.set(keys.resume_key(g), str(resume))
        reports, unclean = self.collect(
            g, d, patient=not (never_started and self._restart_replaces_all(d)), after_word=True
        )
        self.book_copies(d)
        if not self.job.removed and not unclean:
            faults = [
                store.get(keys.fault_key(g, r)).decode()
                for r in range(d.layout.world_size)
                if store.check([keys.fault_key(g, r)])
            ]
            for text in faults:
                out.event("worker_error", traceback=text)
            raise JobFailed(
                "; ".join(headline(t) for t in faults[:3]) or f"generation {g} failed without a lost worker"
            )
        self._update_holdings(d, reports)
        if resume >= self.c.config.steps:
            out.event("failure_after_last_step", generation=g)
            self.job.recovery = None
            return True
        rec = self.job.recovery
        if rec.until_step is None:
            rec.until_step = resume
        rec.nodes.extend(n for n in self.job.removed if n not in rec.nodes)
        self._replace(d, unclean)
        self.decide_and_execute(resume)
        return False

    def _restart_replaces_all(self, d: Directive) -> bool:
        """Whether a failed generation `d` that never started can be abandoned without its
        survivors' reports: the design stops every process on a restart (Varuna), a
        launcher starts fresh ones, and `d` was a start or restart, whose ranks hold
        nothing the checkpoint (or the initialisation, or node memory) does not. Its
        survivors may be blocked in the process-group rendezvous, waiting for the dead
        rank until the group timeout (60 s by default); the restart's "stop everything"
        fences them instead of waiting (measured: a removal 0.02 s after a restarted
        generation was published cost a 16-node Varuna run 60 s)."""
        return (
            self.c.design.real.restarts_processes
            and self.c.members.processes is not None
            and self.c.config.respawn
            and d.kind in (START, RESTART)
        )

    def collect(
        self, g: int, d: Directive, *, patient: bool = True, after_word: bool = False
    ) -> tuple[dict[int, dict], set[int]]:
        """Reports of the generation's live ranks; ranks silent past the teardown timeout
        are fenced and returned as unclean. Not `patient`: the reports already there,
        and no rank is awaited or fenced (the restart that follows stops them all).
        `after_word`: the coordinator's resume word is out (after a failure), so every
        rank that was training (had reported ready) was severed or aborted by its watch
        and should report within a moment; one still silent past `straggler_s` is fenced
        and replaced at once where a launcher can start a fresh process, rather than at
        the teardown timeout (measured: a gloo send that the sever did not free held a
        32-node Oobleck job 60 s); one whose watch noted it `stuck` (waiting on a
        communication with no socket left to shut) goes at once. Ranks not yet ready keep
        the teardown timeout: one blocked in the rendezvous is beyond any sever, and one
        still importing or loading is slow, not stuck (a 30-node start on 2 cores spent
        over 6 s in imports after its groups were built: fencing those replaced all 29
        survivors)."""
        members, store = self.c.members, self.c.store
        expect = {r for r, w in enumerate(d.workers) if members.workers[w].alive}
        reports: dict[int, dict] = {}
        t_start = time.time()
        deadline = t_start + self.c.config.teardown_timeout_s
        early = after_word and members.processes is not None and self.c.config.respawn
        straggle_s = self.straggler_s()
        stragglers: set[int] = set()
        while True:
            for r in sorted(expect - reports.keys()):
                if store.check([keys.left_key(g, r)]):
                    reports[r] = rv.get_json(store, keys.left_key(g, r))
            if not patient:
                self.c.outcome.event(
                    "survivors_not_awaited", generation=g, ranks=sorted(expect - reports.keys()),
                    reason="the generation never started and the restart stops every process",
                )  # fmt: skip
                expect = set(reports)
            if expect <= reports.keys() or time.time() > deadline:
                break
            if early:  # training ranks: one noted stuck beyond any sever goes now, the rest at the bound
                past = time.time() - t_start > straggle_s
                for r in sorted(expect - reports.keys() - stragglers):
                    if not store.check([keys.ready_key(g, r)]):
                        continue
                    noted_key = keys.straggled_key(g, r)
                    if store.check([noted_key]) and rv.get_json(store, noted_key).get("stuck"):
                        reason = f"rank {r} waits in a communication that its re-sever found no socket to free"
                    elif past:
                        reason = f"rank {r} did not tear down within {straggle_s:.1f} s of the coordinator's word"
                    else:
                        continue
                    stragglers.add(r)
                    self._fence_unclean(d, g, r, reason, time.time() - t_start)
            self.c.tick()
            expect = {r for r in expect if members.workers[d.workers[r]].alive}
            time.sleep(POLL_S)
        for r in sorted(reports):
            if store.check([keys.fault_key(g, r)]):
                self.c.outcome.event(
                    "fault",
                    generation=g,
                    rank=r,
                    error=headline(store.get(keys.fault_key(g, r)).decode()),
                    after_s=round(reports[r]["t_fault"] - self.job.failure_detected_s, 3)
                    if reports[r].get("t_fault")
                    else None,
                    left_after_s=round(reports[r]["t"] - self.job.failure_detected_s, 3),
                    timing=reports[r].get("timing"),
                )
        unclean = expect - reports.keys()
        for r in sorted(unclean):
            self._fence_unclean(
                d,
                g,
                r,
                f"rank {r} did not tear down within {self.c.config.teardown_timeout_s:.0f} s",
                time.time() - t_start,
            )
        self.mark_phase("planning")
        return reports, unclean | stragglers

    def _fence_unclean(self, d: Directive, g: int, r: int, reason: str, after_s: float) -> None:
        """Fence rank `r` of generation `g`, which did not tear down, with what its watch
        noted if it straggled (`keys.straggled_key`: where it was blocked)."""
        wid, store = d.workers[r], self.c.store
        self.c.members.fence(wid, reason)
        noted = rv.get_json(store, keys.straggled_key(g, r)) if store.check([keys.straggled_key(g, r)]) else None
        self.c.outcome.event(
            "worker_unclean",
            worker=wid,
            rank=r,
            generation=g,
            reason=reason,
            after_s=round(after_s, 3),
            straggled=noted,
        )

    def straggler_s(self) -> float:
        """How long a severed (or aborted) rank may take to report before it is fenced:
        `STRAGGLER_MIN_S`, or `STRAGGLER_STEPS` of the job's recent step (the median of
        its last three) where that is longer (a rank computing when the word came blocks
        again only at its next communication; the median, so that one step spanning a
        recovery does not stretch the bound)."""
        ends = self.c.outcome.step_end_s[-4:]
        steps = [b - a for a, b in zip(ends, ends[1:])]
        return max(STRAGGLER_MIN_S, STRAGGLER_STEPS * statistics.median(steps)) if steps else STRAGGLER_MIN_S

    def book_copies(self, d: Directive) -> None:
        """The in-memory copies generation `d` completed (none unless the design takes them)."""

        def note(held: HeldCopy) -> None:
            self.c.outcome.event("memory_copy", generation=held.generation, step=held.step)

        self.c.memory.close(d, self.job.committed, note)

    def _update_holdings(self, d: Directive, reports: dict[int, dict]) -> None:
        for r, rep in reports.items():
            wid = int(rep["worker"])
            self.job.holdings[wid] = Holding(wid, d.layout.stages[r].node, int(rep["step"]), tuple(rep["layers"]))
        for wid in list(self.job.holdings):
            if not self.c.members.workers[wid].alive:
                del self.job.holdings[wid]

    def _replace(self, d: Directive, unclean: set[int]) -> None:
        """Fresh processes for workers that could not tear down (their node stays: the
        policy is asked once they have registered, and their layers come from replicas)."""
        replaced = []
        for r in sorted(unclean):
            stage, wid = d.layout.stages[r], d.workers[r]
            processes = self.c.members.processes
            if processes is not None and self.c.config.respawn:
                self.mark_phase("respawn")
                processes.spawn(stage.node, stage.gpu)
                replaced.append(stage.node)
                self.c.outcome.event("worker_replaced", node=stage.node, gpu=stage.gpu, worker=wid)
            else:
                for other in self.c.members.live_workers(stage.node):
                    self.c.members.fence(other, f"node {stage.node} lost an unclean worker")
                if stage.node not in self.job.removed:
                    self.job.removed.append(stage.node)
        if replaced:
            try:
                self.await_nodes(replaced)
            except NodesLost:
                pass  # the policy hears of them with the other removals
            self.job.pending_ready = [n for n in self.job.pending_ready if n not in replaced]
            self.mark_phase("planning")

    def decide_and_execute(self, resume: int) -> None:
        while True:
            removed, self.job.removed = self.job.removed, []
            self.mark_phase("planning")
            working = set(self.c.outcome.plan.nodes) if self.c.outcome.plan is not None else set()
            if removed:
                decision = self.c.decide(NodesRemoved(tuple(removed)), RUNNING)
                if any(isinstance(a, Reinstantiate) for a in decision.actions):
                    self.c.outcome.failures_survived += len(working & set(removed))
            else:
                decision = self.job.last_decision()
            try:
                self.execute(decision, resume, same_plan=not removed)
                return
            except NodesLost as exc:
                self.c.outcome.event("nodes_lost_while_reconfiguring", reason=str(exc))
                if self.job.recovery is not None:  # the loss belongs to the recovery under way
                    self.job.recovery.failures += 1
                    self.job.recovery.nodes.extend(n for n in self.job.removed if n not in self.job.recovery.nodes)
                    self._failure_time(time.time())  # consume its kill time, or the next recovery would start there

    # -- a planned stop --------------------------------------------------------------------
    def after_stop(self) -> None:
        g, d = self.job.gen, self.job.current()
        resume = self.job.committed
        reports, unclean = self.collect(g, d)
        self.book_copies(d)
        self._update_holdings(d, reports)
        decision, self.job.pending_decision = self.job.pending_decision, None
        if unclean or self.job.removed or decision is None:
            self.job.failure_detected_s = time.time()
            if self.job.recovery is None:
                self.job.recovery = Recovery(
                    len(self.c.outcome.recoveries),
                    self._failure_time(self.job.failure_detected_s) - self.c.outcome.t0_wall,
                )
                self.job.recovery.until_step = resume
            self.mark_phase("planning")
            self._replace(d, unclean)
            self.decide_and_execute(resume)
            return
        self.c.outcome.event("planned_stop", generation=g, step=resume)
        out = self.c.outcome
        out.planned_stops.append(
            {
                "step": resume,
                "t_stop_s": out.step_end_s[-1] if out.step_end_s else out.now_s(),
                "t_ready_s": None,  # set when the new generation is ready (`Coordinator.on_generation_ready`)
                "actions": [type(a).__name__ for a in decision.actions],
            }
        )
        try:
            self.execute(decision, resume)
        except NodesLost as exc:  # a node the new plan needs died meanwhile: a failure after all
            self.c.outcome.event("nodes_lost_while_reconfiguring", reason=str(exc))
            self.job.failure_detected_s = time.time()
            t_fail_s = self._failure_time(self.job.failure_detected_s) - self.c.outcome.t0_wall
            if self.job.recovery is None:
                self.job.recovery = Recovery(len(self.c.outcome.recoveries), t_fail_s)
                self.job.recovery.until_step = resume
            else:  # a stop planned before the recovery's first step (a morph on joins): its failure too
                self.job.recovery.failures += 1
                self.job.recovery.nodes.extend(n for n in self.job.removed if n not in self.job.recovery.nodes)
            self.decide_and_execute(resume)

    # -- carrying out a decision ---------------------------------------------------------------
    def execute(self, decision: Decision, resume: int, *, same_plan: bool = False) -> None:
        kinds = {type(a) for a in decision.actions}
        while decision.plan is None:
            if Checkpoint in kinds:
                self.save_now(resume)
            if decision.rolls_back:
                resume = self.rollback()
            decision = self.wait_for_nodes()
            kinds = {type(a) for a in decision.actions}
        plan = decision.plan
        self.await_nodes(plan.nodes)
        if self.job.gen < 0:
            self.c.publish(plan, START, 0, lambda layout, workers: uniform_sources(layout, INIT))
        elif kinds & {Restart, RestartFromCheckpoint, RestartFromSnapshot, Start} and not same_plan:
            copy = self._copy_to_restore(decision, plan) if RestartFromSnapshot in kinds else None
            saved = Checkpoint in kinds and self.save_now(resume)
            if copy is not None:
                resume = self.rollback(copy.step)
            elif not (Restart in kinds and saved):
                resume = self.rollback()
            if self.c.design.real.restarts_processes:
                self.restart_processes(plan)
            if copy is not None:
                self._publish_from_memory(plan, copy)
            else:
                self._publish_restart(plan, resume)
        elif kinds & {Reinstantiate, Admit} or same_plan:  # Admit: nodes that got the live state join
            copies = [
                (c.dst_node, c.src_node, c.layers)
                for a in decision.actions
                if isinstance(a, CopyLayers)
                for c in a.copies
            ]
            try:
                self.c.publish(
                    plan,
                    RECONFIGURE,
                    resume,
                    lambda layout, workers: plan_sources(layout, workers, self.job.holdings, resume, copies),
                )
                self.c.outcome.reconfigurations += 1
            except LostLayers as exc:
                self.c.outcome.event("live_recovery_impossible", reason=str(exc))
                self._publish_restart(plan, self.rollback())
        else:
            raise JobFailed(f"cannot carry out {[type(a).__name__ for a in decision.actions]}")
        self.job.pending_ready = [n for n in self.job.pending_ready if n not in set(plan.nodes)]
        self.mark_phase("rebuild")

    def _publish_restart(self, plan, resume: int) -> None:
        self.checkpoints.restart_note(resume)
        if resume == 0 and (self.job.manifest is None or self.job.manifest.step != 0):
            self.c.publish(plan, RESTART, 0, lambda layout, workers: uniform_sources(layout, INIT))
        else:
            self.c.publish(
                plan, RESTART, resume, lambda layout, workers: uniform_sources(layout, CHECKPOINT), self.job.manifest
            )
            recovery = self.job.recovery.index if self.job.recovery is not None else None
            self.checkpoints.load_note(self.job.current().layout, recovery)
        self.c.outcome.restarts += 1
        if self.job.recovery is not None:
            self.job.recovery.kind = RESTART_KIND

    def _copy_to_restore(self, decision: Decision, plan) -> HeldCopy | None:
        """The in-memory copy a `RestartFromSnapshot` restores on `plan`'s nodes (None:
        none is held, the checkpoint it is)."""
        wanted = decision.snapshot
        assert wanted is not None  # the decision has a RestartFromSnapshot
        self.checkpoints.usable()
        oldest = self.job.manifest.step if self.job.manifest is not None else 0
        copy, why = self.c.memory.pick(wanted, plan.nodes, oldest, self.job.committed)
        if copy is None:
            self.c.outcome.event("memory_copy_unusable", step=wanted, reason=why, fallback="checkpoint")
        elif why:
            self.c.outcome.event(
                "memory_copy_unusable", step=wanted, reason=why, fallback=f"the copy of step {copy.step}"
            )
        return copy

    def _publish_from_memory(self, plan, copy: HeldCopy) -> None:
        """Every rank of the new generation gets its layers from the copy's live holders."""
        holders = {layer: nodes for layer, nodes in copy.holders.items()}
        self.c.outcome.event("restart_from_memory", step=copy.step, generation=copy.generation,
                             holders={str(l): sorted(h) for l, h in holders.items()})  # fmt: skip
        self.c.publish(plan, RESTART, copy.step, lambda layout, workers: memory_sources(layout, holders),
                       memory_from=copy.generation)  # fmt: skip
        self.c.outcome.restarts += 1
        if self.job.recovery is not None:
            self.job.recovery.kind = RESTART_KIND

    def rollback(self, to_step: int | None = None) -> int:
        """Committed progress back to `to_step` (an in-memory copy's), else to the last
        checkpoint (the start when there is none)."""
        out = self.c.outcome
        if to_step is None:
            self.checkpoints.usable()
        step = to_step if to_step is not None else self.job.manifest.step if self.job.manifest is not None else 0
        if step < self.job.committed:
            lost = self.job.committed - step
            out.lost_iterations += lost
            del out.step_end_s[step:], out.losses[step:], out.step_ranges[step:]
            source = {} if to_step is None else {"source": "memory"}
            out.event("rollback", to_step=step, iterations_undone=lost, **source)
            self.job.committed = step
        self.checkpoints.after_rollback(step)
        self.c.memory.rolled_back(step)
        self.job.holdings.clear()
        return step

    def save_now(self, step: int) -> bool:
        """Varuna's checkpoint after a failure or before a morph: every layer written by a
        live worker that holds it ready for `step`. False if impossible."""
        self.mark_phase("checkpoint")
        writers: dict[str, list[int]] = {}
        for layer in range(self.c.planner.profile.num_layers):
            holder = next(
                (
                    h.worker_id
                    for h in sorted(self.job.holdings.values(), key=lambda h: h.worker_id)
                    if h.step == step and layer in h.layers and self.c.members.workers[h.worker_id].alive
                ),
                None,
            )
            if holder is None:
                self.c.outcome.event("checkpoint_impossible", step=step, layer=layer)
                return False
            writers.setdefault(str(holder), []).append(layer)
        node_of = {w: self.c.members.workers[int(w)].info.node for w in writers}
        return self.checkpoints.save(step, writers, node_of)

    def restart_processes(self, plan) -> None:
        """Varuna's "stop everything": kill every worker, start fresh ones on every live node."""
        processes = self.c.members.processes
        if processes is None or not self.c.config.respawn:
            return  # without a launcher the workers reload in place
        self.mark_phase("respawn")
        nodes = self.c.members.ready_nodes()
        for wid in self.c.members.live_workers():
            self.c.members.fence(wid, "restart: stop everything")
        deadline = time.time() + 10.0
        while any(processes.pids_of(n) for n in nodes) and time.time() < deadline:
            time.sleep(POLL_S)
        for node in nodes:
            for gpu in range(self.c.config.gpus_per_node):
                processes.spawn(node, gpu)
        self.job.holdings.clear()
        self.c.outcome.event("processes_restarted", nodes=nodes)
        lost = None
        while True:  # a node lost while starting: let the others finish starting first, so
            try:  # the policy re-plans with every node left, not with the first to register
                self.await_nodes([n for n in plan.nodes if n not in self.job.removed])
                break
            except NodesLost as exc:
                lost = exc
        if lost is not None:
            raise lost

    def await_nodes(self, nodes) -> None:
        """Until every node of `nodes` has a complete set of live workers."""
        deadline = time.time() + self.c.config.startup_timeout_s
        while not set(nodes) <= set(self.c.members.ready_nodes()):
            self.c.tick()
            self._failed_starts(nodes)
            lost = [n for n in self.job.removed if n in set(nodes)]
            if lost:
                raise NodesLost(f"nodes {lost} died while the job prepared to use them")
            if time.time() > deadline:
                missing = sorted(set(nodes) - set(self.c.members.ready_nodes()))
                raise JobFailed(f"nodes {missing} did not register within {self.c.config.startup_timeout_s:.0f} s")
            time.sleep(POLL_S * 4)

    def _failed_starts(self, nodes) -> None:
        """Awaited nodes whose processes died before all of them registered (a trace's
        removal during a restart kills a node's fresh workers): removed, like any lost
        node, instead of awaited until the start-up timeout."""
        processes = self.c.members.processes
        if processes is None:
            return
        ready = set(self.c.members.ready_nodes())
        for node in nodes:
            if node in ready or node in self.job.removed:
                continue
            if len(processes.pids_of(node)) < self.c.config.gpus_per_node:
                self.c.outcome.event(
                    "node_start_failed", node=node, reason="a worker process exited before its node was complete"
                )
                for wid in self.c.members.live_workers(node):
                    self.c.members.fence(wid, f"node {node} lost a worker while starting")
                self.job.removed.append(node)

    def wait_for_nodes(self) -> Decision:
        """Too few nodes: wait for arrivals until the policy has a plan."""
        self.c.row(WAITING)
        self.c.outcome.event("waiting_for_nodes", ready=self.c.members.ready_nodes())
        deadline = time.time() + self.c.config.wait_for_nodes_s
        while True:
            self.c.tick()
            if self.job.removed:
                removed, self.job.removed = self.job.removed, []
                decision = self.c.decide(NodesRemoved(tuple(removed)), WAITING)
                if decision.plan is not None:
                    return decision
            if self.job.pending_ready:
                nodes, self.job.pending_ready = tuple(self.job.pending_ready), []
                decision = self.c.decide(NodesReady(nodes), WAITING)
                if decision.plan is not None:
                    return decision
            if time.time() > deadline:
                why = "; ".join(
                    getattr(a, "reason", "") for a in self.job.last_decision().actions if getattr(a, "reason", "")
                )
                raise JobFailed(f"waited {self.c.config.wait_for_nodes_s:.0f} s for nodes ({why or 'too few nodes'})")
            time.sleep(POLL_S * 4)
