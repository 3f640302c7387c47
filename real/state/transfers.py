"""Where each rank of a new generation gets each of its layers from (pure Python).

The planner's copy plan (`planner.reconfigure.copy_plan`, carried by the policy's
`CopyLayers` action) is node-level: node D receives layers L from node S. The backend
runs one process per GPU and knows what each process really holds (every survivor
reports its layers and the step they are ready for after a failure), so it refines the
plan to ranks: for every layer a rank of the new layout runs,

- `local`: the rank's own worker holds the layer, at the resume step;
- `peer`: another rank of the new generation sends it; the planner's named source node
  is preferred, then a holder on the same node, then the holder that has sent least;
- `checkpoint`: loaded from the last complete checkpoint (restarts);
- `memory`: read from an in-memory copy in a holder node's CPU memory (`memory_sources`,
  a restart from such a copy): by the rank itself when its own node holds the layer, else
  sent by a rank of a holder node (the one that has sent least);
- `init`: built from its seed (a fresh start at step 0).

A worker that was replaced by a fresh process holds nothing, so its layers come from
peers even where the planner thought the node kept them. If some layer has no holder in
the new generation, live recovery is impossible: `LostLayers` (the caller restarts
from the checkpoint).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..protocol.layout import Layout
from ..protocol.sources import LOCAL, MEMORY, PEER, Source


class LostLayers(RuntimeError):
    """Layers with no replica among the new generation's workers."""

    def __init__(self, layers: Sequence[int]):
        super().__init__(f"no surviving replica of layers {list(layers)}")
        self.layers = tuple(layers)


@dataclass(frozen=True)
class Holding:
    """What worker `worker_id` (on `node`) holds in memory: `layers`, ready for `step`."""

    worker_id: int
    node: str
    step: int
    layers: tuple[int, ...]


@dataclass(frozen=True)
class Transfer:
    """Rank `src` sends `layer` to rank `dst` (`tag`: its position in the global order)."""

    tag: int
    layer: int
    src: int
    dst: int


def plan_sources(
    layout: Layout,
    workers: Sequence[int],
    holdings: Mapping[int, Holding],
    step: int,
    preferred: Iterable[tuple[str, str, Sequence[int]]] = (),
) -> tuple[tuple[Source, ...], ...]:
    """Per rank, the source of each of its layers for a live reconfiguration resuming at
    `step`. `workers[r]` is rank r's worker; `holdings` is keyed by worker id;
    `preferred` are the planner's (dst_node, src_node, layers) copies."""
    if len(workers) != layout.world_size:
        raise ValueError(f"{len(workers)} workers for {layout.world_size} ranks")
    held: dict[int, set[int]] = {}  # rank -> layers it holds at `step`
    for rank, worker in enumerate(workers):
        h = holdings.get(worker)
        held[rank] = set(h.layers) if h is not None and h.step == step else set()
    holders: dict[int, list[int]] = {}
    for rank in range(layout.world_size):
        for layer in sorted(held[rank]):
            holders.setdefault(layer, []).append(rank)
    wanted: dict[tuple[str, int], str] = {}
    for dst_node, src_node, layers in preferred:
        for layer in layers:
            wanted[(dst_node, layer)] = src_node
    lost = sorted({l for s in layout.stages for l in s.layers if l not in holders})
    if lost:
        raise LostLayers(lost)
    sent: dict[int, int] = {}
    out = []
    for stage in layout.stages:
        sources = []
        for layer in stage.layers:
            if layer in held[stage.rank]:
                sources.append(Source(layer, LOCAL))
                continue
            candidates = holders[layer]
            named_node = wanted.get((stage.node, layer))
            named = [r for r in candidates if layout.stages[r].node == named_node]
            same_node = [r for r in candidates if layout.stages[r].node == stage.node]
            pool = named or same_node or candidates
            src = min(pool, key=lambda r: (sent.get(r, 0), r))
            sent[src] = sent.get(src, 0) + 1
            sources.append(Source(layer, PEER, src))
        out.append(tuple(sources))
    return tuple(out)


def memory_sources(layout: Layout, holders: Mapping[int, frozenset[str]]) -> tuple[tuple[Source, ...], ...]:
    """Per rank, the source of each of its layers for a restart from an in-memory copy
    whose layer l is in the memory of the nodes `holders[l]` (the live ones only)."""
    ranks_on: dict[str, list[int]] = {}
    for stage in layout.stages:
        ranks_on.setdefault(stage.node, []).append(stage.rank)
    lost = sorted({l for s in layout.stages for l in s.layers if not set(holders.get(l, ())) & set(ranks_on)})
    if lost:
        raise LostLayers(lost)
    sent: dict[int, int] = {}
    out = []
    for stage in layout.stages:
        sources = []
        for layer in stage.layers:
            if stage.node in holders[layer]:
                sources.append(Source(layer, MEMORY, stage.rank))
                continue
            pool = [r for node in sorted(holders[layer]) for r in ranks_on.get(node, ())]
            src = min(pool, key=lambda r: (sent.get(r, 0), r))
            sent[src] = sent.get(src, 0) + 1
            sources.append(Source(layer, MEMORY, src))
        out.append(tuple(sources))
    return tuple(out)


def transfers(sources: Sequence[Sequence[Source]]) -> tuple[Transfer, ...]:
    """The copies between ranks in one global order (by receiving rank, then layer)."""
    # sent sources are the ones naming a rank (`Source` checks it); a rank reading its own
    # node's memory receives nothing
    items = [(dst, s.layer, s.rank) for dst, per_rank in enumerate(sources) for s in per_rank
             if s.rank is not None and s.rank != dst]  # fmt: skip
    return tuple(Transfer(tag, layer, src, dst) for tag, (dst, layer, src) in enumerate(sorted(items)))
