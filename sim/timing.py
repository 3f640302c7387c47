"""How long things take: the two calibrations of the simulator (DESIGN 4).

A `Timing` turns a policy's plan into an iteration time (and the part of it that is useful
work, the rest being Bamboo's redundant computation) and a timed action into a pause.

- `ArtifactTiming`: the published artifact's tables and constants (`artifact_data`): the
  iteration takes global batch / table throughput at the plan's node count; Bamboo's takes
  1.5x while a node covers two stages; reconfiguration, restart and checkpoint pauses are
  the per-model constants (Varuna's restart pause is its restart time minus the checkpoint
  it includes).
- `PlannerTiming`: everything from the profile and the cluster through the planner and the
  policies. Iterations: the plan's predicted time (Oobleck's `ExecutionPlan`, Varuna's
  configuration, Bamboo's layout with redundancy and fail-over). Pauses, from
  `PlannerCosts` and, for checkpoint writes and loads, `planner.checkpoint_cost` on the
  plan's layer holdings (every holder moves its share of each layer at once, at the
  `StorageSpec`'s per-node bandwidths, under its optional aggregate cap):
    start                      relaunch of the processes of every node up (the engine
                                 passes them; the plan's nodes without), as the real
                                 backend starts a worker on every live node, idle ones
                                 too (`PlannerCosts.relaunch_s`)
    restart (with or without   relaunch + load onto the new plan's nodes
      rolling back)              (split reads, then an all-gather among each layer's holders)
    restart from a snapshot    relaunch + the busiest node's layers over the
                                 network (from copies in peers' memory)
    checkpoint                 fixed_s + the busiest writer's share / write bandwidth,
                               written by the nodes of the plan that last trained, less
                               those gone (the engine passes who is alive)
    reconfiguration            reconfigure_overhead_s (Oobleck: rebuild process groups);
                               relaunch (Bamboo relaunches its workers, state kept)
    layer copies               the busiest node's bytes in or out / network bandwidth

`ScaledPauses` wraps either one and multiplies each kind of pause by a factor (the
`*_cost_factor` options: sensitivity studies, or free checkpoints with 0).

A restart's start-up (`restart_startup_s`: the first `PlannerCosts.restart_startup_share`
of its relaunch, until every new process has started) is what a removal during it cannot
cut short: the engine lets it run to its end before the next restart begins, as the real
backend lets the other processes finish starting before it re-plans (0, the default: a
removal abandons the restart at once).
"""

from __future__ import annotations

from collections.abc import Collection, Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from designs import ArtifactContext, Design, DesignError
from designs import registry as designs
from planner.checkpoint_cost import StorageSpec, load_cost, write_cost
from planner.plan import ExecutionPlan
from planner.policies import (
    Checkpoint,
    CopyLayers,
    NodesPlan,
    Reinstantiate,
    Restart,
    RestartFromCheckpoint,
    RestartFromSnapshot,
    Start,
)
from planner.policies.grid import GridPlan
from planner.policies.holdings import holdings
from planner.reconfigure import Reconfiguration

from . import artifact_data as art
from .cost_terms import TERMS, default, relaunch_s
from .errors import SimError


@dataclass(frozen=True)
class IterationCost:
    """Seconds per iteration, the part that is not redundant computation, and the samples
    it commits (None: the job's global batch; a plan over part of the batch says less)."""

    total_s: float
    useful_s: float
    samples: int | None = None


class Timing(Protocol):
    calibration: str
    samples_per_iteration: int
    gpus_per_node: int

    def iteration(self, plan: Any) -> IterationCost: ...

    def pause_s(self, action: Any, plan: Any, alive: Collection[str] | None = None) -> float: ...

    def idle_gpus(self, plan: Any) -> int: ...


def _design(design: str | Design) -> Design:
    """A design, or the one registered under a name (as tests and old callers pass it)."""
    if isinstance(design, Design):
        return design
    try:
        return designs.get(design)
    except DesignError as exc:
        raise SimError(str(exc)) from None


