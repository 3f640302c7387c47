"""A worker's life across generations: join, restore, train, and survive failures (DESIGN 5).

For each generation that names it, the worker joins the generation's process groups,
gets every layer of its new stage from where the directive says (its own memory, a
peer, the checkpoint, or the seed), reports ready, waits for go, and trains from the
resume step with each step committed through the store (`real.commit`).

When anything goes wrong inside a generation (a peer died: gloo fails within
milliseconds with "Connection closed by peer"; a hung peer was fenced; the coordinator
aborted the step) the worker reports the fault and destroys its process groups at once,
which closes its connections so that peers blocked on it fail fast too. That cascade
walks the ring of blocked ranks one teardown at a time (seconds at 32 ranks here), so a
gloo generation also runs an abort watch: once the coordinator has handled the failure,
every survivor severs its generation's sockets at once (`sever`) and the whole generation
fails within a poll. NCCL reports no such thing: an
NCCL generation runs an abort watch (`nccl.AbortWatch`) that aborts its groups as soon as
the coordinator has handled a failure in it, and is torn down by abort (`groups`). It then waits for the
coordinator's resume step, checks that its state is ready for it (the commit protocol
guarantees this: no rollback is ever needed), and reports what it holds (`left`), ready
for the next generation. Between generations the worker keeps its layers' states in
memory; they are the replicas that reconfiguration copies from. A generation whose
directive orders in-memory copies takes them at its step boundaries (`copies.CopyTaker`),
into its node's memory (`state.memory`), and a restart from one reads them back there.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Mapping

import torch
import torch.distributed as dist

from ..config import RunConfig, parse_checkpoint_faults
from ..models.family import trained
from ..protocol import keys
from ..protocol import rendezvous as rv
from ..protocol.commit import STOP, ack, report_step, wait_verdict
from ..protocol.directive import START, Directive
from ..protocol.secret import JobSecret
from ..protocol.sources import CHECKPOINT, INIT, LOCAL, MEMORY, PEER
from ..state.checkpoint import load_layer
from ..state.layer_state import LayerState, unflatten
from ..state.memory import NodeMemory
from ..state.transfers import transfers
from ..state.writer import CheckpointJob, CheckpointWriter
from .copies import CopyTaker, publish_sizes
from .exchange import exchange
from .groups import Generation, build_generation
from .nccl import AbortWatch
from .probe import FailureProbe
from .stage_runner import StageRunner

SPARE, FINISHED, STOPPED, FAULT = "spare", "finished", "stopped", "fault"
# A survivor still blocked this long after its abort watch severed (or aborted) has met
# what the sever did not free: its watch severs every connection left and notes where it is
# blocked (`Generation.straggle`). Teardowns took at most 0.8 s in the issue-15 runs.
STRAGGLE_AFTER_S = 2.0


def wait_key(store: dist.Store, key: str) -> bytes:
    """`store.get` that outlasts the store's own timeout (the coordinator always answers
    eventually, and the heartbeat thread ends the process if the coordinator is gone)."""
    while True:
        try:
            store.wait([key])
            return store.get(key)
        except dist.DistStoreError as exc:
            if "timeout" not in str(exc).lower():
                raise


def report_checkpoint_failure(store: dist.Store, generation: int, attempt: int, step: int, reason: str) -> None:
    """Tell the coordinator this worker could not write its part of a checkpoint."""
    n = store.add(keys.ckpt_failures_key(generation, attempt, step), 1)
    store.set(keys.ckpt_failure_key(generation, attempt, step, n), reason)


class StoreReports:
    """The writer's reports, as store keys on its own connection (`CheckpointReports`)."""

    def __init__(self, store: dist.Store, who: str):
        self.store, self.who = store, who

    def written(self, job: CheckpointJob, layer: int) -> None:
        self.store.set(keys.layer_key(job.generation, job.attempt, job.step, layer), "1")

    def failed(self, job: CheckpointJob, reason: str) -> None:
        report_checkpoint_failure(self.store, job.generation, job.attempt, job.step, f"{self.who}: {reason}")


