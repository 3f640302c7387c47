"""The coordinator: hosts the store, runs the policy, watches the workers (DESIGN 5).

One per job. It resolves the profile, the planner and the policy before anything starts
(a bad request fails before a process is spawned), hosts a TCPStore on port 0 and
publishes the job. Once the first nodes have registered it asks the policy for a plan
and publishes generation 0; from then on it loops over generations:

- watch generation g (`_watch`): groups built, layers restored, go; every committed
  step (its time and global loss); periodic checkpoints completing; nodes joining
  (offered to the policy at iteration boundaries); liveness (exit statuses, heartbeat
  deadlines, reported faults); failures scheduled by time or by a trace;
- on a failure (`recovery_flow.RecoveryFlow`, handed the job's `JobState` and this
  coordinator as its `JobControl`): fence the dead, abort the step in
  flight, collect the survivors' reports, ask the policy, and publish generation g + 1
  (a live reconfiguration with layer copies, or a restart from a checkpoint);
- on a planned stop (a join the policy accepted): the same without a failure.

Fatal worker errors (a worker that cannot even start) still fail the job with the
worker's reason, as does waiting too long for nodes.

The store listens on `bind_host` only (`transport.host_store`), and the job's keys live
under the name derived from the job's secret (`secret.JobSecret`), which the coordinator
draws unless it is handed one; refused registrations are logged as events.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from designs import registry as designs
from designs.options import as_dict
from planner.policies import (
    Admit,
    Decision,
    IterationEnd,
    NodesReady,
    NodesRemoved,
    PauseEnded,
)
from planner.records import RECONFIGURING, RESTARTING, RUNNING, EventRecord, TimelineRow

from ..config import ConfigError, RunConfig
from ..models.emulated import EmulatedLayerTimes
from ..models.family import named
from ..models.text import prepare as prepare_text
from ..protocol import keys
from ..protocol import rendezvous as rv
from ..protocol.commit import STOP, verdict
from ..protocol.directive import RESTART, START, Directive
from ..protocol.failures import injections_to_json, parse_injections
from ..protocol.secret import JobSecret
from ..protocol.transport import HostedStore, advertised_address, host_store
from .job import JobState
from .links import LinkRequests
from .membership import Membership, ProcessControl
from .memory import MemoryBook
from .outcome import JobFailed, RunOutcome, committed_samples, headline
from .planning import make_plan, make_planner, resolve_run_profile
from .policies import DecisionRecord, build_design, plan_dict, resolve_design, view
from .recovery_flow import NodesLost, RecoveryFlow
from .schedule import EventSchedule
from .trace_replay import load_trace_schedule

__all__ = ["Coordinator", "JobFailed", "RunOutcome", "natural_key"]

POLL_S = 0.005
FATAL_GRACE_S = 0.5
FINISHED, STOPPED, FAILED = "finished", "stopped", "failed"


def natural_key(name: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def default_memory_dir() -> str:
    """Where nodes keep in-memory copies unless told: a fresh directory in RAM (/dev/shm)."""
    shm = Path("/dev/shm")
    return tempfile.mkdtemp(prefix="ooblab-memory-", dir=shm if shm.is_dir() else None)


END_WAIT_S = 5.0  # how long the coordinator waits for its workers to read the end order


class Coordinator:
    """Owns the store, the policy and the generations of one job."""

    def __init__(
        self,
        config: RunConfig,
        bind_host: str = "127.0.0.1",
        advertise_host: str | None = None,
        port: int = 0,
        on_event: Callable[[EventRecord], None] | None = None,
        run_dir: str | Path | None = None,
        local: bool = True,
        secret: JobSecret | None = None,
        net_control: str | Path | None = None,
    ):
        design, _ = resolve_design(config)  # a bad name or option fails before anything starts
        if config.text is not None:  # tokenised once, here, before any worker starts
            config = prepare_text(config, run_dir, named(config.model, config.tiny).vocab)
        if (config.checkpoint_every or design.real.saves_on_demand) and config.checkpoint_dir is None:
            base = Path(run_dir) if run_dir is not None else Path("results/real") / f"checkpoints-{int(time.time())}"
            config = config.with_(checkpoint_dir=str((base / "checkpoints").resolve()))
        self.config = config
        self.profile = resolve_run_profile(config)
        self.planner = make_planner(config, self.profile)
        self.planner.template_set()  # fail now if the model cannot be planned at all
        self.design, built = build_design(config, self.planner, self.profile)
        self.design_options = built.options
        self.policy = built.policy
        hook = self.design.real.memory_copies
        copies = hook(built.options) if hook is not None else None
        if copies is not None and config.memory_dir is None:
            config = self.config = config.with_(memory_dir=default_memory_dir())
        reason = self.policy.infeasible_reason()
        if reason:
            raise ConfigError(f"the {config.policy} policy cannot run this job: {reason}")
        self.trace = load_trace_schedule(config.trace, config.time_scale, config.nodes) if config.trace else None
        self.local = local
        self.initial_nodes = list(self.trace.initial) if self.trace else config.node_names()
        names = list(dict.fromkeys(self.initial_nodes + [e.node for e in (self.trace.events if self.trace else ())]))
        self.injections = parse_injections(config.inject, names if local else None, config.gpus_per_node, config.steps)
        self.links = LinkRequests(net_control) if net_control is not None else None
        cut = next((i for i in self.injections if i.network), None)
        if cut is not None and self.links is None:
            raise ConfigError(
                f"--inject entry {cut.index + 1} ({cut.describe()}): a link fault needs hosts whose links the "
                "launcher owns (ooblab netns); this job's nodes share the machine's network"
            )
        if config.pipelines is not None:
            if self.design.real.forced_start is None:
                takers = [d.name for d in designs.all_designs() if d.real.forced_start is not None]
                raise ConfigError(
                    f"--pipelines forces Oobleck's grouping; the {config.policy} design chooses its own configuration "
                    f"(designs that take one: {', '.join(takers)})"
                )
            if sum(config.pipelines) != len(self.initial_nodes):
                raise ConfigError(
                    f"pipelines {list(config.pipelines)} use {sum(config.pipelines)} nodes, the job starts with {len(self.initial_nodes)}"
                )
        self.secret = secret or JobSecret.generate()
        self.hosted: HostedStore | None = host_store(bind_host, port, self.secret, config.startup_timeout_s)
        self.store = self.hosted.store
        self.address = advertised_address(bind_host, advertise_host, self.hosted.port)
        self.outcome = RunOutcome(config, time.time(), listener=on_event, design_options=as_dict(built.options))
        job: dict[str, Any] = {
            "config": config.to_dict(),
            "injections": injections_to_json(self.injections),
            # what workers need of the design (they never load it: it may come from a file)
            "design": {"name": self.design.name, "saves_on_demand": self.design.real.saves_on_demand},
        }
        if config.compute == "emulated":
            steps = self.profile.optimizer.step_s if self.profile.optimizer else (0.0,) * self.profile.num_layers
            job["emulation"] = [
                EmulatedLayerTimes(l.forward_s, l.backward_s, l.output_bytes, optimizer_step_s=step).to_list()
                for l, step in zip(self.profile.layers, steps, strict=True)
            ]
        rv.put_signed(self.store, keys.JOB, job, self.secret)
        self.outcome.event("coordinator_started", address=self.address, profile=self.profile.source)
        # the job as it runs: one state object, shared with the recovery flow
        self.job = JobState()
        self.memory = MemoryBook(copies, self.store, config.memory_dir, local)
        self._members: Membership | None = None  # both set when `run` starts
        self._schedule: EventSchedule | None = None
        self.flow = RecoveryFlow(self.job, self)

    @property
    def members(self) -> Membership:
        """The workers as registered, fenced and heard from (from `run` on)."""
        if self._members is None:
            raise RuntimeError("internal error: the coordinator's membership is used before run() set it")
        return self._members

    @members.setter
    def members(self, members: Membership) -> None:
        self._members = members

    @property
    def schedule(self) -> EventSchedule:
        """The trace's and the injections' timed events (from `run` on)."""
        if self._schedule is None:
            raise RuntimeError("internal error: the coordinator's event schedule is used before run() set it")
        return self._schedule

    @schedule.setter
    def schedule(self, schedule: EventSchedule) -> None:
        self._schedule = schedule

    @property
    def needs_local_processes(self) -> bool:
        """Traces and time-based injections kill and start processes: local runs only
        (link faults are handed to the owner of the links instead)."""
        return self.trace is not None or any(not i.by_worker and not i.network for i in self.injections)

    # -- the whole job ------------------------------------------------------------------
    def run(self, processes: ProcessControl | None = None) -> RunOutcome:
        """Wait for the first nodes, plan, then run generation after generation."""
        out = self.outcome
        self.members = Membership(
            self.store,
            self.config.gpus_per_node,
            self.config.heartbeat_timeout_s,
            processes,
            self.secret,
            all_silent_patience_s=self.config.timeout_s,
        )
        self.schedule = EventSchedule(
            self.trace, self.injections, self.members, self.outcome, self.config.gpus_per_node, processes, self.links
        )
        try:
            if self.needs_local_processes and processes is None:
                raise JobFailed("--trace and time-based --inject entries need the local launcher (ooblab run)")
            self._await_initial()
            self._start()
            while True:
                end = self._watch()
                if end == FINISHED:
                    break
                if end == STOPPED:
                    self.flow.after_stop()
                elif self.flow.after_failure():
                    break
            self.flow.checkpoints.drain()
            self.flow.note_fired()  # one that fired after its failure was handled (a slow teardown's stall)
            out.status = "finished"
            out.event("finished", iterations=self.job.committed, generations=self.job.gen + 1)
            out.injections_not_fired = self.schedule.left_injections()
            if out.injections_not_fired:
                out.event("injections_not_fired", entries=out.injections_not_fired)
        except JobFailed as exc:
            self.flow.note_fired()
            out.status, out.reason = "failed", str(exc)
            out.event("failed", reason=str(exc))
            self.store.set(keys.ABORT, str(exc))
        except (KeyboardInterrupt, SystemExit) as exc:  # Ctrl-C, or SIGTERM made SystemExit
            self.interrupted(exc)
            raise
        finally:
            rv.publish_order(self.store, {"kind": "end"}, self.secret)
            self.memory.clear()
        out.end_s = out.now_s()
        return out

    def interrupted(self, exc: BaseException) -> None:
        """Mark the run as stopped from outside (Ctrl-C, SIGTERM) so that its summary says
        so, and tell the workers to stop. Once: the launchers call it again on the way out
        (the interruption may have come before `run`), which then changes nothing."""
        out = self.outcome
        if out.status != "running":
            return  # it had ended, or was marked already: keep what it said
        why = f"a signal (exit {exc.code})" if isinstance(exc, SystemExit) else "Ctrl-C"
        out.status, out.reason = "interrupted", f"interrupted by {why}"
        out.event("interrupted", reason=out.reason)
        out.end_s = out.now_s()
        try:
            self.store.set(keys.ABORT, out.reason)
        except Exception:  # noqa: BLE001 - the store may be gone already: the workers then see it close
            pass

    # -- bookkeeping shared by every phase --------------------------------------------------
    def tick(self) -> None:
        """One round of watching: fatal errors, registrations, deaths, scheduled events,
        checkpoints. Deaths are fenced and their nodes queued in `removed`."""
        members = self.members
        if self.store.add(keys.ERROR_COUNT, 0):
            time.sleep(FATAL_GRACE_S)
            errors = rv.reported_errors(self.store)
            for text in errors:
                self.outcome.event("worker_error", traceback=text)
            raise JobFailed("; ".join(headline(text) for text in errors))
        for node in members.poll_registrations():
            if self.job.gen >= 0:
                self.outcome.event("node_ready", node=node)
            self.job.pending_ready.append(node)
        refused, members.refused = members.refused, []
        for reason in refused:
            self.outcome.event("registration_refused", reason=reason)
        dead = members.poll_exits()
        now = time.time()
        if now - self.job.last_beat_check_s >= self.config.heartbeat_interval_s:
            self.job.last_beat_check_s = now
            waiting = members.all_silent_since_s
            dead.update(members.poll_heartbeats(now))
            if waiting is None and members.all_silent_since_s is not None:
                self.outcome.event("all_workers_silent", patience_s=members.all_silent_patience_s)
        for wid, reason in dead.items():
            self.bury(wid, reason)
        self.schedule.due(now)
        self.flow.checkpoints.tick()

    def bury(self, wid: int, reason: str) -> None:
        """A worker is dead: fence it and the rest of its node; the node is removed."""
        members = self.members
        node = members.workers[wid].info.node
        members.fence(wid, reason)
        self.outcome.event("worker_lost", worker=wid, node=node, reason=reason)
        for other in members.live_workers(node):
            members.fence(other, f"node {node} lost worker {wid}")
        if node not in self.job.removed:
            self.job.removed.append(node)
        if node in self.job.pending_ready:
            self.job.pending_ready.remove(node)

    def decide(self, event, job_state: str) -> Decision:
        if isinstance(event, NodesRemoved):
            self.memory.lose(event.nodes)  # what their memory held is gone with them
        ready = self.members.ready_nodes()[: self.config.nodes]
        ckpt = self.job.manifest.step if self.job.manifest else 0
        decision = self.policy.decide(
            view(ready, job_state, self.job.committed, ckpt, self.outcome.now_s()), event, self.job.decision
        )
        self.job.decision = decision
        if decision.disruptive or not isinstance(event, PauseEnded):
            self.outcome.event("decision", **DecisionRecord.of(event, decision).to_dict())
        return decision

    def row(self, state: str, time_s: float | None = None) -> None:
        plan = self.outcome.plan
        working = len(plan.nodes) if plan is not None and state != "waiting" else 0
        last = self.outcome.step_end_s
        rate = 0.0
        if state == RUNNING and len(last) >= 2:
            layout = self.outcome.layout
            samples = layout.step_samples if layout is not None else self.config.global_batch
            rate = samples / max(1e-9, last[-1] - last[-2])
        t = self.outcome.now_s() if time_s is None else time_s
        rows = self.outcome.rows
        if rows and rows[-1].time_s > t:
            t = rows[-1].time_s
        rows.append(
            TimelineRow(
                t,
                len(self._members.ready_nodes()) if self._members else 0,
                working,
                state,
                self.job.committed,
                committed_samples(self.outcome),
                rate,
                0.0,
            )
        )

    # -- start ------------------------------------------------------------------------------
    def _await_initial(self) -> None:
        """Until the first nodes have registered: the local launcher's (or the trace's)
        names, or on a multi-machine job any `nodes` complete nodes."""
        out, wanted = self.outcome, set(self.initial_nodes)
        deadline = time.time() + self.config.startup_timeout_s
        self.row("waiting", 0.0)
        while not wanted <= set(self.members.ready_nodes()):
            if not self.local and len(self.members.ready_nodes()) >= self.config.nodes:
                wanted = set(sorted(self.members.ready_nodes(), key=natural_key)[: self.config.nodes])
                self.initial_nodes = sorted(wanted, key=natural_key)
                break
            self.tick()
            lost = [n for n in self.job.removed if n in wanted]
            if lost:
                reasons = [
                    rec.reason for rec in self.members.workers.values() if not rec.alive and rec.info.node in lost
                ]
                raise JobFailed("; ".join(reasons) or f"nodes {lost} were lost before the job started")
            if time.time() > deadline:
                got = len(self.members.workers)
                raise JobFailed(
                    f"only {got} of {len(wanted) * self.config.gpus_per_node} workers registered within {self.config.startup_timeout_s:.0f} s"
                )
            time.sleep(POLL_S * 5)
        self.job.pending_ready = [n for n in self.job.pending_ready if n not in wanted]
        out.workers = [rec.info for rec in self.members.workers.values()]
        out.event(
            "workers_registered", nodes=sorted(wanted, key=natural_key), workers=len(wanted) * self.config.gpus_per_node
        )

    def _start(self) -> None:
        nodes = list(self.initial_nodes) if self.trace is not None else sorted(self.initial_nodes, key=natural_key)
        if self.config.pipelines is not None:
            try:
                plan = make_plan(self.planner, self.config, nodes)
            except ValueError as exc:
                raise JobFailed(f"cannot plan: {exc}") from None
            assert self.design.real.forced_start is not None  # checked in __init__
            self.job.decision = self.design.real.forced_start(plan)
        else:
            self.job.decision = self.policy.decide(
                view(nodes, "waiting", 0, 0, self.outcome.now_s()), NodesReady(tuple(nodes)), None
            )
            if self.job.decision.plan is None:
                notes = [getattr(a, "reason", "") for a in self.job.decision.actions] + list(self.job.decision.notes)
                raise JobFailed(f"cannot plan: {'; '.join(n for n in notes if n) or 'no plan'}")
        try:
            self.flow.execute(self.job.decision, 0)
        except NodesLost as exc:  # a first node died before generation 0 could be published
            self.outcome.event("nodes_lost_while_reconfiguring", reason=str(exc))
            self.flow.decide_and_execute(0)

    # -- one generation -------------------------------------------------------------------------
    def publish(self, plan, kind: str, resume_step: int, sources_for, manifest=None, memory_from=None) -> None:
        """Publish generation g + 1 running `plan` from `resume_step`; `sources_for(layout,
        workers)` says where each rank's layers come from (`memory_from`: the generation
        whose in-memory copy `memory` sources read)."""
        from .policies import plan_layout

        number = self.job.gen + 1
        layout = plan_layout(plan, number, self.config, self.planner)
        workers = []
        for stage in layout.stages:
            wid = self.members.worker_for(stage.node, stage.gpu)
            if wid is None:
                raise RuntimeError(f"the plan runs {stage.node} gpu {stage.gpu}, which has no live worker")
            workers.append(wid)
        directive = Directive(number, kind, layout, tuple(workers), resume_step, sources_for(layout, workers), manifest,
                              self.memory.order(layout, plan.nodes), memory_from)  # fmt: skip
        rv.put_signed(self.store, keys.directive_key(number), directive.to_dict(), self.secret)
        rv.publish_order(self.store, {"kind": "generation", "generation": number}, self.secret)
        self.job.gen, self.job.directive = number, directive
        out = self.outcome
        out.plan, out.layout, out.generations = plan, layout, number + 1
        if out.initial_plan is None:
            out.initial_plan = plan
        detail = dict(
            generation=number,
            how=kind,
            resume_step=resume_step,
            world_size=layout.world_size,
            plan=plan_dict(plan, self.config.gpus_per_node),
        )
        if number == 0:
            out.planned_s = out.now_s()
            out.event("plan_published", **detail)
        else:
            out.event("generation_published", **detail)
            self.row(RESTARTING if kind in (START, RESTART) else RECONFIGURING)

    def _watch(self) -> str:
        """Follow the current generation until it finishes, stops at a boundary or fails."""
        g, d, store, out = self.job.gen, self.job.current(), self.store, self.outcome
        world = range(d.layout.world_size)
        mine = set(d.workers)
        nodes = {s.node for s in d.layout.stages}
        built = ready = False
        going = False
        while True:
            self.tick()
            if self.job.removed:
                if set(self.job.removed) & nodes or any(not self.members.workers[w].alive for w in mine):
                    self.job.failure_detected_s = time.time()
                    return FAILED
                spares, self.job.removed = self.job.removed, []
                decision = self.decide(NodesRemoved(tuple(spares)), RUNNING)
                if decision.disruptive:
                    self.job.pending_decision = decision
                    store.set(keys.stop_request_key(g), "1")
            if store.add(keys.fault_count_key(g), 0):
                self.job.failure_detected_s = time.time()
                return FAILED
            if not built and store.check([keys.built_key(g, r) for r in world]):
                built = True
                self.flow.mark_phase("copy", max(rv.get_json(store, keys.built_key(g, r))["t"] for r in world))
            if built and not ready and store.check([keys.ready_key(g, r) for r in world]):
                ready = True
                reports = [rv.get_json(store, keys.ready_key(g, r)) for r in world]
                t_ready = max(r["t"] for r in reports)
                self.flow.mark_phase("redo", t_ready)
                for pipe in d.layout.pipelines:
                    out.schedules[pipe.index] = reports[pipe.ranks[0]]["schedule"]
                if not self.on_generation_ready(t_ready):
                    return STOPPED
                going = True
            if going:
                while self.job.committed < self.config.steps:
                    result = verdict(store, g, self.job.committed)
                    if result is None:
                        break
                    self.record_commit(g, self.job.committed, d)
                    if result == STOP and self.job.committed < self.config.steps:
                        return STOPPED
                    self.at_boundary()
                if self.job.committed >= self.config.steps and store.check([keys.done_key(g, r) for r in world]):
                    return FINISHED
            time.sleep(POLL_S)

    def on_generation_ready(self, t_ready_wall: float) -> bool:
        """Every rank holds its layers: tell the policy the pause is over; go or stop."""
        out, g = self.outcome, self.job.gen
        kind = RECONFIGURING if self.job.current().kind not in (START, RESTART) else RESTARTING
        newly, self.job.pending_ready = tuple(self.job.pending_ready), []
        decision = self.decide(PauseEnded(kind, newly), kind)
        if g == 0 or out.ready_s is None:
            out.ready_s = t_ready_wall - out.t0_wall
            out.note_cpu(out.ready_s)
            out.event("training_started", schedules=dict(out.schedules))
            self.schedule.start(t_ready_wall)
        else:
            out.event("generation_ready", generation=g, schedules=dict(out.schedules))
            stop = out.planned_stops[-1] if out.planned_stops else None
            if stop is not None and stop["t_ready_s"] is None and self.job.recovery is None:
                stop["t_ready_s"] = t_ready_wall - out.t0_wall
        if decision.disruptive:
            self.job.pending_decision = decision
            self.store.set(keys.go_key(g), "stop")
            return False
        self.store.set(keys.go_key(g), "run")
        self.row(RUNNING, t_ready_wall - out.t0_wall)
        return True

    def record_commit(self, g: int, step: int, d: Directive) -> None:
        """Step `step` of generation g is committed: its end time and global loss."""
        out, store = self.outcome, self.store
        reports = [rv.get_json(store, keys.step_key(g, step, r)) for r in range(d.layout.world_size)]
        t_end = max(r["t"] for r in reports) - out.t0_wall
        total = sum(r["loss_sum"] for r in reports if r["loss_sum"] is not None)
        del out.step_end_s[step:], out.losses[step:], out.step_ranges[step:]
        out.step_end_s.append(t_end)
        out.note_cpu(t_end)
        out.losses.append(total / d.layout.num_microbatches)
        out.step_ranges.append(d.layout.partial_ranges())
        self.job.committed = step + 1
        self.row(RUNNING, t_end)
        self.flow.on_commit(step, t_end)

    def at_boundary(self) -> None:
        """An iteration just ended: scheduled joins, new nodes offered to the policy, and the
        iteration end itself when the last decision asked to see it. A decision that admits
        nodes (`Admit`, not disruptive) is carried out like a disruptive one: the
        generation stops at the next commit (no work lost) and the next runs its plan."""
        self.schedule.at_step(self.job.committed)
        if self.job.pending_decision is not None:
            return
        before = self.job.decision
        decision = None
        nodes = tuple(n for n in self.job.pending_ready if n in self.members.ready_nodes())
        self.job.pending_ready = []
        if nodes:
            decision = self.decide(NodesReady(nodes), RUNNING)
        elif before is not None and before.check_at_iteration_end:
            decision = self.decide(IterationEnd(self.job.committed), RUNNING)
        admits = decision is not None and any(isinstance(a, Admit) for a in decision.actions)
        if decision is not None and (decision.disruptive or admits):
            self.job.pending_decision = decision
            self.store.set(keys.stop_request_key(self.job.gen), "1")

    def close(self) -> None:
        """Drop the store and its socket (workers still connected see it vanish and exit),
        once the live workers have read the end order (at most `END_WAIT_S`)."""
        if self.hosted is not None:
            members = self._members  # None where `run` never started (a spawn failed before it)
            live = len(members.live_workers()) if members is not None else 0
            deadline = time.monotonic() + END_WAIT_S
            try:
                while self.store.add(keys.ENDED, 0) < live and time.monotonic() < deadline:
                    time.sleep(0.02)
            except Exception:  # noqa: BLE001 - closing anyway
                pass
            del self.store  # gone with the socket: using it after close is an AttributeError
            self.hosted.close()
            self.hosted = None