class ArtifactTiming:
    """The artifact's model: throughput by node count from the design's table, its fixed
    pauses from the design's artifact hooks."""

    calibration = "artifact"
    gpus_per_node = 1

    def __init__(self, design: str | Design, model: str, calibration: str = "artifact", options: Any = None):
        self.design = _design(design)
        self.options = self.design.options() if options is None else options
        hooks = self.design.artifact
        if hooks is None:
            raise SimError(f"design {self.design.name} has no artifact calibration")
        self.hooks = hooks
        self.system = hooks.system
        self.model = art.get_model(model)
        self.samples_per_iteration = self.model.global_batch
        self.context = ArtifactContext(
            calibration=calibration,
            model=self.model,
            constants={name: value for name, value in vars(art).items() if name.isupper()},
            row=lambda nodes: art.row(self.system, self.model.name, nodes),
            min_runnable_nodes=art.min_runnable_nodes(self.system, self.model.name),
            runnable=art.runnable(self.system, self.model.name),
            checkpoint_every_iterations=None,
        )
        self._cache: dict[tuple[int, bool], IterationCost] = {}

    def iteration(self, plan: Any) -> IterationCost:
        """A plan says which row of the table prices it and whether a fail-over slows it
        (`artifact_nodes`, `failed_over`: `NodesPlan`, Bamboo's plan)."""
        try:
            count, slowed = plan.artifact_nodes, plan.failed_over
        except AttributeError:
            raise SimError(f"the artifact calibration cannot time a {type(plan).__name__}") from None
        key = (count, slowed)
        if key not in self._cache:
            rate = art.row(self.system, self.model.name, count).samples_per_s
            if rate <= 0:
                raise SimError(f"the artifact gives {self.system} no throughput on {self.model.name}")
            plain = self.samples_per_iteration / rate
            self._cache[key] = IterationCost(plain * (art.BAMBOO_FAILOVER_SLOWDOWN if slowed else 1.0), plain)
        return self._cache[key]

    def pause_s(self, action: Any, plan: Any, alive: Collection[str] | None = None) -> float:
        try:
            seconds = self.hooks.pause_s(self.context, self.options, action, plan)
        except DesignError as exc:
            raise SimError(str(exc)) from None
        if seconds is None:
            if isinstance(action, Checkpoint):
                raise SimError(f"the artifact has no checkpoint time for {self.system}")
            return 0.0
        return seconds

    def idle_gpus(self, plan: Any) -> int:
        """The table's idle GPUs at the plan's node count (only Varuna's rows have any)."""
        if isinstance(plan, NodesPlan):
            return art.row(self.system, self.model.name, len(plan.nodes)).idle_gpus
        return 0


