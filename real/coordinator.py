"""The coordinator: hosts the store, owns the plan, watches the workers (DESIGN 5).

One per job. It resolves the profile and the planner before anything starts (so a bad
request fails before a process is spawned), hosts a TCPStore on port 0 and publishes the
job. Once every expected worker (nodes x GPUs per node) has registered it plans over the
registered node names, publishes generation 0's layout and watches: step reports (the
iteration timeline and the global loss), heartbeats, reported errors and, when the
launcher owns the processes, their exit codes. Any failure aborts the job (`abort` key:
workers exit); part 2 replaces the abort with reconfiguration onto generation g + 1.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from planner.plan import ExecutionPlan
from planner.records import EventRecord

from . import rendezvous as rv
from .config import RunConfig
from .emulated import EmulatedLayerTimes
from .layout import Layout, layout_from_plan
from .planning import make_plan, make_planner, resolve_run_profile

POLL_S = 0.01
FAILURE_GRACE_S = 0.5

# Exit codes of locally owned worker processes, by label; None while running.
Liveness = Callable[[], Mapping[str, int | None]]


class JobFailed(RuntimeError):
    """The job cannot go on (a worker failed, vanished or never came)."""


@dataclass
class RunOutcome:
    """What happened, in seconds since the coordinator started (`t0_wall` is its epoch)."""

    config: RunConfig
    t0_wall: float
    status: str = "running"
    reason: str = ""
    plan: ExecutionPlan | None = None
    layout: Layout | None = None
    workers: list[rv.WorkerInfo] = field(default_factory=list)
    planned_s: float | None = None
    ready_s: float | None = None
    step_end_s: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    schedules: dict[int, str] = field(default_factory=dict)
    end_s: float | None = None
    events: list[EventRecord] = field(default_factory=list)
    listener: Callable[[EventRecord], None] | None = None

    def now_s(self) -> float:
        return time.time() - self.t0_wall

    def event(self, kind: str, **detail) -> None:
        record = EventRecord(self.now_s(), kind, detail)
        self.events.append(record)
        if self.listener is not None:
            self.listener(record)


def _headline(traceback_text: str) -> str:
    """'worker 3 (node1 gpu 0, pid 42): RuntimeError: ...' from a reported traceback."""
    lines = [line for line in traceback_text.strip().splitlines() if line.strip()]
    first = lines[0].rstrip(":") if lines else "a worker"
    return f"{first}: {lines[-1].strip()}" if len(lines) > 1 else first


def natural_key(name: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


class Coordinator:
    """Owns the store and the plan of one job."""

    def __init__(
        self,
        config: RunConfig,
        bind_host: str = "127.0.0.1",
        advertise_host: str | None = None,
        port: int = 0,
        on_event: Callable[[EventRecord], None] | None = None,
    ):
        self.config = config
        self.profile = resolve_run_profile(config)
        self.planner = make_planner(config, self.profile)
        self.planner.template_set()  # fail now if the model cannot be planned at all
        self.store = rv.host_store(bind_host, port, timeout_s=config.startup_timeout_s)
        host = advertise_host or (bind_host if bind_host not in ("0.0.0.0", "") else socket.gethostname())
        self.address = f"{host}:{self.store.port}"
        self.outcome = RunOutcome(config, time.time(), listener=on_event)
        job = {"config": config.to_dict()}
        if config.compute == "emulated":
            job["emulation"] = [
                EmulatedLayerTimes(l.forward_s, l.backward_s, l.output_bytes).to_list() for l in self.profile.layers
            ]
        rv.put_json(self.store, rv.JOB, job)
        self.outcome.event("coordinator_started", address=self.address, profile=self.profile.source)

    # -- the whole job ------------------------------------------------------------------
    def run(self, alive: Liveness | None = None) -> RunOutcome:
        """Wait for the workers, plan, publish, watch until the last step or a failure."""
        out = self.outcome
        try:
            workers = self._await_workers(alive)
            self._publish(workers)
            self._watch(alive)
            out.status = "finished"
            out.event("finished", iterations=len(out.step_end_s))
        except JobFailed as exc:
            out.status, out.reason = "failed", str(exc)
            out.event("failed", reason=str(exc))
            self.store.set(rv.ABORT, str(exc))
        out.end_s = out.now_s()
        return out

    def _problems(self, alive: Liveness | None) -> tuple[list[str], list[str]]:
        """(lost workers, reported errors) as seen now."""
        lost = []
        if alive is not None:
            lost = [f"worker process {label} exited with status {code}" for label, code in alive().items() if code not in (None, 0)]
        return lost, rv.reported_errors(self.store)

    def _check(self, alive: Liveness | None) -> None:
        """Raise JobFailed when a worker process died or a worker reported an error. A
        death makes its peers fail too (closed connections), so after the first sign the
        coordinator waits a moment and reports dead workers first, then errors (their
        last lines; the full tracebacks go to the events)."""
        lost, errors = self._problems(alive)
        if not lost and not errors:
            return
        time.sleep(FAILURE_GRACE_S)
        lost, errors = self._problems(alive)
        for text in errors:
            self.outcome.event("worker_error", traceback=text)
        lines = lost + [_headline(text) for text in errors]
        raise JobFailed("; ".join(lines))

    def _await_workers(self, alive: Liveness | None) -> list[rv.WorkerInfo]:
        expected = self.config.num_workers
        deadline = time.time() + self.config.startup_timeout_s
        while self.store.add(rv.WORKER_COUNT, 0) < expected:
            self._check(alive)
            if time.time() > deadline:
                got = self.store.add(rv.WORKER_COUNT, 0)
                raise JobFailed(f"only {got} of {expected} workers registered within {self.config.startup_timeout_s:.0f} s")
            time.sleep(POLL_S * 5)
        workers = rv.registered(self.store)
        if len(workers) != expected:
            raise JobFailed(f"{len(workers)} workers registered, the job expects {expected}")
        by_node: dict[str, list[int]] = {}
        for w in workers:
            by_node.setdefault(w.node, []).append(w.gpu)
        g = self.config.gpus_per_node
        for node, gpus in by_node.items():
            if sorted(gpus) != list(range(g)):
                raise JobFailed(f"node {node} registered GPUs {sorted(gpus)}, expected 0..{g - 1}")
        self.outcome.workers = workers
        self.outcome.event("workers_registered", nodes=sorted(by_node, key=natural_key), workers=len(workers))
        return workers

    def _publish(self, workers: list[rv.WorkerInfo]) -> None:
        nodes = sorted({w.node for w in workers}, key=natural_key)
        try:
            plan = make_plan(self.planner, self.config, nodes)
            allreduce = self.planner.layer_allreduce_s(plan.num_pipelines)
            layout = layout_from_plan(plan, 0, [float(x) for x in allreduce])
        except ValueError as exc:  # PlannerError, LayoutError
            raise JobFailed(f"cannot plan: {exc}") from None
        out = self.outcome
        out.plan, out.layout = plan, layout
        rv.put_json(self.store, rv.layout_key(0), layout.to_dict())
        self.store.set(rv.LATEST, "0")
        out.planned_s = out.now_s()
        out.event("plan_published", generation=0, plan=plan.to_dict(), world_size=layout.world_size)

    def _watch(self, alive: Liveness | None) -> None:
        out, layout, store = self.outcome, self.outcome.layout, self.store
        world = range(layout.world_size)
        steps = self.config.steps
        ready = [rv.ready_key(0, r) for r in world]
        done = [rv.done_key(0, r) for r in world]
        last_beat_check = 0.0
        while True:
            self._check(alive)
            now = time.time()
            if now - last_beat_check >= self.config.heartbeat_interval_s:
                self._check_heartbeats(now)
                last_beat_check = now
            if out.ready_s is None and store.check(ready):
                reports = [rv.get_json(store, key) for key in ready]
                out.ready_s = max(r["t"] for r in reports) - out.t0_wall
                for pipe in layout.pipelines:
                    out.schedules[pipe.index] = reports[pipe.ranks[0]]["schedule"]
                out.event("training_started", schedules=out.schedules)
            while len(out.step_end_s) < steps:
                keys = [rv.step_key(0, len(out.step_end_s), r) for r in world]
                if not store.check(keys):
                    break
                reports = [rv.get_json(store, key) for key in keys]
                out.step_end_s.append(max(r["t"] for r in reports) - out.t0_wall)
                total = sum(r["loss_sum"] for r in reports if r["loss_sum"] is not None)
                out.losses.append(total / layout.num_microbatches)
            if len(out.step_end_s) == steps and store.check(done):
                return
            time.sleep(POLL_S)

    def _check_heartbeats(self, now: float) -> None:
        """Fail on a worker of the plan whose heartbeat is older than the limit (workers
        that finished, or spares, stop beating and are skipped)."""
        limit = self.config.heartbeat_timeout_s
        layout = self.outcome.layout
        for w in self.outcome.workers:
            rank = layout.rank_of(w.node, w.gpu)
            if rank is None or self.store.check([rv.done_key(layout.generation, rank)]):
                continue
            key = rv.heartbeat_key(w.worker_id)
            if not self.store.check([key]):
                continue
            age = now - float(self.store.get(key).decode())
            if age > limit:
                raise JobFailed(f"worker {w.worker_id} ({w.node} gpu {w.gpu}) missed heartbeats for {age:.1f} s")

    def close(self) -> None:
        """Drop the store (workers still connected see it vanish and exit)."""
        self.store = None
