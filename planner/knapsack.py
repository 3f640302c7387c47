"""Unbounded knapsacks over node counts for the instantiation search (planner/mix.py).

`knapsack_suffixes`: the most a multiset of template sizes can carry on exactly r nodes,
for every r and every suffix of the sizes (the search's capacity tables and, with every
value lowered by a price per pipeline, its pipeline-count bound). `fewest_pipelines`: an
incumbent mix with enough capacity and few pipelines (a heuristic; the search solves it
like any other mix).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_TRIED = 8  # incumbent candidates, by estimated pipelines, completed with their filler
_BLOCK = 1 << 17  # (level, shift, b) cells scored in one array step by `_candidates`


def knapsack_suffixes(sizes: Sequence[int], values: Sequence[float], num_nodes: int) -> np.ndarray:
    """table[i][r] = max sum y_j values[j] over y >= 0 (integers) on sizes[i:] with
    sum y_j sizes[j] = r exactly, -inf when r is no such sum; 0 <= r <= num_nodes.
    A value of -inf leaves its size out. One [len(sizes) + 1, num_nodes + 1] array, built
    in place (the search builds hundreds per instantiation)."""
    count, width = len(sizes), num_nodes + 1
    table = np.empty((count + 1, width))
    table[count] = -np.inf
    table[count, 0] = 0.0
    # one buffer whose tail past num_nodes stays -inf: each size views it as [rows, s]
    padded = np.full(width + max(sizes, default=1), -np.inf)
    for i in range(count - 1, -1, -1):
        s, w = int(sizes[i]), values[i]
        if w == -np.inf:
            table[i] = table[i + 1]
            continue
        # G'[r] = max_q G[r - q s] + q w: a running max per residue class of G[r] - (r // s) w
        rows = -(-width // s)
        padded[:width] = table[i + 1]
        steps = np.arange(rows, dtype=float)[:, None] * w
        best = padded[: rows * s].reshape(rows, s) - steps
        np.maximum.accumulate(best, axis=0, out=best)
        best += steps
        table[i] = best.reshape(-1)[:width]
    return table


def fewest_pipelines(
    size: np.ndarray, caps: np.ndarray, num_nodes: int, total: int
) -> tuple[tuple[int, int], ...] | None:
    """A mix over `size` (caps: a pipeline's capacity, -inf: unusable) on exactly
    `num_nodes` nodes whose capacity reaches `total` microbatches, with few
    pipelines: a pipelines of the size with the most capacity per node, b of one other
    size, the rest of the nodes filled by the most capacity the knapsack finds; per other
    size the largest b that still fits (None: none found). Every (other size, shift of a)
    is scored in one array step (the per-size loop it replaced is kept in the tests)."""
    nodes = num_nodes
    usable = np.isfinite(caps)
    if not usable.any():
        return None
    value = np.where(usable, caps, 0.0)
    tables = knapsack_suffixes(list(size), [float(v) if u else -np.inf for v, u in zip(value, usable)], nodes)
    fill = tables[0]
    base = int(np.argmax(np.where(usable, value / size, -np.inf)))
    best: tuple[tuple[int, int], ...] | None = None
    for _, a_count, other, b_count, left in sorted(_candidates(size, value, usable, fill, base, nodes, total))[:_TRIED]:
        counts = _with_filler(size, value, usable, tables, base, a_count, other, b_count, left)
        if best is None or sum(x for _, x in counts) < sum(x for _, x in best):
            best = counts
    return best


def _candidates(
    size: np.ndarray, value: np.ndarray, usable: np.ndarray, fill: np.ndarray, base: int, nodes: int, total: int
) -> list[tuple[int, int, int, int, int]]:
    """(pipelines estimate, a, level, b, rest) per usable level and shift 0..2 of a that
    has a mix with the capacity: the fewest estimated pipelines, ties the smallest b.
    Levels go in blocks of similar size (largest first) of at most _BLOCK (level, shift,
    b) cells, so the arrays stay small at 12,500 nodes (b runs to nodes // size)."""
    found: list[tuple[int, int, int, int, int]] = []
    levels = [int(j) for j in sorted(np.nonzero(usable)[0], key=lambda j: -int(size[j]))]
    block: list[int] = []
    for level in levels:
        if block and (len(block) + 1) * 3 * (nodes // int(size[level]) + 1) > _BLOCK:
            found += _candidate_block(size, value, fill, base, nodes, total, np.array(block))
            block = []
        block.append(level)
    if block:
        found += _candidate_block(size, value, fill, base, nodes, total, np.array(block))
    return found


def _candidate_block(
    size: np.ndarray, value: np.ndarray, fill: np.ndarray, base: int, nodes: int, total: int, levels: np.ndarray
) -> list[tuple[int, int, int, int, int]]:
    """`_candidates` for some usable levels at once."""
    n_base, cap_base = int(size[base]), value[base]
    n = size[levels].astype(np.int64)[:, None, None]  # [level, shift, b]
    b = np.arange(nodes // int(n.min()) + 1)[None, None, :]
    shift = np.arange(3)[None, :, None]
    a = (nodes - b * n) // n_base - shift
    rest = nodes - b * n - a * n_base  # >= shift * n_base >= 0
    filled = fill[np.minimum(rest, nodes)]
    good = (b <= nodes // n) & (a >= 0) & (filled > -np.inf)
    capacity = a * cap_base + b * value[levels][:, None, None] + np.where(good, filled, -np.inf)
    estimate = a + b + -(-rest // int(size.max()))  # the filler may need more pipelines
    fits = good & (capacity >= total)
    pick = np.argmin(np.where(fits, estimate, np.iinfo(np.int64).max), axis=2)  # first of the fewest
    found = np.take_along_axis(fits, pick[:, :, None], axis=2)[:, :, 0]

    def at(values: np.ndarray) -> np.ndarray:
        return np.take_along_axis(np.broadcast_to(values, fits.shape), pick[:, :, None], axis=2)[:, :, 0]

    est, a_at, b_at, rest_at = at(estimate), at(a), at(b), at(rest)
    level_at = np.broadcast_to(levels[:, None], found.shape)
    return [
        (int(est[i, j]), int(a_at[i, j]), int(level_at[i, j]), int(b_at[i, j]), int(rest_at[i, j]))
        for i, j in zip(*np.nonzero(found))
    ]


def _with_filler(
    size: np.ndarray,
    value: np.ndarray,
    usable: np.ndarray,
    tables: np.ndarray,
    base: int,
    a_count: int,
    other: int,
    b_count: int,
    left: int,
) -> tuple[tuple[int, int], ...]:
    """a_count x size[base] + b_count x size[other] + the knapsack's mix on `left` nodes."""
    y = np.zeros(len(size), dtype=int)
    y[base] += a_count
    y[other] += b_count
    for i, n in enumerate(size):  # the filler, from the knapsack's tables
        if left == 0:
            break
        if not usable[i]:
            continue
        q = np.arange(left // int(n) + 1)
        take = int(np.argmax(tables[i + 1][left - q * int(n)] + q * value[i]))
        y[i] += take
        left -= take * int(n)
    assert left == 0, "internal error: the filler's nodes are reachable by construction"
    counts: dict[int, int] = {}
    for n, m in zip(size, y):
        if m > 0:
            counts[int(n)] = counts.get(int(n), 0) + int(m)
    return tuple(sorted(counts.items()))
