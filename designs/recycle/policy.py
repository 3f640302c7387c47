"""ReCycle's policy: no spares; peers absorb a failed worker's microbatches; re-plan rarely.

Gandhi et al., "ReCycle: Resilient Training of Large DNNs using Pipeline Adaptation",
SOSP'24. The plan is the fastest uniform (depth D, width W) grid on every usable node
(`VarunaSearch`; ReCycle keeps no spare replicas). A failure leaves the grid as it is: the
failed workers' microbatches run on the same stage of the other pipelines, in the bubbles of
their 1F1B schedules (`recycle_schedule`), so the iteration slows down by the ratio of the
adapted schedule's makespan to the healthy one's (the pipeline compute only; the gradient
all-reduce stays). The job re-plans (restart on the fastest grid for the usable nodes,
arrivals included) at the next checkpoint, or at once (checkpoint, then restart) when
running degraded until that checkpoint commits fewer samples than re-planning now:
H / T' < (H - R) / T_new, H the seconds to the next checkpoint at the degraded pace T', R
`replan_s`, T_new the new grid's iteration time. A stage with no live worker (W = 1, or all
W lost), or peers without memory for the extra in-flight activations: the state of that
stage is gone or the schedule cannot run: restart (from the last checkpoint when a stage
is gone, else checkpoint first).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property

from designs.varuna.search import VarunaSearch
from planner.costmodel import CostTables
from planner.policies.decisions import (
    Checkpoint,
    CheckpointSchedule,
    ClusterView,
    Continue,
    Decision,
    Event,
    FailOver,
    IterationEnd,
    NodesRemoved,
    PauseEnded,
    Restart,
    RestartFromCheckpoint,
    Start,
    WaitForNodes,
)
from planner.policies.grid import Grid, GridPlan, place

from .schedule import host_of, hosts, makespan

CONTINUE = Continue()


@dataclass(frozen=True)
class RecyclePlan(GridPlan):
    """A grid with `failed` (pipeline, stage) slots whose work its peers run; its
    iteration takes `degraded_s` (None: the grid's own time). `nodes` are the live ones."""

    gpus: int = 1
    failed: frozenset[tuple[int, int]] = frozenset()
    degraded_s: float | None = None
    grid_nodes: tuple[str, ...] = ()  # the nodes as first placed, dead ones included (empty: `nodes`)

    @property
    def iteration_time_s(self) -> float:
        return self.config.iteration_time_s if self.degraded_s is None else self.degraded_s

    @property
    def gpus_per_node(self) -> int:
        return self.gpus

    @cached_property
    def slots(self) -> dict[str, tuple[tuple[int, int], ...]]:
        """node -> the (pipeline, stage) slots it runs (healthy placement)."""
        c, g = self.config, self.gpus
        out: dict[str, list[tuple[int, int]]] = {}
        for k in range(c.num_gpus):
            node = self.placed[k // g]
            out.setdefault(node, []).append((k // c.depth, k % c.depth))
        return {n: tuple(v) for n, v in out.items()}

    @property
    def placed(self) -> tuple[str, ...]:
        return self.grid_nodes or self.nodes

    def describe(self) -> dict:
        info = super().describe()
        info.update(failed_slots=len(self.failed), predicted_iteration_s=self.iteration_time_s)
        return info


def healthy(config: Grid, ready: Iterable[str], gpus_per_node: int) -> RecyclePlan:
    base = place(config, tuple(ready), gpus_per_node)
    return RecyclePlan(base.config, base.nodes, None, base.idle_gpus, gpus=gpus_per_node)


def degrade(plan: RecyclePlan, failed: frozenset[tuple[int, int]], alive: set[str], seconds: float) -> RecyclePlan:
    """`plan` with `failed` slots, on its live nodes, each stage held by its live workers."""
    c = plan.config
    holders: list[list[str]] = [[] for _ in range(c.depth)]
    for node, slots in plan.slots.items():
        if node in alive:
            for _, s in slots:
                if node not in holders[s]:
                    holders[s].append(node)
    nodes = tuple(n for n in plan.placed if n in alive)
    live_workers = c.num_gpus - len(failed)
    return RecyclePlan(
        c,
        nodes,
        tuple(tuple(h) for h in holders),
        len(nodes) * plan.gpus - live_workers,
        gpus=plan.gpus,
        failed=failed,
        degraded_s=seconds,
        grid_nodes=plan.placed,
    )


def canonical(failed: Iterable[tuple[int, int]]) -> tuple[tuple[int, ...], ...]:
    """The failed slots up to renaming pipelines: each failed pipeline's stages, sorted."""
    by_pipe: dict[int, list[int]] = {}
    for p, s in failed:
        by_pipe.setdefault(p, []).append(s)
    return tuple(sorted(tuple(sorted(v)) for v in by_pipe.values()))


def stage_lost(config: Grid, failed: frozenset[tuple[int, int]]) -> bool:
    """Some stage has no live worker: every pipeline's slot of it is among `failed`."""
    return any(all((p, s) in failed for p in range(config.width)) for s in range(config.depth))


@dataclass(frozen=True)
class RecycleMemory:
    """`base`: the healthy grid whose workers hold the state; `replan_after`: re-plan at the
    first checkpoint that completes after this many committed iterations (None: no);
    `saving`: the grid whose survivors write the checkpoint a re-plan takes first (None:
    no such checkpoint under way)."""

    base: RecyclePlan | None = None
    started: bool = False
    replan_after: int | None = None
    notes: tuple[str, ...] = field(default=())
    saving: RecyclePlan | None = None


class RecyclePolicy:
    name = "recycle"

    def __init__(
        self,
        search: VarunaSearch,
        gpus_per_node: int,
        *,
        checkpoints: CheckpointSchedule,
        max_nodes: int,
        replan_s: float,
        weight_share: float,
        cache: dict | None = None,
    ):
        self.search, self.g = search, gpus_per_node
        self.checkpoints = checkpoints
        self.replan_s = replan_s
        self.weight_share = weight_share
        self.cache: dict = {} if cache is None else cache
        min_gpus = search.min_gpus(max_nodes * gpus_per_node)
        self.min_nodes = math.ceil(min_gpus / gpus_per_node) if min_gpus is not None else None

    def infeasible_reason(self) -> str | None:
        if self.min_nodes is None:
            return "out of memory: no (depth, width) grid fits"
        return None

    # -- the adapted schedule ------------------------------------------------------------
    def slowdown(self, config: Grid, failed: frozenset[tuple[int, int]]) -> float | None:
        """Adapted / healthy makespan of `config`'s pipelines with `failed` slots; None
        when a stage has no live worker or a peer cannot hold the extra activations."""
        shape = canonical(failed)
        key = ("slowdown", config, shape, self.weight_share)
        if key in self.cache:
            return self.cache[key]
        renamed = [(p, s) for p, stages in enumerate(shape) for s in stages]
        answer: float | None = None
        if all(sum(1 for _, s in renamed if s == t) < config.width for t in range(config.depth)) and self._fits(
            config, renamed
        ):
            tables = self._tables(config.microbatch_size)
            fwd = [tables.forward_s(a, e, 1) for a, e in config.stage_layers]
            bwd = [tables.backward_s(a, e, 1) for a, e in config.stage_layers]
            run = dict(pipelines=config.width, microbatches=config.num_microbatches, weight_share=self.weight_share)
            plain_key = ("healthy", config, self.weight_share)
            if plain_key not in self.cache:
                self.cache[plain_key] = makespan(fwd, bwd, **run)  # type: ignore[arg-type]
            answer = makespan(fwd, bwd, failed=renamed, **run) / self.cache[plain_key]  # type: ignore[arg-type]
        self.cache[key] = answer
        return answer

    def _tables(self, b: int) -> CostTables:
        tables = self.search.tables(b)
        if tables is None:
            raise ValueError(f"internal: no profile at microbatch {b} for a grid that uses it")
        return tables

    def _fits(self, config: Grid, failed: list[tuple[int, int]]) -> bool:
        """Each host keeps D - s forwards in flight per pipeline it serves."""
        route = hosts(config.width, config.depth, failed)
        serves: dict[tuple[int, int], set[int]] = {}
        for p, s in failed:
            for m in range(config.num_microbatches):
                serves.setdefault((host_of(route, p, s, m), s), {host_of(route, p, s, m)}).add(p)
        tables = self._tables(config.microbatch_size)
        for (_, s), pipes in serves.items():
            a, e = config.stage_layers[s]
            inflight = (config.depth - s) * len(pipes)
            if tables.memory_bytes(a, e, 1, min(inflight, len(pipes) * config.num_microbatches)) > (
                tables.usable_memory_bytes
            ):
                return False
        return True

    # -- plans ---------------------------------------------------------------------------
    def plan_for(self, ready: tuple[str, ...]) -> RecyclePlan | None:
        config = self.search.best(len(ready) * self.g)
        return healthy(config, ready, self.g) if config is not None else None

    def _next_checkpoint_in(self, view: ClusterView, tau: float) -> int | None:
        """Iterations from now to the engine's next periodic checkpoint at pace `tau`."""
        s, done = self.checkpoints, view.iterations_done
        options = []
        if s.every_iterations:
            options.append((done // s.every_iterations + 1) * s.every_iterations - done)
        if s.every_s:
            options.append(max(1, view.checkpoint_iterations + max(1, round(s.every_s / tau)) - done))
        return min(options) if options else None

    def _wake(self, view: ClusterView, tau: float) -> tuple[float | None, bool]:
        """(wake_at_s, check_at_iteration_end) to see the end of the iteration before the
        next checkpoint, then each one until the checkpoint has completed."""
        left = self._next_checkpoint_in(view, tau)
        if left is None:
            return None, False
        if left <= 2:
            return None, True
        return view.time_s + (left - 2) * tau, False

    # -- decisions -----------------------------------------------------------------------
    def decide(self, view: ClusterView, event: Event, current: Decision | None) -> Decision:
        reason = self.infeasible_reason()
        if reason is not None:
            return Decision(None, (WaitForNodes(0, reason),), RecycleMemory())
        plan: RecyclePlan | None = current.plan if current is not None else None
        memory = current.memory if current is not None and current.memory is not None else RecycleMemory()
        if isinstance(event, NodesRemoved):
            return self._on_removal(view, event, plan, memory)
        if isinstance(event, PauseEnded) and plan is not None:
            memory = RecycleMemory(plan, True)
        if plan is None:
            return self._launch(view, memory)
        if memory.replan_after is not None and view.checkpoint_iterations > memory.replan_after:
            return self._replan(view, plan, memory, why="re-plan at the checkpoint")
        if memory.replan_after is None and not isinstance(event, IterationEnd):
            better = self.plan_for(view.ready)  # arrivals: worth a re-plan at the next checkpoint?
            if better is not None and better.iteration_time_s < plan.iteration_time_s * (1 - 1e-9):
                memory = replace(memory, replan_after=view.checkpoint_iterations)
        return self._keep(view, plan, memory)

    def _keep(
        self, view: ClusterView, plan: RecyclePlan, memory: RecycleMemory, actions: tuple = (CONTINUE,)
    ) -> Decision:
        if memory.replan_after is None:
            return Decision(plan, actions, memory)
        wake, check = self._wake(view, plan.iteration_time_s)
        return Decision(plan, actions, memory, check_at_iteration_end=check, wake_at_s=wake)

    def _replan(self, view: ClusterView, plan: RecyclePlan, memory: RecycleMemory, why: str) -> Decision:
        new = self.plan_for(view.ready)
        saves = (Checkpoint(why),) if view.iterations_done > view.checkpoint_iterations else ()
        after = RecycleMemory(None, True, saving=plan if saves else None)
        if new is None:
            return Decision(None, (*saves, WaitForNodes(self.min_nodes or 0, why)), after)
        return Decision(new, (*saves, Restart(why)), after)

    def _on_removal(
        self, view: ClusterView, event: NodesRemoved, plan: RecyclePlan | None, memory: RecycleMemory
    ) -> Decision:
        base = memory.base
        lost = sorted(set(event.nodes) & set(plan.nodes if plan is not None else ()))
        saving = memory.saving
        if saving is not None and view.iterations_done > view.checkpoint_iterations:
            # a node lost while the re-plan's checkpoint is written: the survivors of the grid
            # still hold every stage unless all of a stage's workers are gone, so the
            # checkpoint is written again from them (as Varuna's is) instead of rolling back
            gone = sorted(set(event.nodes) & set(saving.nodes))
            ready = set(view.ready)
            failed = frozenset(
                saving.failed | {slot for n, slots in saving.slots.items() if n not in ready for slot in slots}
            )
            if gone and not stage_lost(saving.config, failed):
                kept = replace(saving, failed=failed)
                return self._replan(view, kept, memory, why=f"lost {gone} while checkpointing before a re-plan")
        if not lost:
            return self._keep(view, plan, memory) if plan is not None else Decision(None, (Continue(),), memory)
        if base is None or view.job_state == "restarting" or plan is None:
            return self._launch(view, RecycleMemory(None, memory.started))
        ready = set(view.ready)
        failed = frozenset(plan.failed | {slot for n in lost for slot in plan.slots.get(n, ())})
        ratio = self.slowdown(plan.config, failed)
        if ratio is None:
            if stage_lost(plan.config, failed):
                why = f"lost {lost}: a stage has no live worker, back to the last checkpoint"
                return self._launch(view, RecycleMemory(None, True), note=why)
            return self._replan(view, plan, memory, why=f"lost {lost}: the peers cannot hold the extra microbatches")
        c = plan.config
        degraded = degrade(plan, failed, ready, c.compute_s * ratio + c.allreduce_s)
        new = self.plan_for(view.ready)
        left = self._next_checkpoint_in(view, degraded.iteration_time_s)
        horizon = math.inf if left is None else left * degraded.iteration_time_s
        if new is not None and self._replan_now(horizon, degraded.iteration_time_s, new.iteration_time_s):
            return self._replan(view, plan, memory, why=f"lost {lost}: the slowdown costs more than a re-plan")
        covers = tuple(
            FailOver(n, degraded.stage_nodes[s][0] if degraded.stage_nodes[s] else "", (p, s))
            for n in lost
            for p, s in plan.slots.get(n, ())
        )
        memory = replace(
            memory, replan_after=view.checkpoint_iterations if memory.replan_after is None else memory.replan_after
        )
        return self._keep(view, degraded, memory, actions=covers)

    def _replan_now(self, horizon_s: float, slow_s: float, new_s: float) -> bool:
        """Re-planning now commits more by the next checkpoint than running degraded."""
        if math.isinf(horizon_s):
            return new_s < slow_s
        return (horizon_s - self.replan_s) / new_s > horizon_s / slow_s

    def _launch(self, view: ClusterView, memory: RecycleMemory, note: str = "") -> Decision:
        new = self.plan_for(view.ready)
        restart = memory.started
        after = RecycleMemory(None, memory.started)
        if new is None:
            why = note or f"{len(view.ready)} usable nodes, ReCycle needs {self.min_nodes}"
            return Decision(None, (WaitForNodes(self.min_nodes or 0, why, rollback=restart),), after)
        return Decision(new, (RestartFromCheckpoint(note) if restart else Start(),), after)
