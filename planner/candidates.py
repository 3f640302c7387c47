"""Cheaper regroupings after a removal, for reconfiguration with a throughput tolerance.

Oobleck's rule 1 switches every pipeline that lost nodes to the template of its new size,
and two templates of neighbouring sizes cut the layers in different places, so most of the
pipeline's nodes receive new layers. A refill avoids that: one donor pipeline gives as many
nodes as the shortened pipelines lost, the shortened pipelines keep their templates (only
the lost positions need filling) and the donor alone switches template. When the donor is
long (a 98-node pipeline of a 98-layer model holds about a layer per node) its switch is
cheap and the whole reconfiguration copies close to the lower bound, at the price of the
donor's slightly slower template.

Which donor nodes move where is chosen together with every node's position: one exact
assignment (`assignment.arrange`) over the pool of the shortened pipelines' survivors and
the donor's nodes onto all their positions. Donors of equal size are interchangeable up to
names, so one per size is tried (the last, as Oobleck's borrowing rule picks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .assignment import HeldLayers, arrange, positions_of
from .plan import ExecutionPlan
from .templates import PipelineTemplate


@dataclass(frozen=True)
class Proposal:
    """A regrouping to evaluate: node groups in pipeline order, and what it is."""

    label: str
    groups: tuple[tuple[str, ...], ...]


def refill_proposals(
    old: ExecutionPlan,
    removed: set[str],
    n0: int,
    template: Callable[[int], PipelineTemplate | None],
    held: HeldLayers,
    layer_bytes: np.ndarray,
) -> list[Proposal]:
    """One refill per donor size (see the module docstring); none when no pipeline lost
    nodes, a pipeline lost all of them, or no donor can spare enough and keep a template."""
    short = [i for i, p in enumerate(old.pipelines) if any(n in removed for n in p.nodes)]
    if not short:
        return []
    survivors = {i: [n for n in old.pipelines[i].nodes if n not in removed] for i in short}
    if any(not nodes for nodes in survivors.values()):
        return []
    needed = sum(len(old.pipelines[i].nodes) - len(survivors[i]) for i in short)
    donors: dict[int, int] = {}  # size -> the last pipeline of that size
    for i, pipe in enumerate(old.pipelines):
        if i not in survivors:
            donors[len(pipe.nodes)] = i
    proposals = []
    for size, donor in sorted(donors.items()):
        shrunk = template(size - needed) if size - needed >= n0 else None
        if shrunk is None:
            continue
        pool = [n for i in short for n in survivors[i]] + list(old.pipelines[donor].nodes)
        needs = [layers for i in short for layers in positions_of(old.pipelines[i].template)] + list(
            positions_of(shrunk)
        )
        placed = arrange(needs, pool, held, layer_bytes).nodes
        groups: dict[int, tuple[str, ...]] = {}
        start = 0
        for i in [*short, donor]:
            length = len(old.pipelines[i].nodes) - (needed if i == donor else 0)
            groups[i] = placed[start : start + length]
            start += length
        ordered = tuple(groups.get(i, p.nodes) for i, p in enumerate(old.pipelines))
        label = f"refill from pipeline {donor} ({size} -> {size - needed} nodes)"
        proposals.append(Proposal(label, ordered))
    return proposals
