"""In-memory copies a generation takes while it trains (GEMINI-style), as both sides read them.

The design names, per node, the nodes that hold a copy of its state (`designs.MemoryCopies`:
the node itself and its peers). The backend runs one process per GPU, so the coordinator
turns that into a rank-level `CopyOrder`: rank r (on node X) sends each of its layers to
one rank on every peer node of X (the rank with the same position among that node's
ranks, wrapping, so a node's GPUs share the receiving), and keeps its own copy in X's
memory. Pure Python and JSON-ready: it travels in the directive.

`copy_transfers` is the one global order of a copy's messages (tag = position), the same
on every rank; `layer_holders` says which nodes hold each layer once a copy is complete
(what the coordinator restores from).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .layout import Layout


@dataclass(frozen=True)
class CopyOrder:
    """After every `every` committed steps, rank r sends its layers to the ranks
    `sends[r]` (on other nodes) and keeps its own copy in its node's memory."""

    every: int
    sends: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError(f"in-memory copies need an interval of >= 1 step, got {self.every}")

    def to_dict(self) -> dict[str, Any]:
        return {"every": self.every, "sends": [list(s) for s in self.sends]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CopyOrder:
        return cls(int(data["every"]), tuple(tuple(int(r) for r in s) for s in data["sends"]))


@dataclass(frozen=True)
class CopyTransfer:
    """Rank `src` sends its copy of `layer` to rank `dst` (`tag`: the position in the order)."""

    tag: int
    layer: int
    src: int
    dst: int


def copy_order(layout: Layout, every: int, holders: Mapping[str, frozenset[str]]) -> CopyOrder:
    """The rank-level order for `holders` (node -> the nodes holding its state); holder
    nodes outside the layout get nothing (they run no rank that could receive)."""
    ranks_on: dict[str, list[int]] = {}
    for stage in layout.stages:
        ranks_on.setdefault(stage.node, []).append(stage.rank)
    sends = []
    for stage in layout.stages:
        position = ranks_on[stage.node].index(stage.rank)
        peers = sorted(holders.get(stage.node, frozenset()) - {stage.node})
        sends.append(tuple(ranks_on[p][position % len(ranks_on[p])] for p in peers if p in ranks_on))
    return CopyOrder(every, tuple(sends))


def copy_transfers(order: CopyOrder, layout: Layout) -> tuple[CopyTransfer, ...]:
    """Every message of one copy, in the same order on every rank."""
    if len(order.sends) != layout.world_size:
        raise ValueError(f"a copy order for {len(order.sends)} ranks, the layout has {layout.world_size}")
    items = [(src, dst, layer) for src in range(layout.world_size) for dst in order.sends[src]
             for layer in layout.stages[src].layers]  # fmt: skip
    return tuple(CopyTransfer(tag, layer, src, dst) for tag, (src, dst, layer) in enumerate(items))


def layer_holders(order: CopyOrder, layout: Layout) -> dict[int, frozenset[str]]:
    """Once a copy is complete: layer -> the nodes whose memory holds it."""
    out: dict[int, set[str]] = {}
    for stage in layout.stages:
        nodes = {stage.node} | {layout.stages[d].node for d in order.sends[stage.rank]}
        for layer in stage.layers:
            out.setdefault(layer, set()).update(nodes)
    return {layer: frozenset(nodes) for layer, nodes in sorted(out.items())}


def due(order: CopyOrder | None, ready_step: int, steps: int) -> bool:
    """Whether a copy is taken once `ready_step` steps are committed (never after the last)."""
    return order is not None and ready_step % order.every == 0 and 0 < ready_step < steps
