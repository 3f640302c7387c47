"""Bamboo's policy: fixed-depth pipelines with redundant stages (DESIGN 3.6).

- Pipelines of depth D over the usable nodes in arrival order: floor(nodes / D) of them,
  the rest wait as spares. Each node also holds its successor's stage (the last node holds
  stage 0), so the plan is a grid `owners[pipeline][stage]`.
- A working node lost: its predecessor in the pipeline takes its stage over (`FailOver`)
  and training continues, slower. Losing a node that already covers a neighbour, or whose
  predecessor already covers one, is fatal: restart (from the last checkpoint when
  `fatal_rollback`; the Oobleck artifact's model keeps progress and only pays the restart).
- At an iteration end after a change, it reconfigures when spares can replace the
  overloaded nodes, when more than `overload_threshold` of the active nodes are overloaded
  (counting two per overloaded node), or when a whole new pipeline can be formed; below D
  nodes it waits. The new grid keeps nodes in their stages, as Bamboo's paper does
  (`regrid`: the pipelines with the fewest vacancies stay, vacancies and new pipelines
  take the other usable nodes in arrival order), so only the nodes that move copy layers;
  `keep_in_place=False` forms a fresh grid over every usable node instead (the Oobleck
  artifact's model of Bamboo, which the artifact calibration keeps).
- Nodes that became usable during a reconfiguration or restart join it (Bamboo's
  rendezvous takes whoever is there when it completes). Restarts form a fresh grid.
- A node lost during a reconfiguration: the grid being formed holds nothing yet (its
  copies are in flight), so the loss is judged on the grid that trained last, which still
  holds the state (`BambooMemory.held`): fatal when some stage then has no live holder,
  else the reconfiguration is formed again from that grid's holders.
- With a layout (planner calibration) a reconfiguration names its layer copies: each node
  needs its own and its successor's stage, from any surviving holder.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from planner.checkpoint_cost import Holdings, Ranges, merge
from planner.errors import PlannerError
from planner.policies.decisions import (
    Action,
    Admit,
    CheckpointSchedule,
    ClusterView,
    Continue,
    CopyLayers,
    Decision,
    Event,
    FailOver,
    NodesRemoved,
    PauseEnded,
    Reinstantiate,
    Restart,
    RestartFromCheckpoint,
    Start,
    WaitForNodes,
)
from planner.profile import ModelProfile
from planner.reconfigure import LayerCopy

from .cost import BambooLayout

DEFAULT_DEPTH = 12
DEFAULT_OVERLOAD_THRESHOLD = 0.05


@dataclass(frozen=True)
class BambooMemory:
    """What a reconfiguration remembers: the job has started, and `held` is the grid that
    trained last, whose nodes hold the state until the new grid's copies are done (truthy
    as `started`, like the plain flag the other decisions keep)."""

    started: bool
    held: BambooPlan | None = None

    def __bool__(self) -> bool:
        return self.started


def _stage_layers(stage_layers: Sequence[tuple[int, int]] | None) -> Sequence[tuple[int, int]]:
    if stage_layers is None:
        raise PlannerError("internal: a Bamboo plan's holdings need its stages' layer ranges")
    return stage_layers


@dataclass(frozen=True)
class BambooPlan:
    """`owners[p][s]`: the node computing stage s of pipeline p (its predecessor after a
    fail-over, listed in `covered`); `spares`: usable nodes outside the grid when it was
    formed."""

    depth: int
    owners: tuple[tuple[str, ...], ...]
    spares: tuple[str, ...] = ()
    covered: tuple[tuple[int, int], ...] = ()  # (pipeline, stage) run by the predecessor

    def layer_holdings(self, stage_layers: Sequence[tuple[int, int]] | None) -> Holdings:
        """Which layers its nodes hold (`planner.policies.holdings`): the node computing
        stage s of a pipeline also holds stage s + 1 (the last holds stage 0); after a
        fail-over the covering node holds both stages it computes and their successors."""
        layers = _stage_layers(stage_layers)
        d = self.depth
        covered: dict[int, list[int]] = {}
        for p, s in self.covered:
            covered.setdefault(p, []).append(s)
        plain = [merge(layers[s], layers[(s + 1) % d]) for s in range(d)]
        out: Counter = Counter()
        intact = self.num_pipelines - len(covered)
        if intact:
            for ranges in plain:
                out[ranges] += intact
        for p in covered:
            stages: dict[str, list[int]] = {}
            for s, owner in enumerate(self.owners[p]):
                stages.setdefault(owner, []).extend((s, (s + 1) % d))
            for held in stages.values():
                out[merge(*(layers[s] for s in held))] += 1
        return out

    def node_layer_ranges(self, node: str, stage_layers: Sequence[tuple[int, int]] | None) -> Ranges:
        layers = _stage_layers(stage_layers)
        d = self.depth
        return merge(*(layers[t] for _, s in self.stages_of(node) for t in (s, (s + 1) % d)))

    @property
    def num_pipelines(self) -> int:
        return len(self.owners)

    @cached_property
    def nodes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n for row in self.owners for n in row))

    @cached_property
    def _row_of(self) -> dict[str, int]:
        """node -> its pipeline (a node computes stages of one pipeline only)."""
        return {node: p for p, row in enumerate(self.owners) for node in row}

    @property
    def formed_with(self) -> int:
        """Usable nodes when the grid was formed (working + spares)."""
        return self.depth * self.num_pipelines + len(self.spares)

    # -- what the engines ask of a plan they cannot time by its shape ------------------------
    @property
    def artifact_nodes(self) -> int:
        """The node count whose row of the artifact's table prices this plan."""
        return self.formed_with

    @property
    def failed_over(self) -> bool:
        """Whether a predecessor runs a lost stage (the artifact's fail-over slowdown)."""
        return bool(self.covered)

    @property
    def cost_key(self) -> tuple:
        """Plans with the same key cost the same iteration."""
        return (self.num_pipelines, self.covered)

    def iteration_s(self, layout: BambooLayout) -> tuple[float, float]:
        """One iteration on `layout` (the job's, built once): (with fail-overs, without)."""
        return layout.iteration_s(self.num_pipelines, self.covered)

    @property
    def overloaded(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.owners[p][s] for p, s in self.covered))

    def holders(self, stage: int) -> set[str]:
        """The nodes holding `stage`'s layers: whoever computes it or the stage before it,
        in any pipeline (each node also holds its successor's stage)."""
        d = len(self.owners[0]) if self.owners else 0
        return {n for row in self.owners for n in (row[stage], row[(stage - 1) % d])}

    def stages_of(self, node: str) -> list[tuple[int, int]]:
        p = self._row_of.get(node)
        if p is None:
            return []
        return [(p, s) for s, owner in enumerate(self.owners[p]) if owner == node]

    def describe(self) -> dict:
        return {
            "nodes": len(self.nodes),
            "pipelines": self.num_pipelines,
            "depth": self.depth,
            "spares": len(self.spares),
            "covered": [list(c) for c in self.covered],
        }


