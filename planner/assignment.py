"""Which surviving node takes which stage position after a reconfiguration.

A position of a new pipeline is one node's share of its template: the layers the node's
GPUs must hold (several consecutive stages when a multi-GPU node is split). A node already
holding a layer (parameters and optimizer state, from any replica: data-parallel replicas
are identical) need not receive it, so putting node i on position j copies
bytes(needs_j - held_i). Over all orderings of a pipeline's nodes (or of a pool of several
pipelines' nodes onto all their positions) we want, lexicographically:

1. the fewest copied bytes;
2. then the fewest moved nodes (a node is moved when its position differs from its index
   in the default order, which is the order the regrouping rules give);
3. then the least total displacement sum |position - default index| (nodes keep their
   order as far as the first two allow).

Each criterion is a sum over the matched (node, position) pairs, so this is an assignment
problem. When the three fit one integer cost that doubles hold exactly (bytes in units of
their gcd, weighted above any tie cost), scipy's `linear_sum_assignment` solves it in one
round (milliseconds at 97 positions); otherwise `lsa.min_cost_matching` solves it in two:
bytes first, then criteria 2 and 3 over the edges that some byte-optimal matching may use
(the tight edges of its dual). Tests compare both with brute force over every ordering.

The result depends on the nodes only through what each holds, in order, so `arrange`
remembers it per (positions, holdings in node order, layer bytes): after a spot burst the
same survivor shapes (a template less one position) recur at every event, and a hit maps
the remembered ordering back onto the new names instead of solving again (exact: the
same inputs to the same deterministic solver).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np

from .errors import PlannerError
from .lsa import MAX_COST, min_cost_matching
from .templates import PipelineTemplate


class HeldLayers(Protocol):
    """node -> the layers it holds, asked one node at a time: a dict, or a lazy view."""

    def get(self, node: str, default: Collection[int], /) -> Collection[int]: ...


@dataclass(frozen=True)
class Arrangement:
    """`nodes[j]` takes position j. Bytes are what the nodes receive, in total."""

    nodes: tuple[str, ...]
    copied_bytes: int
    keep_order_bytes: int  # the default order's bytes (what the plan copied before)
    lower_bound_bytes: int  # layers of the positions that none of the nodes holds
    moved: int
    displacement: int


# Per template (keyed by identity, the template kept alive beside its entry: hashing a
# template hashes every stage, which costs more than the lookup saves at 12,500 nodes).
_POSITIONS: dict[int, tuple[PipelineTemplate, tuple[tuple[int, ...], ...], tuple[int, ...]]] = {}


def _layout(template: PipelineTemplate) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    entry = _POSITIONS.get(id(template))
    if entry is None or entry[0] is not template:
        by_node: list[list[int]] = [[] for _ in range(template.num_nodes)]
        for stage in template.stages:
            by_node[stage.node_index].extend(stage.layers)
        where = [0] * sum(len(layers) for layers in by_node)
        for k, layers in enumerate(by_node):
            for layer in layers:
                where[layer] = k
        entry = (template, tuple(tuple(layers) for layers in by_node), tuple(where))
        _POSITIONS[id(template)] = entry
    return entry[1], entry[2]


def positions_of(template: PipelineTemplate) -> tuple[tuple[int, ...], ...]:
    """The layers each node position of `template` holds, in pipeline order."""
    return _layout(template)[0]


def layer_positions_of(template: PipelineTemplate) -> tuple[int, ...]:
    """For each layer, the node position of `template` that holds it."""
    return _layout(template)[1]


def cost_matrix(
    needs: Sequence[Sequence[int]], nodes: Sequence[str], held: HeldLayers, layer_bytes: np.ndarray
) -> np.ndarray:
    """costs[i, j]: bytes node i receives if it takes position j."""
    return _costs(needs, [held.get(node, ()) for node in nodes], layer_bytes)


def _costs(needs: Sequence[Sequence[int]], holdings: Sequence[Iterable[int]], layer_bytes: np.ndarray) -> np.ndarray:
    n, num_layers = len(holdings), len(layer_bytes)
    need = np.zeros((len(needs), num_layers), np.int64)
    have = np.zeros((n, num_layers), np.int64)
    for j, layers in enumerate(needs):
        need[j, list(layers)] = 1
    for i, held_layers in enumerate(holdings):
        have[i, list(held_layers)] = 1
    need_bytes = need * layer_bytes[None, :]
    return need_bytes.sum(axis=1)[None, :] - have @ need_bytes.T


def tie_costs(n: int) -> np.ndarray:
    """Criteria 2 and 3 as one integer cost: moved x (n^2 + 1) + |position - index|."""
    index = np.arange(n)
    shift = np.abs(index[None, :] - index[:, None])
    return (shift != 0) * (n * n + 1) + shift


def lower_bound(needs: Sequence[Sequence[int]], nodes: Sequence[str], held: HeldLayers, layer_bytes: np.ndarray) -> int:
    """Bytes of the needed layers that no node of the group holds: any ordering copies them."""
    return _bound(needs, [held.get(node, ()) for node in nodes], layer_bytes)


def _bound(needs: Sequence[Sequence[int]], holdings: Sequence[Iterable[int]], layer_bytes: np.ndarray) -> int:
    present = {layer for layers in holdings for layer in layers}
    needed = {layer for layers in needs for layer in layers}
    return int(sum(int(layer_bytes[layer]) for layer in needed - present))


_MEMO_MAX_ENTRIES = 4096  # orderings kept (least recently used dropped): a few MB at most


def memo_stats() -> dict[str, int]:
    """Hits and misses of `arrange`'s memo since the last `clear_memo` (for benchmarks)."""
    info = _solve_shape.cache_info()
    return {"hits": info.hits, "misses": info.misses, "entries": info.currsize}


