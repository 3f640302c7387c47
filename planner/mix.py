"""Which multiset of templates to instantiate: an exact search over counts per template size.

Problem (DESIGN 3.4). Template sizes n run T_n(m) = c_n + beta_n m for m microbatches.
Choose counts x_n >= 0 with sum_n n x_n = N (no idle node) and K = sum_n x_n pipelines,
k <= K <= M (each pipeline gets >= 1 of the M microbatches). A mix's value is its exact
iteration time (integer min-makespan split plus the exposed all-reduce, computed by the
caller's `solve`); the answer minimises (seconds, -K, sizes in increasing order), the order
an exhaustive enumeration breaks ties in.

Search. Level i of a depth-first search decides x for the i-th size, so the depth is the
number of sizes (at most the model's layers), not the number of pipelines (thousands at
12,500 nodes), and all counts of one level are tested in one vectorised step. A child is
cut when one of two tests shows that no mix completing it can reach the best value U found
so far (with a relative slack of 1e-12 so that rounding cannot cut a tie). Every mix whose
value is the optimum is therefore solved, and the answer and its tie-break are those of
enumerating every mix.

Why the tests are sound. A child has chosen counts x on sizes C (a = sum x_n / beta_n,
b = sum x_n c_n / beta_n, F = max (c_n + beta_n) over C, K0 pipelines) and R nodes left for
the later sizes L. Take any completion, counts y on sizes E of L with sum n y_n = R, slowest
pipeline T, K pipelines in all.
1. Every pipeline i ends by T, so m_i <= (T - c_i) / beta_i and M <= sum (T - c_i) / beta_i:
   T >= tau = (M + b + sum_E y_n c_n / beta_n) / (a + sum_E y_n / beta_n). And T >= c_n +
   beta_n for every size used (each pipeline runs at least one microbatch).
2. In the node shares z_n = n y_n (z >= 0, sum z_n = R) tau is linear-fractional with a
   positive denominator, so its minimum over that simplex is at a vertex:
   tau >= min_{n in E} tau_n with tau_n = (M + b + R c_n / (beta_n n)) / (a + R / (beta_n n)).
3. Layer 0 sits in the first stage of every pipeline, which has no stage after it, so it is
   ready only at T, and each template n used all-reduces its whole first stage after T: the
   exposed part is >= A_n(K) (that stage's all-reduce across K pipelines) for every n in C
   and E. K is unknown beyond K >= K0 + ceil(R / max L), so A is replaced by its minimum
   over every K' from there to the most pipelines N allows ("floor A").
   Bound test: with n* the vertex of (2) attaining the minimum, the iteration is >=
   max(tau_n*, F, c_n* + beta_n*) + max(floor A over C, floor A_n*); the minimum of this
   over every n* in L with n* <= R is below every completion, whichever E it uses. Cut
   when it exceeds U.
4. Capacity test. A mix of value <= U has T <= U - floor A_n for each size n it uses, so a
   pipeline of size n runs at most cap_n(t) = floor((t - c_n) / beta_n) microbatches with
   t = U - floor A_n (none at all if that is < 1), and the chosen pipelines at most
   cap_n(U - theta) with theta = the larger of floor A over C and the smallest floor A in
   L (R > 0 forces some size of L in). The later sizes can contribute at most
   G_L(R) = max sum y_n cap_n over y with sum n y_n = R exactly: an unbounded knapsack over
   node counts, solved for every R and every suffix L of the order (one running maximum
   per residue class mod n per size, O(N) each) and redone whenever U improves. Cut when
   chosen capacity + G_L(R) < M: the integer split cannot place the M microbatches by T.
   G_L(R) = -inf also drops children whose R is no sum of later sizes. Capacities carry a
   1e-6 microbatch slack against rounding in T_n(m).
Children whose pipeline count cannot reach k (or stay <= M) are dropped as well.

Order. Sizes are ranked by the bound of running that size alone on all N nodes, and each
level tries its counts in order of their bound (more pipelines first on ties), so the first
leaves are near the optimum. Checked against the part-by-part search it replaces
(`planner.mix_reference`) and against enumerating every mix (tests/planner/test_mix.py);
figures in benchmarks/scale_plan_bench.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

_SLACK = 1 - 1e-12  # bounds are exact in real arithmetic; keep rounding from cutting a tie
_CAP_SLACK = 1e-6  # microbatches: keep rounding in T_n(m) from lowering a capacity


@dataclass(frozen=True)
class MixResult:
    """The winning mix and how much work proving it took."""

    counts: tuple[tuple[int, int], ...]  # (size, pipelines of that size), sizes increasing
    seconds: float
    mixes_solved: int
    levels_expanded: int

    @property
    def sizes(self) -> tuple[int, ...]:
        """One entry per pipeline, increasing."""
        return tuple(n for n, x in self.counts for _ in range(x))


def knapsack_suffixes(sizes: Sequence[int], values: Sequence[float], num_nodes: int) -> list[np.ndarray]:
    """table[i][r] = max sum y_j values[j] over y >= 0 (integers) on sizes[i:] with
    sum y_j sizes[j] = r exactly, -inf when r is no such sum; 0 <= r <= num_nodes.
    A value of -inf leaves its size out."""
    table = [np.where(np.arange(num_nodes + 1) == 0, 0.0, -np.inf)]
    for s, w in zip(reversed(sizes), reversed(values)):
        previous = table[0]
        if w == -np.inf:
            table.insert(0, previous)
            continue
        # G'[r] = max_q G[r - q s] + q w: a running max per residue class of G[r] - (r // s) w
        rows = -(-(num_nodes + 1) // s)
        padded = np.full(rows * s, -np.inf)
        padded[: num_nodes + 1] = previous
        grid = padded.reshape(rows, s)
        steps = np.arange(rows, dtype=float)[:, None] * w
        best = np.maximum.accumulate(grid - steps, axis=0) + steps
        table.insert(0, best.reshape(-1)[: num_nodes + 1])
    return table


class MixSearch:
    """The search of the module docstring, for one set of template lines."""

    def __init__(
        self,
        lines: Mapping[int, tuple[float, float]],
        first_stage_allreduce_s: Mapping[int, Sequence[float]],
        total_microbatches: int,
        solve: Callable[[tuple[tuple[int, int], ...]], float],
    ):
        """`lines[n] = (c, beta)`; `first_stage_allreduce_s[n][K]`: the first stage of the
        n-node template all-reducing across K pipelines, for K = 0 .. at least
        num_nodes // min size; `solve(counts)`: the exact iteration seconds of a mix given
        as ((size, count), ...) in increasing size."""
        self.lines = dict(lines)
        self.first_stage_allreduce_s = first_stage_allreduce_s
        self.total = total_microbatches
        self.solve = solve

    def best(self, num_nodes: int, min_pipelines: int) -> MixResult | None:
        """The fastest mix over exactly `num_nodes` nodes with >= `min_pipelines`
        pipelines, or None when no mix exists."""
        sizes = [n for n in self.lines if 1 <= n <= num_nodes]
        if not sizes:
            return None
        return _Run(self, num_nodes, min_pipelines, sizes).result()


class _Run:
    """One search: the sizes in search order as arrays, the capacity tables, the incumbent."""

    def __init__(self, search: MixSearch, num_nodes: int, need: int, sizes: list[int]):
        self.solve = search.solve
        self.total, self.need, self.num_nodes = search.total, need, num_nodes
        self.kmax = kmax = num_nodes // min(sizes)
        floors = {}
        for n in sizes:
            values = np.asarray(search.first_stage_allreduce_s[n][: kmax + 1], dtype=float)
            if len(values) < kmax + 1:
                raise ValueError(f"internal error: all-reduce times for {n} nodes stop at {len(values) - 1} pipelines, {kmax} needed")
            floors[n] = np.minimum.accumulate(values[::-1])[::-1]  # min over K' >= K

        def alone(n: int) -> float:
            c, beta = search.lines[n]
            return max(c + self.total * beta * n / num_nodes, c + beta) + float(floors[n][max(1, num_nodes // n)])

        self.order = order = sorted(sizes, key=lambda n: (alone(n), -n))
        self.size = np.array(order)
        self.c = np.array([search.lines[n][0] for n in order])
        self.beta = np.array([search.lines[n][1] for n in order])
        self.inv, self.cb = 1.0 / self.beta, self.c / self.beta
        self.slope, self.offset = 1.0 / (self.beta * self.size), self.c / (self.beta * self.size)
        self.one = self.c + self.beta
        self.floor = np.array([floors[n] for n in order])  # [level, K]
        self.smallest_after = np.minimum.accumulate(self.size[::-1])[::-1]
        self.largest_after = np.maximum.accumulate(self.size[::-1])[::-1]
        # any mix has K >= k and K >= N / largest size: floor A at that K for the knapsack
        self.k_any = min(kmax, max(need, -(-num_nodes // int(self.size.max()))))
        self.key = None
        self.counts = None
        self.solved = self.expanded = 0
        self.capacity = knapsack_suffixes(order, [0.0] * len(order), num_nodes)  # reachability

    # -- the incumbent and the capacity tables ----------------------------------------------
    def caps(self, deadline_s: np.ndarray, levels) -> np.ndarray:
        """Most microbatches a pipeline of each level's size can finish by the deadlines."""
        value = np.floor((deadline_s - self.c[levels]) / self.beta[levels] + _CAP_SLACK)
        return np.where(value >= 1, value, -np.inf)

    def record(self, counts: tuple[tuple[int, int], ...], pipelines: int) -> None:
        seconds = self.solve(counts)
        self.solved += 1
        key = (seconds, -pipelines, tuple(n for n, x in counts for _ in range(x)))
        if self.key is None or key < self.key:
            improved = self.key is None or seconds < self.key[0]
            self.key, self.counts = key, counts
            if improved:
                levels = np.arange(len(self.order))
                deadline = seconds / _SLACK - self.floor[levels, self.k_any]
                self.capacity = knapsack_suffixes(self.order, self.caps(deadline, levels), self.num_nodes)

    def result(self) -> MixResult | None:
        self.visit(0, 0.0, 0.0, -np.inf, 0, self.num_nodes, [], [])
        if self.key is None:
            return None
        return MixResult(self.counts, self.key[0], self.solved, self.expanded)

    # -- one level -------------------------------------------------------------------------
    def visit(self, i: int, a: float, b: float, first: float, count: int, remaining: int, chosen: list[int], picks: list) -> None:
        """Children of a node at level i: every count of size order[i] (picks: the
        (size, count) chosen above, chosen: their levels)."""
        self.expanded += 1
        s, total = self.order[i], self.total
        x = np.arange(remaining // s, -1, -1)
        rest = remaining - x * s
        pipes = count + x
        leaf = rest == 0
        last = i + 1 == len(self.order)
        if last:
            few = many = np.zeros_like(rest)
        else:
            few = np.where(leaf, 0, -(-rest // self.largest_after[i + 1]))
            many = np.where(leaf, 0, rest // self.smallest_after[i + 1])
        later_capacity = self.capacity[i + 1][rest]  # -inf: rest is no sum of later sizes
        ok = (later_capacity > -np.inf) & (pipes + many >= self.need) & (pipes + few <= total)
        if not ok.any():
            return
        x, rest, pipes, leaf, few, later_capacity = x[ok], rest[ok], pipes[ok], leaf[ok], few[ok], later_capacity[ok]
        used = x > 0
        a_x, b_x = a + x * self.inv[i], b + x * self.cb[i]
        first_x = np.where(used, max(first, self.one[i]), first)
        k_floor = np.minimum(pipes + few, self.kmax)
        ar = np.where(used, self.floor[i, k_floor], 0.0)
        for j in chosen:
            ar = np.maximum(ar, self.floor[j, k_floor])
        inner = ~leaf
        if self.key is not None:  # capacity test (4)
            theta = ar.copy()
            if inner.any() and not last:
                later_floor = np.where(self.size[i + 1 :][None, :] <= rest[inner][:, None], self.floor[i + 1 :][:, k_floor[inner]].T, np.inf)
                theta[inner] = np.maximum(theta[inner], later_floor.min(axis=1))
            deadline = self.key[0] / _SLACK - theta
            have = later_capacity + np.where(used, x * self.caps(deadline, i), 0.0)
            for (_, count_j), j in zip(picks, chosen):
                have += count_j * self.caps(deadline, j)
            fits = have >= total
            if not fits.any():
                return
            x, rest, pipes, leaf, inner, used = x[fits], rest[fits], pipes[fits], leaf[fits], inner[fits], used[fits]
            a_x, b_x, first_x, k_floor, ar = a_x[fits], b_x[fits], first_x[fits], k_floor[fits], ar[fits]
        bound = np.empty(len(x))  # bound test (1-3)
        if leaf.any():
            bound[leaf] = np.maximum((total + b_x[leaf]) / a_x[leaf], first_x[leaf]) + ar[leaf]
        if inner.any():
            r = rest[inner][:, None]
            later = slice(i + 1, None)
            tau = (total + b_x[inner][:, None] + r * self.offset[later]) / (a_x[inner][:, None] + r * self.slope[later])
            value = np.maximum(np.maximum(tau, first_x[inner][:, None]), self.one[later])
            value += np.maximum(ar[inner][:, None], self.floor[later][:, k_floor[inner]].T)
            value[self.size[later][None, :] > r] = np.inf
            bound[inner] = value.min(axis=1)
        for j in np.lexsort((-x, bound)):
            if self.key is not None and bound[j] * _SLACK > self.key[0]:
                break
            xj = int(x[j])
            if xj:
                picks.append((s, xj))
            if leaf[j]:
                self.record(tuple(sorted(picks)), int(pipes[j]))
            else:
                self.visit(i + 1, float(a_x[j]), float(b_x[j]), float(first_x[j]), int(pipes[j]), int(rest[j]),
                           chosen + [i] if xj else chosen, picks)
            if xj:
                picks.pop()