def form_grid(nodes: Sequence[str], depth: int) -> BambooPlan | None:
    """floor(len / depth) pipelines over `nodes` in order; None when fewer than `depth`."""
    count = len(nodes) // depth
    if count == 0:
        return None
    owners = tuple(tuple(nodes[p * depth : (p + 1) * depth]) for p in range(count))
    return BambooPlan(depth, owners, tuple(nodes[count * depth :]))


def regrid(old: BambooPlan, ready: Sequence[str], depth: int) -> BambooPlan | None:
    """floor(len / depth) pipelines over `ready` that keep `old`'s nodes in their stages:
    the old pipelines with the fewest vacancies (a stage run by its predecessor or a node
    gone; ties: the earlier) stay in their order, their vacancies and then whole new
    pipelines take the other usable nodes in `ready`'s order, the rest are spares. None
    when fewer than `depth`."""
    count = len(ready) // depth
    if count == 0:
        return None
    alive = set(ready)
    covered = set(old.covered)
    rows = [
        row
        if not covered and all(n in alive for n in row)
        else tuple(None if (p, s) in covered or n not in alive else n for s, n in enumerate(row))
        for p, row in enumerate(old.owners)
    ]
    keep = sorted(sorted(range(len(rows)), key=lambda p: (rows[p].count(None), p))[:count])
    placed = {n for p in keep for n in rows[p] if n is not None}
    pool = iter([n for n in ready if n not in placed])
    owners = [tuple(n if n is not None else next(pool) for n in rows[p]) for p in keep]
    rest = list(pool)
    while len(owners) < count:
        owners.append(tuple(rest[:depth]))
        rest = rest[depth:]
    return BambooPlan(depth, tuple(owners), tuple(rest))


