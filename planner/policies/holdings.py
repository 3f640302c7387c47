"""Which layers each node of a plan holds, as `planner.checkpoint_cost.Holdings`.

Computed from the plan's shape, not node by node, so a 12,500-node plan costs what its
distinct templates, Varuna stage patterns or Bamboo pipelines cost:

- Oobleck (`ExecutionPlan`): node i of a pipeline holds the stages its template puts there;
  pipelines of the same template hold the same.
- Varuna (`VarunaPlan`): node j runs workers j g .. j g + g - 1 (worker k = w D + s is stage
  s), so it holds the union of those workers' stages; the pattern repeats every
  D / gcd(D, g) nodes.
- Bamboo (`BambooPlan`): the node computing stage s of a pipeline also holds stage s + 1
  (the last holds stage 0); after a fail-over the covering node holds both stages it
  computes and their successors.

`node_ranges(plan, node)` gives one node's entry, for dropping nodes that are gone
(`checkpoint_cost.restrict`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Sequence
from functools import lru_cache
from math import gcd
from typing import Any

from ..checkpoint_cost import Holdings, Ranges, as_ranges, merge, without
from ..errors import PlannerError
from ..plan import ExecutionPlan
from .bamboo import BambooPlan
from .varuna import VarunaPlan
from .varuna_search import VarunaConfig


def holdings(
    plan: Any, stage_layers: Sequence[tuple[int, int]] | None = None, alive: Container[str] | None = None
) -> Holdings:
    """The plan's holdings (Bamboo needs its layout's `stage_layers`), less the nodes
    not in `alive` when given."""
    if isinstance(plan, ExecutionPlan):
        full = _execution(plan)
    elif isinstance(plan, VarunaPlan):
        full = _varuna(plan)
    elif isinstance(plan, BambooPlan):
        if stage_layers is None:
            raise PlannerError("internal: Bamboo holdings need the layout's stage layers")
        full = _bamboo(plan, stage_layers)
    else:
        raise PlannerError(f"internal: no layer holdings for a {type(plan).__name__}")
    if alive is None:
        return full
    dead = [n for n in plan.nodes if n not in alive]
    return without(full, (node_ranges(plan, n, stage_layers) for n in dead)) if dead else full


def node_ranges(plan: Any, node: str, stage_layers: Sequence[tuple[int, int]] | None = None) -> Ranges:
    """The layer ranges `node` holds in `plan`."""
    if isinstance(plan, ExecutionPlan):
        return as_ranges(plan.node_layers[node])
    if isinstance(plan, VarunaPlan):
        return _varuna_node(plan, plan.nodes.index(node))
    if isinstance(plan, BambooPlan):
        if stage_layers is None:
            raise PlannerError("internal: a Bamboo plan's holdings need its stages' layer ranges")
        d = plan.depth
        stages = [t for _, s in plan.stages_of(node) for t in (s, (s + 1) % d)]
        return merge(*(stage_layers[s] for s in stages))
    raise PlannerError(f"internal: no layer holdings for a {type(plan).__name__}")


def _execution(plan: ExecutionPlan) -> Holdings:
    per_template: dict[int, tuple[Any, int]] = {}
    for p in plan.pipelines:
        template, count = per_template.get(id(p.template), (p.template, 0))
        per_template[id(p.template)] = (template, count + 1)
    out: Counter = Counter()
    for template, count in per_template.values():
        by_node: dict[int, list[tuple[int, int]]] = {}
        for stage in template.stages:
            by_node.setdefault(stage.node_index, []).append((stage.first_layer, stage.end_layer))
        for ranges in by_node.values():
            out[merge(*ranges)] += count
    return out


def _varuna_node(plan: VarunaPlan, j: int) -> Ranges:
    c = plan.config
    if plan.given_stage_nodes is not None:  # a placement other than `place`'s
        node = plan.nodes[j]
        return merge(*(c.stage_layers[s] for s, holders in enumerate(plan.given_stage_nodes) if node in holders))
    g = _gpus_per_node(plan)
    workers = range(j * g, min((j + 1) * g, c.depth * c.width))
    return merge(*(c.stage_layers[k % c.depth] for k in workers))


def _gpus_per_node(plan: VarunaPlan) -> int:
    g, rest = divmod(plan.config.depth * plan.config.width + plan.idle_gpus, len(plan.nodes))
    if rest:
        raise PlannerError("internal: a Varuna plan whose GPUs do not divide among its nodes")
    return g


def _varuna(plan: VarunaPlan) -> Holdings:
    if plan.given_stage_nodes is not None:
        return Counter(_varuna_node(plan, j) for j in range(len(plan.nodes)))
    return _varuna_shape(plan.config, len(plan.nodes), _gpus_per_node(plan))


@lru_cache(maxsize=256)
def _varuna_shape(c: VarunaConfig, used: int, g: int) -> Holdings:
    """Depends on the configuration and node count only: every event re-places Varuna."""
    plan = VarunaPlan(c, tuple(range(used)), None, used * g - c.num_gpus)  # type: ignore[arg-type]
    full = c.depth * c.width // g  # nodes whose g GPUs all run a worker
    period = c.depth // gcd(c.depth, g)
    out: Counter = Counter()
    for j in range(min(period, full)):
        out[_varuna_node(plan, j)] += len(range(j, full, period))
    for j in range(full, used):
        out[_varuna_node(plan, j)] += 1
    return out


def _bamboo(plan: BambooPlan, stage_layers: Sequence[tuple[int, int]]) -> Holdings:
    d = plan.depth
    covered: dict[int, list[int]] = {}
    for p, s in plan.covered:
        covered.setdefault(p, []).append(s)
    plain = [merge(stage_layers[s], stage_layers[(s + 1) % d]) for s in range(d)]
    out: Counter = Counter()
    intact = plan.num_pipelines - len(covered)
    if intact:
        for ranges in plain:
            out[ranges] += intact
    for p in covered:
        stages: dict[str, list[int]] = {}
        for s, owner in enumerate(plan.owners[p]):
            stages.setdefault(owner, []).extend((s, (s + 1) % d))
        for held in stages.values():
            out[merge(*(stage_layers[s] for s in held))] += 1
    return out
