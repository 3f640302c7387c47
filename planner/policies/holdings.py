"""Which layers each node of a plan holds, as `planner.checkpoint_cost.Holdings`.

Computed from the plan's shape, not node by node, so a 12,500-node plan costs what its
distinct templates (or a design's stage patterns) cost. Oobleck's `ExecutionPlan` is the
planner's own: node i of a pipeline holds the stages its template puts there, and
pipelines of the same template hold the same. A design's own plan says what its nodes hold
through `HeldLayers` (the grid plans of Varuna, Parcae and ReCycle, `grid.GridPlan`; Bamboo's `BambooPlan`).

`node_ranges(plan, node)` gives one node's entry, for dropping nodes that are gone
(`checkpoint_cost.restrict`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Sequence
from typing import Any, Protocol, runtime_checkable

from ..checkpoint_cost import Holdings, Ranges, as_ranges, merge, without
from ..errors import PlannerError
from ..plan import ExecutionPlan


@runtime_checkable
class HeldLayers(Protocol):
    """A plan that knows which layers its nodes hold (`stage_layers`: the layer range of
    each stage, for plans that do not carry it)."""

    def layer_holdings(self, stage_layers: Sequence[tuple[int, int]] | None) -> Holdings: ...

    def node_layer_ranges(self, node: str, stage_layers: Sequence[tuple[int, int]] | None) -> Ranges: ...


def holdings(
    plan: Any, stage_layers: Sequence[tuple[int, int]] | None = None, alive: Container[str] | None = None
) -> Holdings:
    """The plan's holdings (Bamboo needs its layout's `stage_layers`), less the nodes
    not in `alive` when given."""
    if isinstance(plan, ExecutionPlan):
        full = _execution(plan)
    elif isinstance(plan, HeldLayers):
        full = plan.layer_holdings(stage_layers)
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
    if isinstance(plan, HeldLayers):
        return plan.node_layer_ranges(node, stage_layers)
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
