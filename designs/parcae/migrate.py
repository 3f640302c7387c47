"""Migrating a (depth, width) grid to another: which node takes which place, what it copies.

A grid plan is a `GridPlan`: worker k = w D + s (replica w, stage s) on node k // g. Parcae
(NSDI'24, section 5 "migration") distinguishes two kinds of move, and the copies below price
them apart without a special case:

- intra-stage (same depth): a node keeps its stage; a replacement or a new replica of stage
  s receives stage s's layers from a live peer replica, so one stage's bytes move per new
  node, and dropping replicas moves nothing;
- inter-stage (depth changes): layer ranges are cut again, so nearly every node receives
  the part of its new stage it did not hold, from a live holder of each layer.

`arrange` orders the nodes for the new grid so that a node whose current layers are exactly
what a position needs takes that position (pass 1), the others fill the rest in the given
order (pass 2); `copies` lists the transfers, each missing layer from its least-loaded live
holder. `None`: some needed layer has no live holder (the state is lost; restart).
"""

from __future__ import annotations

import heapq
from collections.abc import Container, Sequence

from planner.policies.grid import Grid, GridPlan, place
from planner.profile import LayerProfile
from planner.reconfigure import LayerCopy


def node_layers(plan: GridPlan) -> dict[str, frozenset[int]]:
    """The layers each node of `plan` holds."""
    held: dict[str, set[int]] = {n: set() for n in plan.nodes}
    for s, holders in enumerate(plan.stage_nodes):
        first, end = plan.config.stage_layers[s]
        for node in holders:
            held[node].update(range(first, end))
    return {n: frozenset(v) for n, v in held.items()}


def position_layers(config: Grid, gpus_per_node: int) -> list[frozenset[int]]:
    """The layers node position j of `config`'s placement holds."""
    workers = config.depth * config.width
    used = -(-workers // gpus_per_node)
    out = []
    for j in range(used):
        layers: set[int] = set()
        for k in range(j * gpus_per_node, min((j + 1) * gpus_per_node, workers)):
            first, end = config.stage_layers[k % config.depth]
            layers.update(range(first, end))
        out.append(frozenset(layers))
    return out


def arrange(
    config: Grid, candidates: Sequence[str], held: dict[str, frozenset[int]], gpus_per_node: int
) -> GridPlan | None:
    """`config` placed on `candidates` (preference order), matching held layers first."""
    wanted = position_layers(config, gpus_per_node)
    if len(wanted) > len(candidates):
        return None
    by_layers: dict[frozenset[int], list[str]] = {}
    for node in candidates:
        by_layers.setdefault(held.get(node, frozenset()), []).append(node)
    for members in by_layers.values():
        members.reverse()  # pop() takes them in preference order
    chosen: list[str | None] = [None] * len(wanted)
    taken: set[str] = set()
    for j, layers in enumerate(wanted):
        group = by_layers.get(layers, [])
        if layers and group:
            chosen[j] = group.pop()
            taken.add(chosen[j])  # type: ignore[arg-type]
    rest = iter(n for n in candidates if n not in taken)
    ordered = [c if c is not None else next(rest) for c in chosen]
    return place(config, ordered, gpus_per_node)


def copies(
    old: GridPlan, new: GridPlan, layers: Sequence[LayerProfile], alive: Container[str]
) -> tuple[LayerCopy, ...] | None:
    """What `new`'s nodes must receive from `old`'s live holders; None if a layer is lost."""
    held = node_layers(old)
    # the live holders of each layer as a heap of (bytes sent so far, name): the least-loaded
    # holder, ties to the first name, in O(log holders); loads only grow, so an entry whose
    # load is out of date is put back with the current one when it comes to the top. Layers
    # with the same holders (a stage's, held by its replicas) share one heap.
    holders: dict[int, list[str]] = {}
    for node, got in held.items():
        if node in alive:
            for layer in got:
                holders.setdefault(layer, []).append(node)
    shared: dict[tuple[str, ...], list[tuple[int, str]]] = {}
    heaps: dict[int, list[tuple[int, str]]] = {}
    for layer, names in holders.items():
        key = tuple(names)
        if key not in shared:
            shared[key] = [(0, name) for name in names]
            heapq.heapify(shared[key])
        heaps[layer] = shared[key]
    out_load: dict[str, int] = {}

    def least_loaded(heap: list[tuple[int, str]]) -> str:
        while True:
            load, name = heap[0]
            now = out_load.get(name, 0)
            if now == load:
                return name
            heapq.heapreplace(heap, (now, name))

    out: list[LayerCopy] = []
    for node, need in node_layers(new).items():
        missing = sorted(need - held.get(node, frozenset()))
        by_src: dict[str, list[int]] = {}
        for layer in missing:
            sources = heaps.get(layer)
            if not sources:
                return None
            src = least_loaded(sources)
            out_load[src] = out_load.get(src, 0) + layers[layer].copy_bytes
            by_src.setdefault(src, []).append(layer)
        for src, group in by_src.items():
            param = sum(layers[i].param_bytes for i in group)
            optim = sum(layers[i].optimizer_bytes for i in group)
            out.append(LayerCopy(node, src, tuple(group), param, optim))
    return tuple(out)
