"""Parcae's policy: forecast availability, choose the grid that maximises liveput, migrate early.

Duan et al., "Parcae: Proactive, Liveput-Optimized DNN Training on Preemptible Instances",
NSDI'24 (sections 3-5). The plan is a (depth D, width W) grid of uniform stages (a
`GridPlan`: D stages cut at layer boundaries, W data-parallel replicas, the largest
microbatch that fits), because Parcae's shapes are exactly (data-parallel, pipeline) pairs.

- Clock: time is cut into intervals of `interval_s` from the first decision. The policy
  records the live node count it saw (usable + starting) at the end of each interval; at
  the first iteration end of each interval (the engine's `wake_at_s`) it forecasts the next
  `horizon` counts from the last `window` ones (`parcae_predict`, ARIMA(1,1,0)). It sees the
  trace only through the events the engine delivers: never what comes later.
- Liveput: a dynamic programme over the current interval and the `horizon` forecast ones
  picks a shape per interval (fitting that interval's count) that maximises the expected
  committed samples: throughput x (interval - migration from the previous shape - expected
  hits x cost of a hit). Expected hits in interval k: the forecast removals at its end,
  r = max(0, c_k - c_{k+1}), times the shape's share of the live nodes (victims are random;
  Parcae samples them by Monte Carlo, the expectation is the same). A hit costs half an
  iteration plus an intra-stage repair (reconfiguration + one stage copied from a peer
  replica), or, with one replica (W = 1: the stage is gone), `restart_estimate_s`.
  Migration costs are the copies themselves (`parcae_migrate`): a reconfiguration plus the
  busiest node's bytes over the network, so staying in the same depth (intra-stage: new
  replicas copy one stage) is cheaper than changing it (inter-stage: every node re-cut).
  Candidates per count: the `shapes_per_count` fastest widest grids (one per depth), for
  every count in the forecast, plus the current shape. The first interval's choice is taken.
- Proactive: when the choice differs from the running shape, it migrates at once
  (`Reinstantiate`, `CopyLayers`), i.e. ahead of a forecast shrink or growth.
- Reactive: a working node lost with every stage still held by a live replica: migrate from
  the survivors to the liveput choice for the usable nodes (a spare takes the lost place
  when that pays); a stage with no live replica: restart from the last checkpoint; too few
  nodes: checkpoint from the survivors and wait.
- A wait with enough usable nodes (the forecast, fed the counts of a mass departure,
  prefers waiting) names the next interval as the time to be asked again (`wake_at_s`): the
  forecast then has one more count, and the wait ends once it stops preferring it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from designs.varuna.search import VarunaSearch
from planner.policies.decisions import (
    Checkpoint,
    CheckpointSchedule,
    ClusterView,
    Continue,
    CopyLayers,
    Decision,
    Event,
    IterationEnd,
    NodesRemoved,
    PauseEnded,
    Reinstantiate,
    RestartFromCheckpoint,
    Start,
    WaitForNodes,
)
from planner.policies.grid import Grid, GridPlan, place
from planner.profile import LayerProfile
from planner.reconfigure import Reconfiguration

from .migrate import arrange, copies, node_layers
from .predict import forecast


@dataclass(frozen=True)
class ParcaeSettings:
    """The policy's knobs (the design's options; see designs/parcae/ for their sources)."""

    interval_s: float = 60.0
    horizon: int = 10
    window: int = 10
    grow_bound: int = 3
    shapes_per_count: int = 3
    restart_estimate_s: float = 120.0


@dataclass(frozen=True)
class ParcaeMemory:
    """`base`: the plan whose nodes hold the model state; `counts`: the live count seen at
    the end of each completed interval (the last `window`), `last_k` the interval of the
    last observation and `last_count` what it saw; `saving`: the plan whose survivors write
    the checkpoint taken before a wait (None: none under way)."""

    base: GridPlan | None = None
    started: bool = False
    t0_s: float = 0.0
    counts: tuple[int, ...] = ()
    last_k: int = 0
    last_count: int = 0
    forecast: tuple[int, ...] = field(default=())
    saving: GridPlan | None = None


class ParcaePolicy:
    name = "parcae"

    def __init__(
        self,
        search: VarunaSearch,
        layers: Sequence[LayerProfile],
        *,
        bandwidth_bytes_per_s: float,
        gpus_per_node: int,
        checkpoints: CheckpointSchedule,
        reconfigure_pause_s: float,
        max_nodes: int,
        settings: ParcaeSettings = ParcaeSettings(),
        cache: dict | None = None,
    ):
        self.search, self.layers, self.g = search, tuple(layers), gpus_per_node
        self.bandwidth = bandwidth_bytes_per_s
        self.checkpoints = checkpoints
        self.reconfigure_s = reconfigure_pause_s
        self.max_nodes = max_nodes
        self.settings = settings
        self.cache: dict = {} if cache is None else cache  # shapes, migrations, liveput answers
        min_gpus = search.min_gpus(max_nodes * gpus_per_node)
        self.min_nodes = math.ceil(min_gpus / gpus_per_node) if min_gpus is not None else None

    def infeasible_reason(self) -> str | None:
        if self.min_nodes is None:
            return "out of memory: no (depth, width) grid fits"
        return None

    # -- the model -------------------------------------------------------------------------
    def nodes_of(self, config: Grid) -> int:
        return -(-config.num_gpus // self.g)

    def shapes_for(self, count: int) -> tuple[Grid, ...]:
        """The fastest widest grid per depth on `count` nodes, best `shapes_per_count`."""
        key = ("shapes", count)
        if key not in self.cache:
            found = []
            for depth in self.search.depths:
                width = count * self.g // depth
                config = self.search.config(depth, width) if width >= 1 else None
                if config is not None:
                    found.append(config)
            found.sort(key=lambda c: (c.iteration_time_s, c.num_gpus, c.depth))
            self.cache[key] = tuple(found[: self.settings.shapes_per_count])
        return self.cache[key]

    def copy_s(self, action: CopyLayers) -> float:
        return Reconfiguration(None, action.copies).copy_time_s(self.bandwidth)

    def migrate_s(self, old: Grid | None, new: Grid) -> float:
        """What moving from grid `old` to `new` costs (the same copies the policy would
        ask for, on the first nodes); from no grid: a restart."""
        if old is None:
            return self.settings.restart_estimate_s
        if old == new:
            return 0.0
        key = ("migrate", old, new)
        if key not in self.cache:
            names = [str(i) for i in range(max(self.nodes_of(old), self.nodes_of(new)))]
            before = place(old, names, self.g)
            after = arrange(new, names, node_layers(before), self.g)
            assert after is not None  # internal: `names` has room for both
            moved = copies(before, after, self.layers, set(names)) or ()
            self.cache[key] = self.reconfigure_s + self.copy_s(CopyLayers(moved))
        return self.cache[key]

    def hit_s(self, config: Grid) -> float:
        """Expected cost of losing one working node of `config`."""
        key = ("hit", config)
        if key not in self.cache:
            if config.width < 2:
                seconds = self.settings.restart_estimate_s
            else:
                biggest = max(sum(l.copy_bytes for l in self.layers[a:e]) for a, e in config.stage_layers)
                seconds = config.iteration_time_s / 2 + self.reconfigure_s + biggest / self.bandwidth
            self.cache[key] = seconds
        return self.cache[key]

    def liveput(self, current: Grid | None, counts: tuple[int, ...]) -> Grid | None:
        """The first interval's shape of the best plan over `counts` (now, then forecast)."""
        key = ("liveput", current, counts)
        if key in self.cache:
            return self.cache[key]
        interval = self.settings.interval_s
        pool: dict[Grid, None] = {}
        if current is not None:
            pool[current] = None
        for c in dict.fromkeys(counts):
            pool.update(dict.fromkeys(self.shapes_for(c)))
        shapes = list(pool)
        rate = {s: 1.0 / s.iteration_time_s for s in shapes}
        # best[s] = (value, first shape) after interval k; None = no shape (waiting)
        best: dict[Grid | None, tuple[float, Grid | None]] = {current: (0.0, None)}
        for k, c in enumerate(counts):
            removed = max(0, c - counts[k + 1]) if k + 1 < len(counts) else 0
            step: dict[Grid | None, tuple[float, Grid | None]] = {}
            fits = [s for s in shapes if self.nodes_of(s) <= c]
            for prev, (value, first) in best.items():
                options: list[Grid | None] = [None, *fits]
                for s in options:
                    if s is None:
                        gain = 0.0
                    else:
                        lost = removed * self.nodes_of(s) / max(c, 1) * self.hit_s(s)
                        gain = rate[s] * max(0.0, interval - self.migrate_s(prev, s) - lost)
                    total = value + gain
                    head = s if k == 0 else first
                    if s not in step or total > step[s][0] * (1 + 1e-12) + 1e-12:
                        step[s] = (total, head)
            best = step
        answer = max(best.values(), key=lambda v: v[0])[1] if best else None
        self.cache[key] = answer
        return answer

    # -- observations --------------------------------------------------------------------
    def _observe(self, view: ClusterView, memory: ParcaeMemory | None) -> ParcaeMemory:
        live = len(view.ready) + len(view.starting)
        if memory is None:
            return ParcaeMemory(t0_s=view.time_s, last_count=live)
        k = int((view.time_s - memory.t0_s) // self.settings.interval_s)
        counts = memory.counts
        if k > memory.last_k:
            fill = min(k - memory.last_k, self.settings.window)
            counts = (counts + (memory.last_count,) * fill)[-self.settings.window :]
        return replace(memory, counts=counts, last_k=max(k, memory.last_k), last_count=live)

    def _counts(self, view: ClusterView, memory: ParcaeMemory) -> tuple[int, ...]:
        history = (*memory.counts, memory.last_count)
        ahead = forecast(history, self.settings.horizon, upper=self.max_nodes, grow_bound=self.settings.grow_bound)
        return (len(view.ready), *ahead)

    def _next_tick_s(self, memory: ParcaeMemory) -> float:
        return memory.t0_s + (memory.last_k + 1) * self.settings.interval_s

    # -- decisions -----------------------------------------------------------------------
    def decide(self, view: ClusterView, event: Event, current: Decision | None) -> Decision:
        plan: GridPlan | None = current.plan if current is not None else None
        memory = self._observe(view, current.memory if current is not None else None)
        reason = self.infeasible_reason()
        if reason is not None:
            return Decision(None, (WaitForNodes(0, reason),), memory)
        if isinstance(event, NodesRemoved):
            return self._on_removal(view, event, plan, memory)
        if isinstance(event, PauseEnded) and plan is not None:
            memory = replace(memory, base=plan, started=True, saving=None)
        if plan is None:
            return self._launch(view, memory)
        if isinstance(event, IterationEnd):
            return self._tick(view, plan, memory)
        return Decision(plan, (Continue(),), memory, wake_at_s=self._next_tick_s(memory))

    def _tick(self, view: ClusterView, plan: GridPlan, memory: ParcaeMemory) -> Decision:
        counts = self._counts(view, memory)
        memory = replace(memory, forecast=counts[1:])
        best = self.liveput(plan.config, counts)
        if best == plan.config or best is None or memory.base is None:
            quiet = len(set((*memory.counts, memory.last_count))) == 1
            return Decision(plan, (Continue(),), memory, wake_at_s=None if quiet else self._next_tick_s(memory))
        why = f"proactive: {plan.config.depth}x{plan.config.width} -> {best.depth}x{best.width}, forecast {list(counts[1:])}"
        return self._migrate(view, memory.base, best, memory, why)

    def _migrate(self, view: ClusterView, base: GridPlan, config: Grid, memory: ParcaeMemory, why: str) -> Decision:
        ready = set(view.ready)
        held = {n: v for n, v in node_layers(base).items() if n in ready}
        order = [n for n in base.nodes if n in ready] + [n for n in view.ready if n not in held]
        new = arrange(config, order, held, self.g)
        moved = copies(base, new, self.layers, ready) if new is not None else None
        if new is None or moved is None:
            return self._launch(view, replace(memory, base=None, started=True), note=f"{why}: state lost")
        actions = (Reinstantiate(why), CopyLayers(moved)) if moved else (Reinstantiate(why),)
        return Decision(new, actions, memory, wake_at_s=self._next_tick_s(memory), notes=(why,))

    def _on_removal(
        self, view: ClusterView, event: NodesRemoved, plan: GridPlan | None, memory: ParcaeMemory
    ) -> Decision:
        saving = memory.saving
        gone = sorted(set(event.nodes) & set(saving.nodes)) if saving is not None else []
        if saving is not None and gone and view.iterations_done > view.checkpoint_iterations:
            # a node lost while the checkpoint before a wait is written: the survivors write
            # it again while every stage has a live replica (as Varuna's); else it is lost
            if saving.stages_without_holder(set(view.ready)):
                why = f"lost {gone} while checkpointing: a stage has no live replica, back to the last checkpoint"
                return self._launch(view, replace(memory, base=None, started=True), note=why)
            why = f"lost {gone} while checkpointing before a wait"
            wait = WaitForNodes(self.min_nodes or 0, f"{why}: too few nodes")
            return Decision(None, (Checkpoint(why), wait), memory)
        base = memory.base
        involved = set(plan.nodes if plan is not None else ()) | set(base.nodes if base is not None else ())
        lost = sorted(set(event.nodes) & involved)
        if not lost:
            return Decision(plan, (Continue(),), memory, wake_at_s=self._next_tick_s(memory))
        if base is None or view.job_state == "restarting":
            return self._launch(view, replace(memory, base=None))
        ready = set(view.ready)
        if base.stages_without_holder(ready):
            why = f"lost {lost}: a stage has no live replica, back to the last checkpoint"
            return self._launch(view, replace(memory, base=None, started=True), note=why)
        counts = self._counts(view, memory)
        best = self.liveput(base.config, counts)
        why = f"lost {lost}: migrate from the surviving replicas"
        if best is None:
            saves = (Checkpoint(why),) if view.iterations_done > view.checkpoint_iterations else ()
            wait = WaitForNodes(self.min_nodes or 0, f"{why}: too few nodes")
            return Decision(
                None, (*saves, wait), replace(memory, base=None, started=True, saving=base if saves else None)
            )
        return self._migrate(view, base, best, replace(memory, forecast=counts[1:]), why)

    def _launch(self, view: ClusterView, memory: ParcaeMemory, note: str = "") -> Decision:
        counts = self._counts(view, memory)
        config = self.liveput(None, counts)
        restart = memory.started
        if config is None:
            why = note or f"{len(view.ready)} usable nodes, Parcae needs {self.min_nodes}"
            # enough nodes but a forecast that prefers waiting: ask again at the next interval,
            # when the forecast has one more count (no event may come while nothing changes)
            enough = self.min_nodes is not None and len(view.ready) >= self.min_nodes
            wake = self._next_tick_s(memory) if enough else None
            return Decision(None, (WaitForNodes(self.min_nodes or 0, why, rollback=restart),), memory, wake_at_s=wake)
        plan = place(config, view.ready, self.g)
        action = RestartFromCheckpoint(note) if restart else Start()
        return Decision(plan, (action,), replace(memory, base=None, saving=None), wake_at_s=self._next_tick_s(memory))