def clear_memo() -> None:
    _solve_shape.cache_clear()


def arrange(
    needs: Sequence[Sequence[int]], nodes: Sequence[str], held: HeldLayers, layer_bytes: np.ndarray
) -> Arrangement:
    """The exact best ordering of `nodes` onto the positions `needs` (criteria above)."""
    n = len(nodes)
    if len(needs) != n:
        raise PlannerError(f"internal error: {n} nodes for {len(needs)} positions")
    holdings = tuple(frozenset(held.get(node, ())) for node in nodes)
    order, copied, keep, bound, moved, displacement = _solve_shape(
        tuple(map(tuple, needs)), holdings, np.asarray(layer_bytes, np.int64).tobytes()
    )
    return Arrangement(tuple(nodes[i] for i in order), copied, keep, bound, moved, displacement)


@lru_cache(maxsize=_MEMO_MAX_ENTRIES)
def _solve_shape(
    needs: tuple[tuple[int, ...], ...], holdings: tuple[frozenset[int], ...], layer_bytes: bytes
) -> tuple[tuple[int, ...], int, int, int, int, int]:
    """`_solve` remembered by its exact inputs (the solver sees nothing else, so a repeat
    is the same answer): spot and datacenter traces repeat a few shapes thousands of times."""
    return _solve(needs, holdings, np.frombuffer(layer_bytes, np.int64))


def _solve(
    needs: Sequence[Sequence[int]], holdings: Sequence[frozenset[int]], layer_bytes: np.ndarray
) -> tuple[tuple[int, ...], int, int, int, int, int]:
    """(order as indices: position j takes node order[j], copied, keep-order, lower bound,
    moved, displacement) for nodes known by their holdings alone."""
    n = len(holdings)
    costs = _costs(needs, holdings, layer_bytes)
    keep = int(np.trace(costs))
    bound = _bound(needs, holdings, layer_bytes)
    if keep == bound:  # the default order already meets the bound, and moves nobody
        return tuple(range(n)), keep, keep, bound, 0, 0
    column = _one_round(costs, n)
    if column is None:
        column = _two_rounds(costs, n)
    copied = int(costs[np.arange(n), column].sum())
    order = [0] * n
    for i, j in enumerate(column):
        order[j] = i
    shift = np.abs(np.asarray(column) - np.arange(n))
    return tuple(order), copied, keep, bound, int((shift != 0).sum()), int(shift.sum())


def _one_round(costs: np.ndarray, n: int) -> tuple[int, ...] | None:
    """All three criteria as one integer cost, solved by scipy's exact assignment (None
    when the cost does not fit doubles exactly).

    Every matching's bytes are a multiple of g, the gcd of the entries, so bytes / g x W +
    tie cost, with W above any matching's tie cost, orders matchings lexicographically. The
    solver's sums stay integers below 2**52, which doubles hold exactly (GPT-3 175B at 97
    positions: about 2**45)."""
    ties = tie_costs(n)
    weight = int(ties.max()) * n + 1
    g = max(1, int(np.gcd.reduce(costs.ravel())))
    units = costs // g
    if (int(units.max()) * weight + int(ties.max())) * n >= MAX_COST:
        return None
    from scipy.optimize import linear_sum_assignment  # here: workers import this module, rarely solve

    _, column = linear_sum_assignment(units * weight + ties)
    return tuple(int(j) for j in column)


def _two_rounds(costs: np.ndarray, n: int) -> tuple[int, ...]:
    """Bytes first, then the tie cost over the tight edges of the bytes' dual (`lsa`)."""
    first = min_cost_matching(costs)
    ties = tie_costs(n)
    forbidden = int(ties.max()) * n + 1  # dearer than any matching of tight edges
    second = min_cost_matching(np.where(first.tight(costs), ties, forbidden))
    if second.cost >= forbidden:  # pragma: no cover - the first matching is tight, so never
        raise PlannerError("internal error: no byte-optimal ordering among the tight edges")
    copied = int(costs[np.arange(n), second.column].sum())
    if copied != first.cost:  # pragma: no cover - tight edges keep the optimum
        raise PlannerError(f"internal error: tie-breaking changed the bytes ({copied} vs {first.cost})")
    return second.column
