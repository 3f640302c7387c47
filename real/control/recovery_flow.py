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
   every process), or waiting for nodes.

A planned stop (a join the policy accepted) goes through steps 3 and 4 without a
failure. Failures during any of this are handled the same way: the recovery in progress
goes on (and counts the extra failure), from what the survivors then hold.
"""

from __future__ import annotations

import time

from planner.policies import (
    Checkpoint,
    CopyLayers,
    Decision,
    NodesReady,
    NodesRemoved,
    Reinstantiate,
    Restart,
    RestartFromCheckpoint,
    Start,
)
from planner.records import RUNNING, WAITING

from ..protocol import keys
from ..protocol import rendezvous as rv
from ..protocol.commit import resolve
from ..protocol.directive import RECONFIGURE, RESTART, START, Directive
from ..protocol.manifest import Manifest
from ..protocol.sources import CHECKPOINT, INIT, uniform_sources
from ..state.checkpoint import write_manifest
from ..state.transfers import Holding, LostLayers, plan_sources
from .outcome import JobFailed
from .recovery import RESTART as RESTART_KIND
from .recovery import Recovery

SETTLE_S = 0.1  # after the first sign of a failure, wait this long for others that came with it
POLL_S = 0.005


class NodesLost(RuntimeError):
    """Nodes a decision relies on died before its generation could be published."""


class RecoveryFlow:
    """Mixed into `Coordinator` (it provides store, members, outcome, policy, ...)."""

    manifest: Manifest | None = None
    recovery: Recovery | None = None
    failure_detected_s: float = 0.0

    # -- small helpers -------------------------------------------------------------------
    @property
    def holdings(self) -> dict[int, Holding]:
        if not hasattr(self, "_holdings"):
            self._holdings: dict[int, Holding] = {}
        return self._holdings

    @property
    def ckpt_pending(self) -> list[int]:
        if not hasattr(self, "_ckpt_pending"):
            self._ckpt_pending: list[int] = []
        return self._ckpt_pending

    def mark_phase(self, phase: str, t_wall: float | None = None) -> None:
        if self.recovery is not None:
            self.recovery.enter(phase, (time.time() if t_wall is None else t_wall) - self.outcome.t0_wall)

    def on_commit(self, step: int, t_end_s: float) -> None:
        rec = self.recovery
        if rec is not None and rec.until_step is not None and step >= rec.until_step:
            rec.finish(t_end_s)
            self.outcome.recoveries.append(rec)
            self.outcome.event("recovered", **{k: v for k, v in rec.to_dict().items() if k != "kind"}, how=rec.kind)
            self.recovery = None
        every, ready = self.config.checkpoint_every, step + 1
        if every and ready % every == 0 and ready < self.config.steps and self.config.checkpoint_dir:
            if ready not in self.ckpt_pending:
                self.ckpt_pending.append(ready)

    def checkpoints_tick(self) -> None:
        layers = range(self.planner.profile.num_layers)
        for step in sorted(self.ckpt_pending, reverse=True):
            if step <= self.committed and self.store.check([keys.layer_key(step, l) for l in layers]):
                self._write_manifest(step)
                break

    def _write_manifest(self, step: int) -> bool:
        try:
            manifest = write_manifest(self.config.checkpoint_dir, step, self.planner.profile.num_layers)
        except OSError as exc:  # e.g. workers on other machines wrote to their own disks
            self.outcome.event("checkpoint_unusable", step=step, reason=str(exc))
            self._ckpt_pending = [k for k in self.ckpt_pending if k > step]
            return False
        self.manifest = manifest
        self._ckpt_pending = [k for k in self.ckpt_pending if k > step]
        self.outcome.checkpoints += 1
        self.outcome.event("checkpoint", step=step, directory=self.config.checkpoint_dir)
        return True

    def _failure_time(self, t_detect: float) -> float:
        """The earliest failure behind this detection: an injected victim's own stamp, a
        coordinator-driven kill, else the detection itself."""
        times = self.schedule.take_failure_times()
        fired = set(self.outcome.injections_fired)
        for item in self.injections:
            if item.by_worker and item.index not in fired and self.store.check([keys.fired_key(item.index)]):
                self.outcome.injections_fired.append(item.index)
                times.append(float(self.store.get(keys.fired_key(item.index)).decode()))
        return min(times) if times else t_detect

    # -- a failure ---------------------------------------------------------------------
    def after_failure(self) -> bool:
        """Handle a failure in the current generation; True when the job is complete."""
        out, store, g, d = self.outcome, self.store, self.gen, self.directive
        t_detect = self.failure_detected_s
        time.sleep(SETTLE_S)
        self.tick()
        if self.recovery is None:
            self.recovery = Recovery(len(out.recoveries), self._failure_time(t_detect) - out.t0_wall)
        else:
            self.recovery.failures += 1
            self._failure_time(t_detect)
        self.mark_phase("rebuild", max(t_detect, out.t0_wall + self.recovery.t_fail_s))
        store.compare_set(keys.go_key(g), "", "abort")
        resume = resolve(store, g, self.committed, self.config.steps)
        while self.committed < resume:
            self.record_commit(g, self.committed, d)
        store.set(keys.resume_key(g), str(resume))
        reports, unclean = self.collect(g, d)
        if not self.removed and not unclean:
            faults = [store.get(keys.fault_key(g, r)).decode() for r in range(d.layout.world_size) if store.check([keys.fault_key(g, r)])]
            for text in faults:
                out.event("worker_error", traceback=text)
            from .coordinator import _headline

            raise JobFailed("; ".join(_headline(t) for t in faults[:3]) or f"generation {g} failed without a lost worker")
        self._update_holdings(d, reports)
        if resume >= self.config.steps:
            out.event("failure_after_last_step", generation=g)
            self.recovery = None
            return True
        rec = self.recovery
        if rec.until_step is None:
            rec.until_step = resume
        rec.nodes.extend(n for n in self.removed if n not in rec.nodes)
        self._replace(d, unclean)
        self.decide_and_execute(resume)
        return False

    def collect(self, g: int, d: Directive) -> tuple[dict[int, dict], set[int]]:
        """Reports of the generation's live ranks; ranks silent past the teardown timeout
        are fenced and returned as unclean."""
        members, store = self.members, self.store
        expect = {r for r, w in enumerate(d.workers) if members.workers[w].alive}
        reports: dict[int, dict] = {}
        deadline = time.time() + self.config.teardown_timeout_s
        while True:
            for r in sorted(expect - reports.keys()):
                if store.check([keys.left_key(g, r)]):
                    reports[r] = rv.get_json(store, keys.left_key(g, r))
            if expect <= reports.keys() or time.time() > deadline:
                break
            self.tick()
            expect = {r for r in expect if members.workers[d.workers[r]].alive}
            time.sleep(POLL_S)
        from .coordinator import _headline

        for r in sorted(reports):
            if store.check([keys.fault_key(g, r)]):
                self.outcome.event("fault", generation=g, rank=r, error=_headline(store.get(keys.fault_key(g, r)).decode()),
                                   after_s=round(reports[r]["t_fault"] - self.failure_detected_s, 3) if reports[r].get("t_fault") else None,
                                   left_after_s=round(reports[r]["t"] - self.failure_detected_s, 3), timing=reports[r].get("timing"))
        unclean = expect - reports.keys()
        for r in sorted(unclean):
            wid = d.workers[r]
            members.fence(wid, f"rank {r} did not tear down within {self.config.teardown_timeout_s:.0f} s")
            self.outcome.event("worker_unclean", worker=wid, rank=r, generation=g)
        self.mark_phase("planning")
        return reports, unclean

    def _update_holdings(self, d: Directive, reports: dict[int, dict]) -> None:
        for r, rep in reports.items():
            wid = int(rep["worker"])
            self.holdings[wid] = Holding(wid, d.layout.stages[r].node, int(rep["step"]), tuple(rep["layers"]))
        for wid in list(self.holdings):
            if not self.members.workers[wid].alive:
                del self.holdings[wid]

    def _replace(self, d: Directive, unclean: set[int]) -> None:
        """Fresh processes for workers that could not tear down (their node stays: the
        policy is asked once they have registered, and their layers come from replicas)."""
        replaced = []
        for r in sorted(unclean):
            stage, wid = d.layout.stages[r], d.workers[r]
            processes = self.members.processes
            if processes is not None and self.config.respawn:
                self.mark_phase("respawn")
                processes.spawn(stage.node, stage.gpu)
                replaced.append(stage.node)
                self.outcome.event("worker_replaced", node=stage.node, gpu=stage.gpu, worker=wid)
            else:
                for other in self.members.live_workers(stage.node):
                    self.members.fence(other, f"node {stage.node} lost an unclean worker")
                if stage.node not in self.removed:
                    self.removed.append(stage.node)
        if replaced:
            try:
                self.await_nodes(replaced)
            except NodesLost:
                pass  # the policy hears of them with the other removals
            self.pending_ready = [n for n in self.pending_ready if n not in replaced]
            self.mark_phase("planning")

    def decide_and_execute(self, resume: int) -> None:
        while True:
            removed, self.removed = self.removed, []
            self.mark_phase("planning")
            working = set(self.outcome.plan.nodes) if self.outcome.plan is not None else set()
            if removed:
                decision = self.decide(NodesRemoved(tuple(removed)), RUNNING)
                if any(isinstance(a, Reinstantiate) for a in decision.actions):
                    self.outcome.failures_survived += len(working & set(removed))
            else:
                decision = self.decision
            try:
                self.execute(decision, resume, same_plan=not removed)
                return
            except NodesLost as exc:
                self.outcome.event("nodes_lost_while_reconfiguring", reason=str(exc))
                if self.recovery is not None:  # the loss belongs to the recovery under way
                    self.recovery.failures += 1
                    self.recovery.nodes.extend(n for n in self.removed if n not in self.recovery.nodes)
                    self._failure_time(time.time())  # consume its kill time, or the next recovery would start there

    # -- a planned stop --------------------------------------------------------------------
    def after_stop(self) -> None:
        g, d = self.gen, self.directive
        resume = self.committed
        reports, unclean = self.collect(g, d)
        self._update_holdings(d, reports)
        decision, self.pending_decision = self.pending_decision, None
        if unclean or self.removed or decision is None:
            self.failure_detected_s = time.time()
            if self.recovery is None:
                self.recovery = Recovery(len(self.outcome.recoveries), self._failure_time(self.failure_detected_s) - self.outcome.t0_wall)
                self.recovery.until_step = resume
            self.mark_phase("planning")
            self._replace(d, unclean)
            self.decide_and_execute(resume)
            return
        self.outcome.event("planned_stop", generation=g, step=resume)
        try:
            self.execute(decision, resume)
        except NodesLost as exc:  # a node the new plan needs died meanwhile: a failure after all
            self.outcome.event("nodes_lost_while_reconfiguring", reason=str(exc))
            self.failure_detected_s = time.time()
            self.recovery = Recovery(len(self.outcome.recoveries), self._failure_time(self.failure_detected_s) - self.outcome.t0_wall)
            self.recovery.until_step = resume
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
        if self.gen < 0:
            self.publish(plan, START, 0, lambda layout, workers: uniform_sources(layout, INIT))
        elif kinds & {Restart, RestartFromCheckpoint, Start} and not same_plan:
            saved = Checkpoint in kinds and self.save_now(resume)
            if not (Restart in kinds and saved):
                resume = self.rollback()
            if self.config.policy == "varuna":
                self.restart_processes(plan)
            self._publish_restart(plan, resume)
        elif Reinstantiate in kinds or same_plan:
            copies = [(c.dst_node, c.src_node, c.layers) for a in decision.actions if isinstance(a, CopyLayers) for c in a.copies]
            try:
                self.publish(plan, RECONFIGURE, resume, lambda layout, workers: plan_sources(layout, workers, self.holdings, resume, copies))
                self.outcome.reconfigurations += 1
            except LostLayers as exc:
                self.outcome.event("live_recovery_impossible", reason=str(exc))
                self._publish_restart(plan, self.rollback())
        else:
            raise JobFailed(f"cannot carry out {[type(a).__name__ for a in decision.actions]}")
        self.pending_ready = [n for n in self.pending_ready if n not in set(plan.nodes)]
        self.mark_phase("rebuild")

    def _publish_restart(self, plan, resume: int) -> None:
        if resume == 0 and (self.manifest is None or self.manifest.step != 0):
            self.publish(plan, RESTART, 0, lambda layout, workers: uniform_sources(layout, INIT))
        else:
            self.publish(plan, RESTART, resume, lambda layout, workers: uniform_sources(layout, CHECKPOINT), self.manifest)
        self.outcome.restarts += 1
        if self.recovery is not None:
            self.recovery.kind = RESTART_KIND

    def rollback(self) -> int:
        """Committed progress back to the last checkpoint (the start when there is none)."""
        out = self.outcome
        step = self.manifest.step if self.manifest is not None else 0
        if step < self.committed:
            lost = self.committed - step
            out.lost_iterations += lost
            del out.step_end_s[step:], out.losses[step:]
            out.event("rollback", to_step=step, iterations_undone=lost)
            self.committed = step
        self._ckpt_pending = [k for k in self.ckpt_pending if k <= step]
        self.holdings.clear()
        return step

    def save_now(self, step: int) -> bool:
        """Varuna's checkpoint after a failure or before a morph: every layer written by a
        live worker that holds it ready for `step`. False if impossible."""
        self.mark_phase("checkpoint")
        writers: dict[str, list[int]] = {}
        for layer in range(self.planner.profile.num_layers):
            holder = next((h.worker_id for h in sorted(self.holdings.values(), key=lambda h: h.worker_id)
                           if h.step == step and layer in h.layers and self.members.workers[h.worker_id].alive), None)
            if holder is None:
                self.outcome.event("checkpoint_impossible", step=step, layer=layer)
                return False
            writers.setdefault(str(holder), []).append(layer)
        rv.publish_order(self.store, {"kind": "save", "step": step, "writers": writers})
        written = [keys.layer_key(step, l) for l in range(self.planner.profile.num_layers)]
        deadline = time.time() + self.config.teardown_timeout_s
        while not self.store.check(written):
            self.tick()
            if self.removed or time.time() > deadline:
                self.outcome.event("checkpoint_failed", step=step)
                return False
            time.sleep(POLL_S)
        return self._write_manifest(step)

    def restart_processes(self, plan) -> None:
        """Varuna's "stop everything": kill every worker, start fresh ones on every live node."""
        processes = self.members.processes
        if processes is None or not self.config.respawn:
            return  # without a launcher the workers reload in place
        self.mark_phase("respawn")
        nodes = self.members.ready_nodes()
        for wid in self.members.live_workers():
            self.members.fence(wid, "restart: stop everything")
        deadline = time.time() + 10.0
        while any(processes.pids_of(n) for n in nodes) and time.time() < deadline:
            time.sleep(POLL_S)
        for node in nodes:
            for gpu in range(self.config.gpus_per_node):
                processes.spawn(node, gpu)
        self.holdings.clear()
        self.outcome.event("processes_restarted", nodes=nodes)
        lost = None
        while True:  # a node lost while starting: let the others finish starting first, so
            try:    # the policy re-plans with every node left, not with the first to register
                self.await_nodes([n for n in plan.nodes if n not in self.removed])
                break
            except NodesLost as exc:
                lost = exc
        if lost is not None:
            raise lost

    def await_nodes(self, nodes) -> None:
        """Until every node of `nodes` has a complete set of live workers."""
        deadline = time.time() + self.config.startup_timeout_s
        while not set(nodes) <= set(self.members.ready_nodes()):
            self.tick()
            self._failed_starts(nodes)
            lost = [n for n in self.removed if n in set(nodes)]
            if lost:
                raise NodesLost(f"nodes {lost} died while the job prepared to use them")
            if time.time() > deadline:
                missing = sorted(set(nodes) - set(self.members.ready_nodes()))
                raise JobFailed(f"nodes {missing} did not register within {self.config.startup_timeout_s:.0f} s")
            time.sleep(POLL_S * 4)

    def _failed_starts(self, nodes) -> None:
        """Awaited nodes whose processes died before all of them registered (a trace's
        removal during a restart kills a node's fresh workers): removed, like any lost
        node, instead of awaited until the start-up timeout."""
        processes = self.members.processes
        if processes is None:
            return
        ready = set(self.members.ready_nodes())
        for node in nodes:
            if node in ready or node in self.removed:
                continue
            if len(processes.pids_of(node)) < self.config.gpus_per_node:
                self.outcome.event("node_start_failed", node=node, reason="a worker process exited before its node was complete")
                for wid in self.members.live_workers(node):
                    self.members.fence(wid, f"node {node} lost a worker while starting")
                self.removed.append(node)

    def wait_for_nodes(self) -> Decision:
        """Too few nodes: wait for arrivals until the policy has a plan."""
        self.row(WAITING)
        self.outcome.event("waiting_for_nodes", ready=self.members.ready_nodes())
        deadline = time.time() + self.config.wait_for_nodes_s
        while True:
            self.tick()
            if self.removed:
                removed, self.removed = self.removed, []
                decision = self.decide(NodesRemoved(tuple(removed)), WAITING)
                if decision.plan is not None:
                    return decision
            if self.pending_ready:
                nodes, self.pending_ready = tuple(self.pending_ready), []
                decision = self.decide(NodesReady(nodes), WAITING)
                if decision.plan is not None:
                    return decision
            if time.time() > deadline:
                why = "; ".join(getattr(a, "reason", "") for a in self.decision.actions if getattr(a, "reason", ""))
                raise JobFailed(f"waited {self.config.wait_for_nodes_s:.0f} s for nodes ({why or 'too few nodes'})")
            time.sleep(POLL_S * 4)
