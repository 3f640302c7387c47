"""Reference: the part-by-part branch and bound over template mixes (the planner's search
before `planner.mix`), kept so tests and benchmarks/scale_plan_bench.py can check the new
search against it on every case it finishes (`Planner._best_shape(..., reference=True)`).

Instantiation (DESIGN 3.4) must pick, among every multiset of template sizes that adds up
to exactly N nodes with at least k members, the one whose exact batch split and exposed
gradient all-reduce give the fastest iteration. With a small n0 and many nodes there are
millions of multisets (64 nodes and n0 = 1: 1.7 million), so they are searched depth
first, largest part first, and a branch is cut when a lower bound on every completion of
it cannot beat the best iteration found:

- makespan: pipeline i running m microbatches takes c_i + beta_i m, and every pipeline runs
  at least one, so tau >= c_i + beta_i for the chosen ones; and sum_i (tau - c_i)/beta_i
  >= M. The R nodes not yet assigned can add at most R x max_n (tau - c_n)/(beta_n n) to
  that sum (each node at the best capacity per node of any size the branch may still use),
  which gives the smallest tau any completion could reach in closed form.
- exposed all-reduce: layer 0 is ready only when the slowest pipeline ends, so each
  pipeline's first stage synchronises entirely after it; with K >= the pipelines so far
  (+1 if nodes remain), that time is a floor.
Children are visited in order of their bound, so a good incumbent comes early. The leaves
are then solved exactly by the caller. Ties are broken as an exhaustive search would:
fewer seconds, more pipelines, smaller sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

_SLACK = 1 - 1e-12  # bounds are exact in real arithmetic; keep rounding from cutting a tie


@dataclass
class _Best:
    """The search's incumbent: its key (seconds, -pipelines, sizes), sizes, and leaves solved."""

    key: tuple[float, int, tuple[int, ...]] | None = None
    sizes: tuple[int, ...] | None = None
    solved: int = 0


class MixSearch:
    """Branch and bound over multisets of template sizes (see the module docstring)."""

    def __init__(
        self,
        lines: dict[int, tuple[float, float]],
        first_stage_allreduce_s: Callable[[int, int], float],
        total_microbatches: int,
        solve: Callable[[tuple[int, ...]], float],
    ):
        """`lines[n] = (c, beta)`; `first_stage_allreduce_s(n, K)`: the first stage of the
        n-node template synchronising across K pipelines; `solve(sizes)`: the exact
        iteration time of a mix (sizes in increasing order)."""
        self.sizes = sorted(lines, reverse=True)
        self.lines = lines
        self.first_stage_allreduce_s = first_stage_allreduce_s
        self.total = total_microbatches
        self.solve = solve
        c = np.array([lines[n][0] for n in self.sizes])
        beta = np.array([lines[n][1] for n in self.sizes])
        nodes = np.array(self.sizes, dtype=float)
        # per node: capacity slope and offset of (tau - c) / (beta n)
        self._slope = 1.0 / (beta * nodes)
        self._offset = c / (beta * nodes)

    def best(self, num_nodes: int, min_pipelines: int) -> tuple[tuple[int, ...] | None, int]:
        """The winning sizes (increasing; None when no split fits) and how many leaves were solved exactly."""
        sizes = self.sizes
        smallest = min(sizes)
        # floor_ar[n][K] = min over K' >= K of the first stage's all-reduce: a floor valid
        # for any number of pipelines the branch may still reach
        max_k = num_nodes // smallest
        floor_ar = {}
        for n in sizes:
            values = [self.first_stage_allreduce_s(n, k) if k > 1 else 0.0 for k in range(max_k + 2)]
            floor_ar[n] = np.minimum.accumulate(values[::-1])[::-1]
        # reachable[i][r]: r nodes can be split into parts <= sizes[i]
        reachable = []
        for i in range(len(sizes)):
            ok = [False] * (num_nodes + 1)
            ok[0] = True
            for r in range(1, num_nodes + 1):
                ok[r] = any(r >= s and ok[r - s] for s in sizes[i:])
            reachable.append(ok)
        state = _Best()

        def bound(a: float, b: float, first: float, count: int, remaining: int, start: int, ar: float) -> float:
            tau = (self.total + b) / a if a > 0 else np.inf
            if remaining:
                slope = self._slope[start:]
                offset = self._offset[start:]
                usable = np.array(sizes[start:]) <= remaining
                candidates = (self.total + b + remaining * offset[usable]) / (a + remaining * slope[usable])
                tau = min(tau, float(candidates.min())) if candidates.size else tau
            return (max(tau, first) + ar) * _SLACK

        def visit(remaining: int, start: int, chosen: list[int], a: float, b: float, first: float, ar_sizes: set[int]):
            count = len(chosen)
            if remaining == 0:
                if count < min_pipelines:
                    return
                ordered = tuple(reversed(chosen))
                leaf_ar = (
                    max((self.first_stage_allreduce_s(n, count) for n in ar_sizes), default=0.0) if count > 1 else 0.0
                )
                if state.key is not None and bound(a, b, first, count, 0, start, leaf_ar) > state.key[0]:
                    return
                seconds = self.solve(ordered)
                state.solved += 1
                key = (seconds, -count, ordered)
                if state.key is None or key < state.key:
                    state.key, state.sizes = key, ordered
                return
            children = []
            for index in range(start, len(sizes)):
                size = sizes[index]
                rest = remaining - size
                if rest < 0 or not reachable[index][rest]:
                    continue
                if count + 1 + rest // smallest < min_pipelines or count + 1 > self.total:
                    continue
                c, beta = self.lines[size]
                a2, b2, first2 = a + 1.0 / beta, b + c / beta, max(first, c + beta)
                k_floor = count + 1 + (1 if rest else 0)
                ar = max(float(floor_ar[n][k_floor]) for n in ar_sizes | {size})
                children.append((bound(a2, b2, first2, count + 1, rest, index, ar), index, size, a2, b2, first2))
            children.sort(key=lambda child: (child[0], -child[2]))
            for value, index, size, a2, b2, first2 in children:
                if state.key is not None and value > state.key[0]:
                    break
                chosen.append(size)
                visit(remaining - size, index, chosen, a2, b2, first2, ar_sizes | {size})
                chosen.pop()

        visit(num_nodes, 0, [], 0.0, 0.0, -np.inf, set())
        return state.sizes, state.solved


def first_stage_allreduce_table(
    stage_ends: dict[int, int], allreduce_prefix: Callable[[int], Sequence[float]]
) -> Callable[[int, int], float]:
    """`(n, K) -> seconds` for the first stage of each template, from per-K prefix sums."""
    cache: dict[int, Sequence[float]] = {}

    def lookup(n: int, replicas: int) -> float:
        if replicas not in cache:
            cache[replicas] = allreduce_prefix(replicas)
        return float(cache[replicas][stage_ends[n]])

    return lookup