class BambooPolicy:
    """Bamboo with pipelines of `depth` stages."""

    name = "bamboo"

    def __init__(
        self,
        depth: int = DEFAULT_DEPTH,
        *,
        layout: BambooLayout | None = None,
        profile: ModelProfile | None = None,
        fatal_rollback: bool = True,
        checkpoints: CheckpointSchedule = CheckpointSchedule(),
        overload_threshold: float = DEFAULT_OVERLOAD_THRESHOLD,
        infeasible: str | None = None,
        keep_in_place: bool = True,
    ):
        if depth < 1:
            raise ValueError(f"Bamboo's pipeline depth must be >= 1, got {depth}")
        self.depth = depth
        self.layout = layout
        self.profile = profile
        self.fatal_rollback = fatal_rollback
        self.checkpoints = checkpoints
        self.overload_threshold = overload_threshold
        self._infeasible = infeasible
        self.keep_in_place = keep_in_place

    def infeasible_reason(self) -> str | None:
        if self._infeasible is not None:
            return self._infeasible
        return self.layout.oom_reason if self.layout is not None else None

    # -- entry point -------------------------------------------------------------------
    def decide(self, view: ClusterView, event: Event, current: Decision | None) -> Decision:
        reason = self.infeasible_reason()
        if reason is not None:
            return Decision(None, (WaitForNodes(0, reason),))
        plan: BambooPlan | None = current.plan if current is not None else None
        started = bool(current is not None and current.memory)
        held = current.memory.held if current is not None and isinstance(current.memory, BambooMemory) else None
        if isinstance(event, NodesRemoved):
            if held is not None and view.job_state == "reconfiguring":
                if not set(event.nodes) & (set(held.nodes) | set(plan.nodes if plan is not None else ())):
                    return Decision(plan, (Continue(),), current.memory if current is not None else True)
                return self._lost_while_reconfiguring(view, event, held)
            return self._on_removal(view, event, plan, started)
        if plan is None:
            return self._form(view, None, started, restart=started)
        if isinstance(event, PauseEnded) and event.kind != "checkpointing":
            known = set(plan.nodes) | set(plan.spares)
            joined = tuple(n for n in view.ready if n not in known)
            if joined:
                return Decision(self._grid(view.ready, plan), (Admit(joined),), True)
            return Decision(plan, (Continue(),), True)
        return self._check(view, plan, started)

    # -- removals ----------------------------------------------------------------------
    def _on_removal(self, view: ClusterView, event: NodesRemoved, plan: BambooPlan | None, started: bool) -> Decision:
        if plan is None:
            return Decision(None, (Continue(),), started)
        working = plan._row_of
        hit = [n for n in event.nodes if n in working]
        if not hit:
            return Decision(plan, (Continue(),), started)
        if view.job_state in ("reconfiguring", "restarting"):
            # a node of the grid being formed left: form it again, the pause starts over
            return self._form(view, plan, started, restart=view.job_state == "restarting" and started)
        owners = [list(row) for row in plan.owners]
        covered = list(plan.covered)
        actions = []
        taken: dict[str, list[tuple[int, int]]] = {}  # slots handed to a predecessor so far

        def load(n: str) -> list[tuple[int, int]]:
            # a node's slots now: a lost node's slots go to its predecessor once, after its loss
            return plan.stages_of(n) + taken.get(n, [])

        for node in hit:
            mine = load(node)
            p, s = mine[0]
            pred = owners[p][(s - 1) % self.depth]
            pred_load = len(load(pred))
            if len(mine) > 1 or pred == node or pred_load > 1:
                why = f"lost {node}, " + (
                    "which covered a neighbour" if len(mine) > 1 else f"whose predecessor {pred} already covers a stage"
                )
                return self._fatal(view, why, started)
            owners[p][s] = pred
            taken.setdefault(pred, []).append((p, s))
            covered.append((p, s))
            actions.append(FailOver(node, pred, (p, s)))
        new = BambooPlan(self.depth, tuple(tuple(r) for r in owners), plan.spares, tuple(sorted(covered)))
        return Decision(new, tuple(actions), started, check_at_iteration_end=True)

    def _lost_while_reconfiguring(self, view: ClusterView, event: NodesRemoved, held: BambooPlan) -> Decision:
        """A node lost while a reconfiguration from `held` (the grid that trained last, whose
        nodes hold the state) is under way: fatal when a stage has no live holder left in
        `held`, else the reconfiguration formed again from `held`."""
        alive = set(view.ready)
        gone = sorted(n for n in event.nodes if n in set(held.nodes))
        bare = [t for t in range(self.depth) if not held.holders(t) & alive]
        if bare:
            return self._fatal(view, f"lost {gone} while reconfiguring: stage {bare[0]} has no live holder", True)
        decision = self._form(view, held, True, restart=False, why=f"lost {gone} while reconfiguring")
        if decision.plan is not None and any(isinstance(a, Reinstantiate) for a in decision.actions):
            return replace(decision, memory=BambooMemory(True, held))
        return decision

    def _fatal(self, view: ClusterView, why: str, started: bool) -> Decision:
        grid = form_grid(view.ready, self.depth)
        if grid is None:
            return Decision(None, (WaitForNodes(self.depth, why, rollback=self.fatal_rollback),), started)
        action = RestartFromCheckpoint(why) if self.fatal_rollback else Restart(why)
        return Decision(grid, (action,), started, notes=(why,))

    # -- arrivals and boundaries ---------------------------------------------------------
    def _check(self, view: ClusterView, plan: BambooPlan, started: bool) -> Decision:
        working = set(plan.nodes)
        overloaded = len(plan.overloaded)
        waiting = sum(1 for n in view.ready if n not in working)
        active = len(working)
        reasons = []
        if overloaded and waiting >= overloaded:
            reasons.append(f"{waiting} spare(s) can replace {overloaded} overloaded node(s)")
        if overloaded and 2 * overloaded / active > self.overload_threshold:
            reasons.append(f"{overloaded} overloaded of {active} active nodes")
        if (active + waiting) // self.depth > plan.num_pipelines:
            reasons.append("a new pipeline can be formed")
        if not reasons:
            return Decision(plan, (Continue(),), started)
        return self._form(view, plan, started, restart=False, why="; ".join(reasons))

    def _grid(self, ready: Sequence[str], old: BambooPlan | None) -> BambooPlan | None:
        """The grid a reconfiguration forms from `old` (in place unless told otherwise)."""
        if old is None or not self.keep_in_place:
            return form_grid(ready, self.depth)
        return regrid(old, ready, self.depth)

    def _form(
        self, view: ClusterView, old: BambooPlan | None, started: bool, *, restart: bool, why: str = ""
    ) -> Decision:
        grid = self._grid(view.ready, None if restart else old)
        if grid is None:
            needed = self.depth
            return Decision(
                None,
                (
                    WaitForNodes(
                        needed,
                        why or f"{len(view.ready)} usable nodes, a pipeline needs {needed}",
                        rollback=restart and self.fatal_rollback,
                    ),
                ),
                started,
            )
        if old is None or not started:
            if not started:
                return Decision(grid, (Start(),), False)
            action: Action = RestartFromCheckpoint(why) if self.fatal_rollback else Start()
            return Decision(grid, (action,), True)
        if restart:
            action = RestartFromCheckpoint(why) if self.fatal_rollback else Restart(why)
            return Decision(grid, (action,), True)
        actions: list[Action] = [Reinstantiate(why)]
        copies = self.copies(old, grid)
        if copies is None:
            return Decision(grid, (RestartFromCheckpoint("a stage has no surviving copy"),), True)
        if copies:
            actions.append(CopyLayers(copies))
        return Decision(grid, tuple(actions), BambooMemory(True, old))

    # -- copy plans ----------------------------------------------------------------------
    def copies(self, old: BambooPlan, new: BambooPlan) -> tuple[LayerCopy, ...] | None:
        """Layers each node of `new` lacks (its stage and its successor's) and who sends
        them; () without a layout, None when some layer has no surviving holder."""
        if self.layout is None or self.profile is None:
            return ()
        ranges = self.layout.stage_layers
        d = self.depth

        def stages(plan: BambooPlan, node: str) -> set[int]:
            return {t for _, s in plan.stages_of(node) for t in (s, (s + 1) % d)}

        # a node holds stages of its own pipeline only, so a row kept as it was needs nothing
        old_rows = set(old.owners)
        needs: list[tuple[str, list[int]]] = []
        for row in new.owners:
            if row in old_rows:
                continue
            for node in dict.fromkeys(row):
                lacking = stages(new, node) - stages(old, node)
                if lacking:  # layers partition by stage: the layers of the stages it lacks
                    needs.append((node, sorted(l for t in lacking for l in range(*ranges[t]))))
        if not needs:
            return ()
        alive = set(new.nodes) | set(new.spares)
        stage_of = self.layout.stage_of_layer()
        rank = {n: i for i, n in enumerate(old.nodes)}
        # every layer of a stage has the same holders: one heap per stage (built when first
        # needed) of (bytes sent, order in the old plan, holder), stale entries skipped when
        # popped. Stage t is held by whoever computes t or t - 1 in a pipeline.
        heaps: dict[int, list[tuple[int, int, str]]] = {}
        sent: dict[str, int] = {}

        def heap_of(t: int) -> list[tuple[int, int, str]]:
            if t not in heaps:
                heaps[t] = sorted((sent.get(n, 0), rank[n], n) for n in old.holders(t) & alive)
            return heaps[t]

        requests: dict[tuple[str, str], list[int]] = {}
        layer_bytes = self.profile.layers
        for node, layers in needs:
            for layer in layers:
                heap = heap_of(stage_of[layer])
                src = _least_loaded(heap, sent)
                if src is None:
                    return None
                order = heap[0][1]
                sent[src] = sent.get(src, 0) + layer_bytes[layer].copy_bytes
                for stage in stages(old, src):
                    if stage in heaps:
                        heapq.heappush(heaps[stage], (sent[src], order, src))
                requests.setdefault((node, src), []).append(layer)
        return tuple(
            LayerCopy(
                dst,
                src,
                tuple(ls),
                sum(layer_bytes[l].param_bytes for l in ls),
                sum(layer_bytes[l].optimizer_bytes for l in ls),
            )
            for (dst, src), ls in requests.items()
        )


def _least_loaded(heap: list[tuple[int, int, str]] | None, sent: dict[str, int]) -> str | None:
    """The holder that has sent the fewest bytes so far (then the earliest in the old plan):
    the same choice as scanning every holder. Entries pushed before the holder's last send
    are stale and dropped here; each send pushes one entry per stage its sender holds."""
    while heap:
        count, _, node = heap[0]
        if count == sent.get(node, 0):
            return node
        heapq.heappop(heap)
    return None
