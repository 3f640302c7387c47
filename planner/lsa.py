"""Exact minimum-cost perfect matching on a square integer matrix (linear sum assignment).

The shortest-augmenting-path Hungarian method (Kuhn-Munkres with potentials, as in
Jonker and Volgenant): rows are added one at a time and each is routed along a shortest
alternating path of reduced costs. The inner scan over columns is vectorised, so n rows
cost about n x (columns visited) numpy operations. Integer costs keep it exact (int64:
callers keep every entry below 2**52 so that potentials cannot overflow).

Besides the matching it returns the dual potentials u, v with u_i + v_j <= c_ij and
equality on the matching. A perfect matching is optimal exactly when it uses only tight
edges (c_ij = u_i + v_j), which lets a caller break ties lexicographically: solve the
first criterion, then solve the second over the tight edges alone (`tight`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import PlannerError

_INF = np.int64(1) << np.int64(62)
MAX_COST = 1 << 52


@dataclass(frozen=True)
class Matching:
    """`column[i]`: the column row i is matched to; `cost`: the matching's total."""

    column: tuple[int, ...]
    cost: int
    row_potential: np.ndarray
    column_potential: np.ndarray

    def tight(self, costs: np.ndarray) -> np.ndarray:
        """Edges of zero reduced cost: those some optimal matching may use."""
        return (costs - self.row_potential[:, None] - self.column_potential[None, :]) == 0


def min_cost_matching(costs: np.ndarray) -> Matching:
    """The minimum-cost perfect matching of the square int matrix `costs` (exact)."""
    a = np.asarray(costs, dtype=np.int64)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise PlannerError(f"internal error: assignment costs must be a square matrix, got shape {a.shape}")
    n = a.shape[0]
    if n == 0:
        return Matching((), 0, np.zeros(0, np.int64), np.zeros(0, np.int64))
    if a.min() < 0 or a.max() >= MAX_COST:
        raise PlannerError(f"internal error: assignment costs must lie in [0, 2**52), got [{a.min()}, {a.max()}]")
    # 1-based as in the classic formulation: column 0 is the virtual start of each path.
    u = np.zeros(n + 1, np.int64)
    v = np.zeros(n + 1, np.int64)
    owner = np.zeros(n + 1, np.int64)  # owner[j]: row matched to column j (0: none)
    way = np.zeros(n + 1, np.int64)
    for row in range(1, n + 1):
        owner[0] = row
        j0 = 0
        minv = np.full(n + 1, _INF, np.int64)
        used = np.zeros(n + 1, bool)
        while True:
            used[j0] = True
            i0 = owner[j0]
            reduced = a[i0 - 1] - u[i0] - v[1:]
            free = ~used[1:]
            better = free & (reduced < minv[1:])
            minv[1:][better] = reduced[better]
            way[1:][better] = j0
            candidates = np.where(free, minv[1:], _INF)
            j1 = int(np.argmin(candidates)) + 1
            delta = candidates[j1 - 1]
            u[owner[used]] += delta
            v[used] -= delta
            minv[~used] -= delta
            j0 = j1
            if owner[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            owner[j0] = owner[j1]
            j0 = j1
    column = [0] * n
    for j in range(1, n + 1):
        column[owner[j] - 1] = j - 1
    total = int(a[np.arange(n), column].sum())
    return Matching(tuple(column), total, u[1:].copy(), v[1:].copy())