class _Attempt:
    """What one generation built so far (torn down on the way out)."""

    def __init__(self):
        self.generation: Generation | None = None
        self.runner: StageRunner | None = None
        self.watch: AbortWatch | None = None
        self.copies: CopyTaker | None = None
        self.loaded = False

    def close(self) -> None:
        """Destroy the generation's groups and drop every reference to them (the runner's
        stage, schedule and gradient sync hold some), so their sockets really close.
        Reference counting frees them at once; a full `gc.collect()` would cost about
        0.1 s of CPU per process, and many processes at once on a few cores (measured:
        0.6 s with 8 on 2 cores), on the recovery's critical path."""
        if self.watch is not None:
            self.watch.stop()
        if self.copies is not None:
            self.copies.release()
        if self.runner is not None:
            self.runner.release()
        if self.generation is not None:
            self.generation.teardown()


class WorkerSession:
    """One worker's state between generations and the code that runs each generation."""

    def __init__(
        self,
        store: dist.Store,
        config: RunConfig,
        info: rv.WorkerInfo,
        device: torch.device,
        backend: str,
        emulation,
        probe: FailureProbe,
        checkpoint_store: dist.Store | None = None,
        watch_store: dist.Store | None = None,
        secret: JobSecret | None = None,
    ):
        self.store, self.config, self.info = store, config, info
        self.secret = secret  # directives are signed with it
        self.device, self.backend, self.emulation, self.probe = device, backend, emulation, probe
        self.held: dict[int, LayerState] = {}
        self._writer: CheckpointWriter | None = None
        self._checkpoint_store = checkpoint_store
        self._watch_store = watch_store  # its own connection, for the generations' abort watch
        self._sizes: dict[int, int] = {}  # layer -> flattened size, for receiving in-memory copies
        self._published: set[int] = set()  # layers whose size this process has published

    @property
    def tied_layers(self) -> tuple[int, int] | None:
        """The layers of the model's tied pair (real compute), whose holders form a group."""
        if self.config.compute != "real":
            return None
        tie = trained(self.config).tie
        return (tie[0][0], tie[1][0]) if tie is not None else None

    @property
    def memory(self) -> NodeMemory:
        """This node's CPU memory for in-memory copies."""
        if self.config.memory_dir is None:
            raise RuntimeError("internal error: in-memory copies were ordered without a memory directory")
        return NodeMemory(self.config.memory_dir, self.info.node)

    # -- one generation ----------------------------------------------------------------
    def run_generation(self, number: int) -> str:
        if self.secret is None:
            raise RuntimeError("internal error: a worker session without the job's secret cannot check directives")
        directive = Directive.from_dict(rv.get_signed(self.store, keys.directive_key(number), self.secret))
        rank = directive.rank_of_worker(self.info.worker_id)
        if rank is None:
            return SPARE
        attempt = _Attempt()
        error = None
        try:
            return self._train(number, rank, directive, attempt)
        except Exception:
            error = traceback.format_exc()
        # Outside the except block: the exception's frames (and the pending gloo work they
        # reference, which keeps the groups' sockets open) are gone before we tear down.
        return self._fault(number, rank, attempt, error)

    def _train(self, number: int, rank: int, directive: Directive, attempt: _Attempt) -> str:
        self.probe("groups", directive.resume_step)
        attempt.generation = build_generation(
            self.store,
            directive.layout,
            rank,
            self.backend,
            self.config.timeout_s,
            self.config.sever_on_failure,
            tied_layers=self.tied_layers,
        )
        if self._watch_store is not None:
            generation, watch_store = attempt.generation, self._watch_store

            def straggle() -> dict:  # on the watch's thread, which owns `watch_store`
                noted = generation.straggle()
                rv.put_json(watch_store, keys.straggled_key(number, rank), noted)  # the coordinator may fence this rank
                return noted

            watch = AbortWatch(watch_store, keys.resume_key(number), generation.interrupt,
                               straggle=straggle, straggle_after_s=STRAGGLE_AFTER_S)  # fmt: skip
            attempt.watch = watch.start()
        elif attempt.generation.aborts:
            raise RuntimeError("internal error: an NCCL generation needs a store connection for its abort watch")
        rv.put_json(self.store, keys.built_key(number, rank), {"t": time.time()})
        runner = attempt.runner = StageRunner(
            self.config, attempt.generation, self.device, self.emulation, self.probe, directive.resume_step
        )
        runner.load(self._gather(directive, rank, runner))
        self.held, attempt.loaded = {}, True
        if directive.copies is not None:
            publish_sizes(self.store, runner.states(copy=False), self._published)
            wire = runner.device if attempt.generation.backend == "nccl" else None  # NCCL moves device memory only
            attempt.copies = CopyTaker(self.store, directive.copies, number, directive.layout, rank, self.memory,
                                       self.config.steps, self._sizes, wire)  # fmt: skip
        rv.put_json(self.store, keys.ready_key(number, rank), {"t": time.time(), "schedule": runner.schedule_name})
        go = wait_key(self.store, keys.go_key(number)).decode()
        if go == "abort":
            raise RuntimeError("the coordinator aborted the generation before it started")
        if go == "stop":
            return self._leave(number, rank, attempt)
        for step in range(directive.resume_step, self.config.steps):
            _, verdict = runner.step(step, self._committer(number, step, rank, directive.layout.world_size))
            self._maybe_checkpoint(number, directive, runner)
            if attempt.copies is not None:
                attempt.copies.at_boundary(runner.ready_step, lambda: runner.states(copy=False))
            if verdict == STOP and runner.ready_step < self.config.steps:
                return self._leave(number, rank, attempt)
        if self.config.save_params_dir:
            runner.save(self.config.save_params_dir)
        attempt.close()
        self.held = runner.states(copy=False)
        self.store.set(keys.done_key(number, rank), repr(time.time()))
        return FINISHED

    def _committer(self, number: int, step: int, rank: int, world: int):
        def commit(loss_sum):
            report_step(self.store, number, step, rank, loss_sum)
            ack(self.store, number, step, world)
            return wait_verdict(self.store, number, step, self.config.timeout_s)

        return commit

    def _gather(self, directive: Directive, rank: int, runner: StageRunner) -> dict[int, LayerState]:
        """Every layer of this rank's stage, from memory, peers, the checkpoint or the seed."""
        step = directive.resume_step
        states: dict[int, LayerState] = {}
        for source in directive.sources[rank]:
            if source.kind == LOCAL:
                state = self.held.get(source.layer)
                if state is None or state.ready_step != step:
                    have = None if state is None else state.ready_step
                    raise RuntimeError(f"layer {source.layer} should be in memory at step {step}, have {have}")
                states[source.layer] = state
            elif source.kind == CHECKPOINT:
                if directive.checkpoint is None:
                    raise RuntimeError(f"layer {source.layer} should come from a checkpoint, the directive names none")
                states[source.layer] = load_layer(directive.checkpoint, source.layer)
            elif source.kind == INIT and step != 0:
                raise RuntimeError(f"layer {source.layer} cannot start from its seed at step {step}")
        plan = transfers(directive.sources)
        reconfiguring = directive.kind != START
        templates = runner.states(copy=False)
        flats = self._from_memory(directive, rank, plan, runner)
        for layer in [s.layer for s in directive.sources[rank] if s.kind == MEMORY and s.rank == rank]:
            states[layer] = unflatten(flats[layer].to(runner.device), templates[layer])
        if plan or reconfiguring:
            received = exchange(plan, rank, self.held, templates, posted=(lambda: self.probe("reconfigure", step)) if reconfiguring else None,
                                host_staged=runner.host_staged, flats=flats)  # fmt: skip
            states.update(received)
        wanted = {s.layer for s in directive.sources[rank] if s.kind in (LOCAL, PEER, MEMORY, CHECKPOINT)}
        if set(states) != wanted:
            raise RuntimeError(f"rank {rank} gathered layers {sorted(states)}, expected {sorted(wanted)}")
        return states

    def _from_memory(self, directive: Directive, rank: int, plan, runner: StageRunner) -> dict:
        """The flat states this rank reads from its node's memory: its own `memory` layers
        and those it sends to others (on its device, unless the wire is host memory)."""
        if directive.memory_from is None:
            return {}
        mine = {s.layer for s in directive.sources[rank] if s.kind == MEMORY and s.rank == rank}
        mine |= {t.layer for t in plan if t.src == rank}
        device = runner.io_device if runner.host_staged else runner.device
        read = self.memory.get
        return {layer: read(directive.memory_from, directive.resume_step, layer).to(device) for layer in sorted(mine)}

    def _maybe_checkpoint(self, number: int, directive: Directive, runner: StageRunner) -> None:
        every, ready = self.config.checkpoint_every, runner.ready_step
        if not every or ready % every or ready >= self.config.steps or not self.config.checkpoint_dir:
            return
        owned = set(directive.layout.checkpoint_layers(runner.assignment.rank))
        mine = [s for l, s in runner.states(copy=False).items() if l in owned]
        if mine:
            self._submit(number, 0, ready, mine)

    def _submit(self, generation: int, attempt: int, step: int, states) -> None:
        """Hand layer copies to the writer; a writer with no room in time fails the
        checkpoint at once (reported on this thread's own store connection)."""
        reason = self._checkpoint_writer().submit(
            generation, attempt, step, states, self.config.checkpoint_queue_timeout_s
        )
        if reason is not None:
            report_checkpoint_failure(self.store, generation, attempt, step, f"{self._who}: {reason}")

    @property
    def _who(self) -> str:
        return f"worker {self.info.worker_id} ({self.info.node} gpu {self.info.gpu})"

    def _checkpoint_writer(self) -> CheckpointWriter:
        if self._writer is None:
            if self._checkpoint_store is None:
                raise RuntimeError(
                    "internal error: a checkpoint was asked of a worker without a writer's store connection"
                )
            if self.config.checkpoint_dir is None:
                raise RuntimeError("internal error: a checkpoint was asked of a worker without a checkpoint directory")
            faults = parse_checkpoint_faults(self.config.checkpoint_fault)
            self._writer = CheckpointWriter(
                self.config.checkpoint_dir, StoreReports(self._checkpoint_store, self._who), faults, self.info.node
            )
        return self._writer

    # -- leaving a generation ------------------------------------------------------------
    def _leave(self, number: int, rank: int, attempt: _Attempt) -> str:
        attempt.close()
        assert attempt.runner is not None  # a generation is left only once its runner is built
        self.held = attempt.runner.states(copy=False)
        self._report_left(number, rank, None)
        return STOPPED

    def _fault(self, number: int, rank: int, attempt: _Attempt, text: str) -> str:
        t_fault = time.time()
        self.probe("teardown")
        attempt.close()  # closes this rank's connections: peers blocked on it fail fast
        self._timing: dict[str, object] = {"closed": time.time() - t_fault}
        if attempt.watch is not None:  # the coordinator's word (sever, abort) came before this rank tore down
            self._timing["interrupted"] = attempt.watch.fired
            if attempt.watch.straggled is not None:
                self._timing["straggled"] = attempt.watch.straggled
        header = f"worker {self.info.worker_id} ({self.info.node} gpu {self.info.gpu}, pid {os.getpid()}), generation {number} rank {rank}:"
        self.store.set(keys.fault_key(number, rank), f"{header}\n{text}")
        self.store.add(keys.fault_count_key(number), 1)
        resume = int(wait_key(self.store, keys.resume_key(number)).decode())
        self._timing["resumed"] = time.time() - t_fault
        if attempt.loaded:
            runner = attempt.runner
            assert runner is not None  # loaded: built first
            if runner.ready_step != resume:
                raise RuntimeError(
                    f"after the failure this rank is ready for step {runner.ready_step}, the job resumes at {resume}"
                )
            self.held = runner.states(copy=False)
        self._report_left(number, rank, t_fault)
        return FAULT

    def _report_left(self, number: int, rank: int, t_fault: float | None) -> None:
        steps = {s.ready_step for s in self.held.values()}
        step = steps.pop() if len(steps) == 1 else -1
        rv.put_json(self.store, keys.left_key(number, rank), {
            "worker": self.info.worker_id, "step": step, "layers": sorted(self.held), "t_fault": t_fault, "t": time.time(), "timing": getattr(self, "_timing", None),
        })  # fmt: skip

    # -- on-demand checkpoint (Varuna's "checkpoint if possible" after a failure) --------
    def save(self, order: Mapping) -> None:
        """Write this worker's share of an on-demand checkpoint, in the background (a disk
        that fails or hangs fails the checkpoint, which the coordinator hears of or times
        out, not this worker)."""
        layers = order["writers"].get(str(self.info.worker_id), [])
        step = int(order["step"])
        states = []
        for layer in layers:
            state = self.held.get(int(layer))
            if state is None or state.ready_step != step:
                raise RuntimeError(f"asked to save layer {layer} at step {step}, which this worker does not hold")
            states.append(state)
        if states:
            self._submit(int(order["generation"]), int(order["attempt"]), step, states)