@dataclass(frozen=True)
class PlannerCosts:
    """Pause constants of the planner calibration (docs/simulator.md explains the fits);
    checkpoint bandwidths are the `StorageSpec`'s.

    Relaunching n processes (a start, a restart before its load, Bamboo's reconfiguration)
    takes `restart_fixed_s + restart_per_process_s * n`, n the GPUs of the plan's nodes
    (`sim.cost_terms` says where the defaults come from). `restart_overhead_s`, when
    set, is the old model: every relaunch takes that constant, whatever its size (configs
    written before the line keep their results). `restart_startup_share` of a restart's
    relaunch is its processes' start-up, which a removal does not cut short (module
    docstring; 0: it does)."""

    reconfigure_overhead_s: float = default("reconfigure_overhead_s")
    restart_fixed_s: float = default("restart_fixed_s")
    restart_per_process_s: float = default("restart_per_process_s")
    restart_overhead_s: float | None = default("restart_overhead_s")
    restart_startup_share: float = default("restart_startup_share")

    def __post_init__(self) -> None:
        for name in ("reconfigure_overhead_s", "restart_fixed_s", "restart_per_process_s", "restart_overhead_s"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise SimError(f"{name} must be >= 0, got {value!r}")
        if not 0.0 <= self.restart_startup_share <= 1.0:
            raise SimError(f"restart_startup_share must be in [0, 1], got {self.restart_startup_share!r}")

    def relaunch_s(self, processes: int) -> float:
        """Seconds to start `processes` fresh processes and build their groups."""
        if self.restart_overhead_s is not None:
            return self.restart_overhead_s
        return relaunch_s(self.restart_fixed_s, self.restart_per_process_s, processes)


class PlannerTiming:
    """Iteration times from the policies' plans; pauses from `PlannerCosts` and, for
    checkpoints and loads, every holder moving its share in parallel (`checkpoint_cost`)."""

    calibration = "planner"

    def __init__(
        self,
        design: str | Design,
        *,
        global_batch: int,
        layer_bytes: Sequence[int],
        inter_node_bw_bytes_per_s: float,
        gpus_per_node: int,
        costs: PlannerCosts = PlannerCosts(),
        storage: StorageSpec = StorageSpec(),
        layout: Any = None,
        options: Any = None,
        iteration_s: Any = None,
        terms: Mapping[str, Any] | None = None,
    ):
        self.design = _design(design)
        self.iteration_s = iteration_s  # the design's time of an iteration of a plan (`PolicyBuild`)
        self.options = self.design.options() if options is None else options  # the design's, for its prices
        self.samples_per_iteration = global_batch
        self.layer_bytes = tuple(layer_bytes)
        self.bandwidth = inter_node_bw_bytes_per_s
        self.gpus_per_node = gpus_per_node
        self.costs = costs
        self.storage = storage
        self.layout = layout  # what the design built once per job to time its own plans (Bamboo's)
        self.terms = dict(terms or {})  # the run's cost terms by key, for `term`
        self._own: dict[tuple, IterationCost] = {}  # plans the design times: by their cost_key
        self._last: dict[str, tuple[Any, float]] = {}  # kind -> (plan, seconds): periodic checkpoints repeat
        self._by_shape: dict[tuple, float] = {}

    def iteration(self, plan: Any) -> IterationCost:
        if isinstance(plan, ExecutionPlan) and plan.partial:
            seconds = plan.iteration_time_s
            return IterationCost(seconds, seconds, plan.global_batch)
        if isinstance(plan, (ExecutionPlan, GridPlan)):
            seconds = plan.iteration_time_s
            if self.iteration_s is not None:
                seconds = self.iteration_s(plan, seconds)
            return IterationCost(seconds, seconds)
        key = getattr(plan, "cost_key", None)  # a plan its design times on its layout (Bamboo's)
        if key is not None:
            if self.layout is None:
                raise SimError(f"a {type(plan).__name__} needs its design's layout in the planner calibration")
            if key not in self._own:
                self._own[key] = IterationCost(*plan.iteration_s(self.layout))
            return self._own[key]
        raise SimError(f"the planner calibration cannot time a {type(plan).__name__}")

    def _holdings(self, plan: Any, alive: Container[str] | None):
        if plan is None:
            raise SimError("internal: a checkpoint write or load with no plan to hold the state")
        return holdings(plan, self.layout.stage_layers if self.layout is not None else None, alive)

    def _cached(self, kind: str, plan: Any, alive: Container[str] | None, cost) -> float:
        """Seconds of a write or load, computed once per holdings shape: plans rebuilt at
        every event mostly repeat a few shapes (and periodic checkpoints the same plan)."""
        last = self._last.get(kind)
        if alive is None and last is not None and last[0] is plan:
            return last[1]
        held = self._holdings(plan, alive)
        key = (kind, frozenset(held.items()))
        seconds = self._by_shape.get(key)
        if seconds is None:
            seconds = self._by_shape[key] = cost(held)
        if alive is None:
            self._last[kind] = (plan, seconds)
        return seconds

    def checkpoint_s(self, plan: Any, alive: Container[str] | None = None) -> float:
        """A checkpoint written by `plan`'s nodes (those in `alive` when given)."""
        return self._cached("write", plan, alive, lambda held: write_cost(held, self.layer_bytes, self.storage).seconds)

    def memory_load_s(self, plan: Any) -> float:
        """Every node of `plan` receives the layers it holds over the network (from copies
        in peers' memory): the busiest node's bytes / bandwidth."""
        return self._cached(
            "memory", plan, None, lambda held: max(self._bytes(r) for r in held) / self.bandwidth if held else 0.0
        )

    def _bytes(self, ranges: Any) -> int:
        return sum(sum(self.layer_bytes[a:b]) for a, b in ranges)

    def processes(self, plan: Any, alive: Collection[str] | None = None) -> int:
        """The processes a relaunch starts: one per GPU of every node in `alive` (the nodes
        up, which the real backend restarts all of, a Varuna plan's idle nodes too), or
        of `plan`'s nodes when not given."""
        if alive is not None:
            return len(alive) * self.gpus_per_node
        nodes = getattr(plan, "nodes", None)
        if nodes is None:
            raise SimError(f"internal: a relaunch of a {type(plan).__name__}, which names no nodes")
        return len(nodes) * self.gpus_per_node

    def relaunch_s(self, plan: Any, alive: Collection[str] | None = None) -> float:
        """Start the processes afresh (`processes`) and build their groups (no state loaded)."""
        return self.costs.relaunch_s(self.processes(plan, alive))

    def restart_startup_s(self, action: Any, plan: Any, alive: Collection[str] | None = None) -> float:
        """Seconds from a restart's beginning until its processes have all started (0 for
        other actions, or without a share)."""
        if not isinstance(action, RESTARTS) or plan is None or not self.costs.restart_startup_share:
            return 0.0
        return self.costs.restart_startup_share * self.relaunch_s(plan, alive)

    def restart_s(self, plan: Any, alive: Collection[str] | None = None) -> float:
        """Relaunch (`alive`'s processes, or `plan`'s), then load the last checkpoint onto
        `plan`'s nodes."""
        load = self._cached(
            "load", plan, None, lambda held: load_cost(held, self.layer_bytes, self.storage, self.bandwidth).seconds
        )
        return self.relaunch_s(plan, alive) + load

    def pause_s(self, action: Any, plan: Any, alive: Collection[str] | None = None) -> float:
        """`plan`: the plan the action runs on, for a checkpoint the one whose nodes hold the
        state; `alive`: for a checkpoint, the nodes still there to write it (None: all); for
        a start or restart, the nodes whose processes it starts (None: the plan's)."""
        return self.design.pause_s(self, self.options, action, plan, alive)

    # the prices a design's `pause_s` reads (`designs.ActionCosts`)
    @property
    def reconfigure_overhead_s(self) -> float:
        return self.costs.reconfigure_overhead_s

    def term(self, key: str) -> Any:
        """The run's cost term `key` (`sim.cost_terms`), its row's default where not given."""
        if key not in TERMS:
            raise SimError(f"internal: no cost term {key!r} (sim.cost_terms)")
        return self.terms.get(key, TERMS[key].default)

    def copy_s(self, action: CopyLayers) -> float:
        """Layer copies: the busiest node's bytes in or out over the network."""
        return Reconfiguration(None, action.copies).copy_time_s(self.bandwidth)

    def idle_gpus(self, plan: Any) -> int:
        return plan.idle_gpus if isinstance(plan, GridPlan) else 0


RESTARTS = (Restart, RestartFromCheckpoint, RestartFromSnapshot)


def restart_startup_s(timing: Any, action: Any, plan: Any, alive: Collection[str] | None = None) -> float:
    """`timing`'s restart start-up for `action` on `plan`, relaunching `alive`'s processes
    (0 where it has none: the artifact calibration)."""
    method = getattr(timing, "restart_startup_s", None)
    return float(method(action, plan, alive)) if method is not None else 0.0


class IterationWrapper:
    """A timing that changes only what an iteration costs (`iteration` is the subclass's);
    pauses, restart start-ups and idle GPUs are the inner timing's."""

    def __init__(self, inner: Timing):
        self.inner = inner
        self.calibration = inner.calibration
        self.samples_per_iteration = inner.samples_per_iteration
        self.gpus_per_node = inner.gpus_per_node

    def pause_s(self, action: Any, plan: Any, alive: Collection[str] | None = None) -> float:
        return self.inner.pause_s(action, plan, alive)

    def restart_startup_s(self, action: Any, plan: Any, alive: Collection[str] | None = None) -> float:
        return restart_startup_s(self.inner, action, plan, alive)

    def idle_gpus(self, plan: Any) -> int:
        return self.inner.idle_gpus(plan)


class AddedIterationTime(IterationWrapper):
    """A timing whose iterations cost the inner timing's plus `extra_s(plan)` (the
    subclass's), counted as useful time; the last plan's cost is kept, since the engine
    asks for the same plan every iteration."""

    def __init__(self, inner: Timing):
        super().__init__(inner)
        self._last: tuple[Any, IterationCost] | None = None

    def extra_s(self, plan: Any) -> float:
        raise NotImplementedError

    def iteration(self, plan: Any) -> IterationCost:
        if self._last is not None and self._last[0] is plan:
            return self._last[1]
        cost = self.inner.iteration(plan)
        extra = self.extra_s(plan)
        if extra:
            cost = IterationCost(cost.total_s + extra, cost.useful_s + extra, cost.samples)
        self._last = (plan, cost)
        return cost


class ScaledPauses:
    """A timing whose pauses are scaled by kind: reconfiguration (`Reinstantiate`,
    `CopyLayers`), restart (`Start`, `Restart`, `RestartFromCheckpoint`,
    `RestartFromSnapshot`) and checkpoint.
    Iterations are untouched."""

    def __init__(self, inner: Timing, *, reconfigure: float = 1.0, restart: float = 1.0, checkpoint: float = 1.0):
        self.inner = inner
        self.calibration = inner.calibration
        self.samples_per_iteration = inner.samples_per_iteration
        self.gpus_per_node = inner.gpus_per_node
        self.factors = (
            (Checkpoint, checkpoint),
            ((Start, Restart, RestartFromCheckpoint, RestartFromSnapshot), restart),
            ((Reinstantiate, CopyLayers), reconfigure),
        )

    def iteration(self, plan: Any) -> IterationCost:
        return self.inner.iteration(plan)

    def _factor(self, action: Any) -> float:
        for kinds, factor in self.factors:
            if isinstance(action, kinds):
                return factor
        return 1.0

    def pause_s(self, action: Any, plan: Any, alive: Collection[str] | None = None) -> float:
        return self.inner.pause_s(action, plan, alive) * self._factor(action)

    def restart_startup_s(self, action: Any, plan: Any, alive: Collection[str] | None = None) -> float:
        return restart_startup_s(self.inner, action, plan, alive) * self._factor(action)

    def idle_gpus(self, plan: Any) -> int:
        return self.inner.idle_gpus(plan)
