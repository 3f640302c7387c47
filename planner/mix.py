"""Which multiset of templates to instantiate: an exact search over counts per template size.

Problem (DESIGN 3.4). Template sizes n run T_n(m) = c_n + beta_n m for m microbatches.
Choose counts x_n >= 0 with sum_n n x_n = N (no idle node) and K = sum_n x_n pipelines,
k <= K <= M (each pipeline gets >= 1 of the M microbatches). A mix's value is its exact
iteration time (integer min-makespan split plus the exposed all-reduce, computed by the
caller's `solve`); the answer minimises (seconds, -K, sizes in increasing order), the order
an exhaustive enumeration breaks ties in.

The test. Let U be a value. A mix of value <= U has slowest pipeline T <= U - (exposed
all-reduce). Layer 0 sits in the first stage of every pipeline, which has no stage after
it, so it is ready only at T, and each template n in the mix all-reduces its whole first
stage after T: exposed >= A_n(K), that stage's all-reduce across the K pipelines. So
T <= U - A_n(K) for every size n used, and a pipeline of size n runs at most
cap_n(t) = floor((t - c_n) / beta_n) microbatches, t = U - max A over the sizes used
(cap < 1: it cannot run one, the mix is impossible). The M microbatches must fit:
sum_n x_n cap_n >= M. Any upper bound on the capacities keeps the test sound; the search
uses two. K is only known to be >= some K0, so A_n(K) is replaced by its minimum over all
K' >= K0 up to the most pipelines N allows ("floor A").
- Sizes not decided yet (a suffix L of the search order) with R nodes left contribute at
  most G_L(R) = max sum y_n cap_n(U - floor A_n) over y >= 0 with sum n y_n = R exactly
  (each size charged only its own floor, a relaxation): an unbounded knapsack over node
  counts, solved for every R and every suffix at once (one running maximum per residue
  class mod n per size, O(N) each) and redone whenever U improves. G_L(R) = -inf when R is
  no sum of sizes in L.
- Decided sizes C use t = U - max(floor A over C, the smallest floor A in L when R > 0).
A partial mix whose decided capacity plus G_L(R) is below M has no completion of value
<= U and is cut. U is the best value found, divided by 1 - 1e-12 and with capacities
rounded up by 1e-6 microbatches, so rounding cannot cut a tie: every mix whose value is
the optimum is solved, hence the answer and its tie-break are those of enumerating every
mix. Partial mixes whose pipeline count cannot reach k (or stay <= M) are cut as well.

Tighter floors. The first stage is not the only one that cannot hide:
a stage s of template n starts all-reducing once its layers' last backwards are done, no
earlier than T_q - b_q(l) for every template q in the mix (T_q its latest pipeline, b_q(l)
the backward seconds before layer l's stage in q; planner.allreduce).
- Later stages: the split gives every pipeline the M smallest units (batching.py), so a
  pipeline's next unit c + beta (m + 1) is >= the makespan T unless T is some pipeline's
  forced first microbatch; above every c + beta (forced_s) therefore T_n >= T - beta_n and
  exposed >= max_s [AR_n(s, K) - b_n(s)] - beta_n (caller's `later_stage_floor_s`). At or
  below forced_s only the first-stage floor is used.
- Whichever template ends last: some template q* in the mix has T_q* = T, so layer l is
  ready no earlier than T - max over the class's templates q of b_q(l), and class h's
  exposure is >= max_s [AR_h(s, K) - max_q b_q(first layer of s)] at any makespan
  (`stage_times`). At 12,500 nodes this is within 1e-4 s of the optimum's exposure, where
  the first-stage floor was 0.07 s below it: 218 mixes are solved instead of 41,293.
Both are lower bounds for every completion of a partial mix in the class (more templates
only raise ready times), taken as minima over K' >= K like floor A, so the test above stays
exact with "floor A" read as the largest floor that holds.

Search. Depth first; a node picks the next size it uses (a later one in the order) and
how many pipelines of it, all such children tested in one vectorised step, so the depth
is the number of distinct sizes in a mix, not its pipelines (thousands at 12,500 nodes).
Sizes are ordered by the bound of running each alone on all N nodes; children go in that
order, per size most pipelines first.

Pipeline count (with the pipeline-communication term). The floors are
nondecreasing in K (minima over K' >= K; the ring factor 2 (K - 1) / K), and a partial
mix only knew K >= pipes + ceil(R / largest size left). With the sends charged the optimum at 12,500 nodes is 792 x 14 + 2 x 20 +
28 x 49 nodes, and thousands of mixes share its makespan (a 14-node pipeline's T(m)) and
its exposure (A_14(K) exactly): they differ only through K, about 1.3e-6 s per pipeline,
so the loose K let almost every partial mix pass. Tighter, for any price lam > 0: a
completion y (Y pipelines, R nodes) of a mix of value <= U has every pipeline end by
d(K) <= d(pipes + few) (floors nondecreasing in K, so deadlines nonincreasing), so the
decided pipelines hold at most D = their capacity at d(pipes + few) and the completion
must hold sum y_n cap_n >= M - D =: missing, with caps at the tables' deadline (an upper
bound, K >= k_any). Then sum y_n (cap_n - lam) <= H_lam(R), the knapsack of the capacity
tables with every value lowered by lam, gives lam Y >= missing - H_lam(R):
K >= pipes + max(few, ceil((missing - H_lam(R)) / lam - 1e-6)) =: k' (the 1e-6 keeps
rounding from raising it), and the capacity test is
redone at d(k') (valid by the same monotonicity). A few prices (PENALTY_FRACTIONS x the
class size's capacity, near the rates at which pipelines trade capacity per node for
fewer pipelines) are tried; their tables are built only where more than _PENALTY_AFTER
children survive the plain test. Any price gives a valid bound, so the choice is speed.

Incumbent. Children are tried most pipelines first, so the first leaf is a near-
homogeneous mix (at 12,500 nodes 891 x 14 + 26, within 1e-4 s of the optimum; fewest
first, the old order, met 27 sizes x 1 pipeline at 84.9 s against 79.41 s at 1,024
nodes and then improved 402 times). After a leaf improves it (at most _IMPROVE_BUDGET
times) and when a class starts from an incumbent it has not tried, `_Class.improve` solves (`knapsack.fewest_pipelines`) a mix with few pipelines that still has
the capacity at the incumbent's deadline: a pipelines of the size with the most capacity
per node, b of one other size (per size the largest b that fits), the rest filled by the
capacity knapsack. It only proposes mixes, each solved exactly, so the answer is unchanged;
at 12,500 nodes it finds the optimum from the first leaf (5,939 mixes solved -> 9).

Seeds. `best(..., seeds)` solves the given mixes first (those that are mixes of this
search: its sizes, exactly N nodes); the planner passes the optima it found at the nearest
node counts below and above, each with one pipeline grown or shrunk by the difference
(or a pipeline of that size added or removed). Like the incumbent rounds they only lower
U, and no rule above cuts a mix of value <= U, so the answer is unchanged; on the
1,024-node spot day's 61 re-instantiations after the first, the nodes expanded fall
4,840 -> 946.

Capacity per node (the 1,024-node spot day). Before a class builds its tables: with an
incumbent U, every pipeline of size n of a mix of value <= U in class h runs at most
cap_n microbatches, caps taken at the tables' deadline (the latest over K >= k_any, as
above). The mix has some pipeline of h, so its capacity is at most
cap_h + sum over its other pipelines y_n cap_n = cap_h + sum y_n n (cap_n / n)
<= cap_h + (N - h) max_n (cap_n / n), the maximum over the class's usable sizes (an
unusable size, cap < 1, is in no such mix; h unusable rules the class out). Below M (with
a relative 1e-9 for the rounding of the ratios; capacities are integers) the class has no
mix of value <= U, and the class search would have recorded none: skipped, with its
incumbent round. It cuts 141 of the 296 classes of the spot day's 62 searches, most of
which built tables only to cut every child of their root.

Tables are rebuilt only when a class's capacities (whole microbatches) change, not at
every new U, and `fewest_pipelines` is asked once per (sizes, capacities) in a search:
the same inputs give the same arrays and proposals, so neither changes the search.

Checked against the part-by-part search it replaces (`planner.mix_reference`) and against
enumerating every mix (tests/planner/test_mix.py); figures in benchmarks/scale_plan_bench.py.

Limit. With about two microbatches a node (2,000 nodes and a global batch of 4,000, or 5,000
and 10,000) the bounds above cut little and the search runs for minutes or more, where
three or more a node plan 5,000 nodes in about a second (`ooblab plan --nodes 5000
--global-batch 14000`: 1.6 s). It stops after `SEARCH_LIMIT_S` seconds with a `SearchLimitError`
that says so, rather than run on unseen (a larger global batch plans such a cluster in
seconds); the answer of a search that ends is the exact one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .errors import InfeasibleError
from .knapsack import fewest_pipelines, knapsack_suffixes

_SLACK = 1 - 1e-12  # bounds are exact in real arithmetic; keep rounding from cutting a tie
_CAP_SLACK = 1e-6  # microbatches: keep rounding in T_n(m) from lowering a capacity
_IMPROVE_BUDGET = 8  # Lagrangian incumbent rounds started from leaves, per search
_PENALTY_AFTER = 4  # surviving children above which the pipeline-count bound is worth its tables
PENALTY_FRACTIONS = (0.01, 0.04, 0.16, 1.0)  # lambdas of the pipeline-count bound, x the class size's capacity
SEARCH_LIMIT_S = 60.0  # wall-clock seconds one search may take (see "Limit")


class SearchLimitError(InfeasibleError):
    """A mix search ran past `SEARCH_LIMIT_S`: the request is refused, not answered inexactly."""


@dataclass(frozen=True)
class MixResult:
    """The winning mix and how much work proving it took."""

    counts: tuple[tuple[int, int], ...]  # (size, pipelines of that size), sizes increasing
    seconds: float
    mixes_solved: int
    nodes_expanded: int
    lower_bound_s: float  # no mix is faster

    @property
    def sizes(self) -> tuple[int, ...]:
        """One entry per pipeline, increasing."""
        return tuple(n for n, x in self.counts for _ in range(x))


def _expand(counts: tuple[tuple[int, int], ...]) -> tuple[int, ...]:
    """One entry per pipeline, increasing (the tie-break after seconds and pipelines)."""
    return tuple(n for n, x in counts for _ in range(x))


class MixSearch:
    """The search of the module docstring, for one set of template lines."""

    def __init__(
        self,
        lines: Mapping[int, tuple[float, float]],
        first_stage_allreduce_s: Mapping[int, Sequence[float] | np.ndarray],
        total_microbatches: int,
        solve: Callable[[tuple[tuple[int, int], ...]], float],
        later_stage_floor_s: Mapping[int, Sequence[float]] | None = None,
        stage_times: Mapping[int, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None,
    ):
        """`lines[n] = (c, beta)`; `first_stage_allreduce_s[n][K]`: the first stage of the
        n-node template all-reducing across K pipelines, for K = 0 .. at least
        num_nodes // min size; `solve(counts)`: the exact iteration seconds of a mix given
        as ((size, count), ...) in increasing size. `later_stage_floor_s[n][K]` (optional,
        same K range): max over the template's later stages s of its all-reduce across K
        minus the backward time before s minus beta_n (see "Later stages" above).
        `stage_times[n]` (optional, for every size or none): (first layer of each stage,
        [K, stage] all-reduce seconds, per layer the backward seconds before its stage),
        for the class floor of "Whichever template ends last" above."""
        self.lines = dict(lines)
        self.first_stage_allreduce_s = first_stage_allreduce_s
        self.later_stage_floor_s = later_stage_floor_s or {}
        self.stage_times = stage_times or {}
        self.total = total_microbatches
        self.solve = solve

    def best(
        self, num_nodes: int, min_pipelines: int, seeds: Sequence[tuple[tuple[int, int], ...]] = ()
    ) -> MixResult | None:
        """The fastest mix over exactly `num_nodes` nodes with >= `min_pipelines`
        pipelines, or None when no mix exists. `seeds`: mixes ((size, count), ...) to
        solve first as incumbents (see "Seeds"); they change the work, not the answer."""
        sizes = [n for n in self.lines if 1 <= n <= num_nodes]
        if not sizes:
            return None
        run = _Run(self, num_nodes, min_pipelines, sizes)
        for counts in seeds:
            run.seed(counts)
        return run.result()


class _Run:
    """One search: the sizes as arrays, the classes, the incumbent."""

    def __init__(self, search: MixSearch, num_nodes: int, need: int, sizes: list[int]):
        self.solve = search.solve
        self.total, self.need, self.num_nodes = search.total, need, num_nodes
        self.kmax = kmax = num_nodes // min(sizes)
        floors, first_floors = {}, {}
        for n in sizes:
            values = np.asarray(search.first_stage_allreduce_s[n][: kmax + 1], dtype=float)
            if len(values) < kmax + 1:
                raise ValueError(
                    f"internal error: all-reduce times for {n} nodes stop at {len(values) - 1} pipelines, {kmax} needed"
                )
            first_floors[n] = np.minimum.accumulate(values[::-1])[::-1]  # min over K' >= K
            given = search.later_stage_floor_s.get(n)
            if given is not None:
                later = np.asarray(given[: kmax + 1], dtype=float)
                if len(later) < kmax + 1:
                    raise ValueError(
                        f"internal error: later-stage floors for {n} nodes stop at {len(later) - 1} pipelines, {kmax} needed"
                    )
                values = np.maximum(values, later)
            floors[n] = np.minimum.accumulate(values[::-1])[::-1]
        # the later-stage floors hold only when the makespan exceeds every forced first
        # microbatch (c_n + beta_n of every size); below that only the first stage's does
        self.forced_s = max(search.lines[n][0] + search.lines[n][1] for n in sizes)
        # any mix has K >= k and K >= N / largest size: the knapsack's floor A is taken there
        self.k_any = min(kmax, max(need, -(-num_nodes // max(sizes)), 0))

        def alone(n: int) -> float:  # fractional makespan of every node in n-node pipelines
            c, beta = search.lines[n]
            return c + self.total * beta * n / num_nodes

        self.order = order = sorted(sizes, key=lambda n: (alone(n) + float(floors[n][self.k_any]), -n))
        self.size = np.array(order)
        self.c = np.array([search.lines[n][0] for n in order])
        self.beta = np.array([search.lines[n][1] for n in order])
        self.alone = np.array([alone(n) for n in order])
        self.floor = np.array([floors[n] for n in order])  # [level, K]
        self.floor_first = np.array([first_floors[n] for n in order])
        stage_times = search.stage_times
        self.stage_times = [stage_times[n] for n in order] if all(n in stage_times for n in order) else None
        self.any_floor = self.floor[:, self.k_any]
        self.any_floor_first = self.floor_first[:, self.k_any]
        self.key: tuple[float, int] | None = None  # the incumbent's (seconds, -pipelines); ties compare sizes
        self.counts: tuple[tuple[int, int], ...] | None = None  # set with `key`
        self.solved = self.expanded = 0
        self.give_up_t = time.monotonic() + SEARCH_LIMIT_S
        self.improvements = 0  # calls of _Class.improve after a leaf improved the incumbent
        self.improved_at: tuple[float, int] | None = None  # the incumbent improve() last started from
        self.proposals: dict[tuple[bytes, bytes], tuple[tuple[int, int], ...] | None] = {}  # fewest_pipelines'

    # -- capacities and the incumbent --------------------------------------------------------
    def caps(self, deadline_s, levels) -> np.ndarray:
        """Most microbatches a pipeline of each level's size finishes by the deadlines
        (-inf: not even one)."""
        value = np.floor((deadline_s - self.c[levels]) / self.beta[levels] + _CAP_SLACK)
        return np.where(value >= 1, value, -np.inf)

    def deadline(self, value_s, floor_s, first_floor_s):
        """Latest end of every pipeline of a mix of value <= value_s whose exposure floors
        are floor_s (makespan above `forced_s`) and first_floor_s (always)."""
        return np.maximum(value_s - floor_s, np.minimum(value_s - first_floor_s, self.forced_s))

    def check_time(self) -> None:
        if time.monotonic() > self.give_up_t:
            raise SearchLimitError(
                f"the exact search of template mixes for {self.num_nodes} nodes and {self.total} microbatches "
                f"passed its limit of {SEARCH_LIMIT_S:g} s ({self.solved:,} mixes solved, {self.expanded:,} partial "
                f"mixes expanded): at {self.total / self.num_nodes:.2g} microbatches a node its bounds cut little; "
                "a larger global batch (3 or more a node) plans this cluster in seconds"
            )

    def record(self, counts: tuple[tuple[int, int], ...]) -> None:
        self.check_time()
        pipelines = sum(x for _, x in counts)
        if not self.need <= pipelines <= self.total:
            return
        seconds = self.solve(counts)
        self.solved += 1
        key = (seconds, -pipelines)
        if (
            self.key is None
            or key < self.key
            or (key == self.key and self.counts is not None and _expand(counts) < _expand(self.counts))
        ):
            self.key, self.counts = key, counts  # the sizes tuple is built only on a tie

    def seed(self, counts: tuple[tuple[int, int], ...]) -> None:
        """Solve `counts` as an incumbent if it is a mix of this search (its sizes, exactly
        the nodes, sizes increasing and distinct); anything else is ignored."""
        known = set(self.order)
        sizes = [n for n, _ in counts]
        if (
            all(n in known and x > 0 for n, x in counts)
            and sizes == sorted(set(sizes))
            and sum(n * x for n, x in counts) == self.num_nodes
        ):
            self.record(tuple((int(n), int(x)) for n, x in counts))

    def result(self) -> MixResult | None:
        # class h: the mixes whose largest floor A (ties: later in `order`) is level h's
        rank = sorted(range(len(self.order)), key=lambda j: (self.any_floor[j], j))
        classes = []
        for position, h in enumerate(rank):
            allowed = rank[: position + 1]
            fastest = float(self.alone[allowed].min())
            floor = self.any_floor[h] if fastest > self.forced_s else self.any_floor_first[h]
            bound = float(floor + fastest)  # (1) + (3), every K
            classes.append((bound, h, allowed))
        lowest = min((b for b, _, _ in classes), default=np.inf)
        for bound, h, allowed in sorted(classes, key=lambda item: (item[0], item[1])):
            if self.key is not None and bound * _SLACK > self.key[0]:
                break
            _Class(self, h, sorted(allowed)).search()
        if self.key is None:
            return None
        assert self.counts is not None  # set with `key`
        return MixResult(self.counts, self.key[0], self.solved, self.expanded, lowest)


class _Class:
    """The mixes that use level h and otherwise only `allowed` levels (floor A <= h's)."""

    def __init__(self, run: _Run, h: int, allowed: list[int]):
        self.run = run
        self.ids = np.array([h] + [j for j in allowed if j != h])  # search order: h first
        size = run.size[self.ids]
        self.size = size

        def pad(values: np.ndarray, fill: int) -> np.ndarray:
            return np.append(values, fill)

        self.smallest_after = pad(np.minimum.accumulate(size[::-1])[::-1], run.num_nodes + 1)
        self.largest_after = pad(np.maximum.accumulate(size[::-1])[::-1], 1)
        self.value_s: float | None = None  # the incumbent value the tables were built for
        self.tables = np.empty((0, 0))  # built by `refresh`
        self.penalised: list[tuple[float, np.ndarray]] = []  # (lambda, tables of caps - lambda)
        self.penalised_for: np.ndarray | None = None  # the capacities they were built for
        self.caps_now = np.empty(0)  # the capacities the tables were built with
        self.built = False
        self.capacity_tables = False  # built from capacities (not only reachability)
        # [K] floors of the class: `always` holds for every mix in it, `above` when the
        # makespan exceeds every forced first microbatch
        self.always, self.above = run.floor_first[h], run.floor[h]
        if run.stage_times is not None:
            starts, stage_s, _ = run.stage_times[h]
            latest_before = np.max([run.stage_times[j][2] for j in allowed], axis=0)  # per layer
            cross = (stage_s[: run.kmax + 1] - latest_before[starts][None, :]).max(axis=1)
            cross = np.minimum.accumulate(cross[::-1])[::-1]
            self.always = np.maximum(self.always, cross)
            self.above = np.maximum(self.above, cross)

    def refresh(self) -> None:
        """Rebuild the capacity tables when the incumbent improved: every pipeline of a
        mix in this class ends by U - floor A_h."""
        run = self.run
        if run.key is None:
            if not self.built:  # no incumbent yet: only which node counts are reachable
                self.tables = knapsack_suffixes(list(self.size), [0.0] * len(self.size), run.num_nodes)
                self.built = True
            return
        if run.key[0] == self.value_s:
            return
        self.value_s = run.key[0]
        deadline = run.deadline(self.value_s / _SLACK, self.above[run.k_any], self.always[run.k_any])
        caps = run.caps(deadline, self.ids)
        if self.capacity_tables and np.array_equal(caps, self.caps_now):
            return  # whole microbatches per pipeline unchanged: the same tables (and penalties)
        self.caps_now = caps
        self.tables = knapsack_suffixes(list(self.size), list(caps), run.num_nodes)
        self.built = self.capacity_tables = True

    def penalties(self) -> list[tuple[float, np.ndarray]]:
        """(lambda, suffix tables of caps - lambda) for the pipeline-count bound, built on
        first use for the current incumbent (a search that cuts without them skips them)."""
        if self.penalised_for is not self.caps_now:
            self.penalised_for = self.caps_now
            caps, self.penalised = self.caps_now, []
            finite = caps[np.isfinite(caps)]
            if len(finite):
                unit = float(caps[0]) if np.isfinite(caps[0]) else float(finite.min())
                for fraction in PENALTY_FRACTIONS:
                    lam = fraction * unit
                    if lam > 0:
                        tables = knapsack_suffixes(list(self.size), list(caps - lam), self.run.num_nodes)
                        self.penalised.append((lam, tables))
        return self.penalised

    def search(self) -> None:
        run = self.run
        if run.key is not None:  # the class's own floors may already rule it out
            fastest = float(run.alone[self.ids].min())
            floor = self.above[run.k_any] if fastest > run.forced_s else self.always[run.k_any]
            if (fastest + floor) * _SLACK > run.key[0] or self.short_of_capacity():
                return
        self.refresh()
        self.improve()
        if self.tables[0, self.run.num_nodes] > -np.inf:
            self.visit(0, 0, self.run.num_nodes, [])

    def short_of_capacity(self) -> bool:
        """The class's capacity cut before its tables are built ("Capacity per node"):
        at the deadline `refresh` uses, one pipeline of h plus the rest of the nodes at the
        best capacity per node of any size in the class cannot carry the microbatches."""
        run = self.run
        assert run.key is not None  # called with an incumbent only
        deadline = run.deadline(run.key[0] / _SLACK, self.above[run.k_any], self.always[run.k_any])
        caps = run.caps(deadline, self.ids)
        if not np.isfinite(caps[0]):
            return True  # every mix of the class has a pipeline of h
        usable = np.isfinite(caps)
        per_node = float((caps[usable] / self.size[usable]).max())
        most = float(caps[0]) + (run.num_nodes - int(self.size[0])) * per_node
        return most < run.total * (1 - 1e-9)

    def improve(self, rounds: int = 4) -> None:
        """Incumbents before the search (see "Incumbent"): at the incumbent's deadline, the
        mix of the class with enough capacity and the fewest pipelines a Lagrangian
        knapsack finds; solved like any mix, so only the incumbent can change."""
        run = self.run
        for _ in range(rounds):
            if run.key is None or run.key == run.improved_at:
                return
            run.improved_at = run.key
            pipelines = min(-run.key[1], run.kmax)
            deadline = run.deadline(run.key[0], self.above[pipelines], self.always[pipelines])
            caps = run.caps(np.full(len(self.ids), deadline), self.ids)
            key = (self.ids.tobytes(), caps.tobytes())  # same sizes and capacities: same proposal
            if key not in run.proposals:
                run.proposals[key] = fewest_pipelines(self.size, caps, run.num_nodes, run.total)
            counts = run.proposals[key]
            if counts is None:
                return
            before = run.key
            run.record(counts)
            self.refresh()
            if run.key == before:
                return

    def visit(self, start: int, count: int, remaining: int, picks: list[tuple[int, int]]) -> None:
        """Children of a partial mix: a class level >= start and how many pipelines of
        it (picks: the (class level, count) decided so far; the root must pick h)."""
        run = self.run
        run.expanded += 1
        run.check_time()
        total = run.total
        stop = 1 if not picks else len(self.ids)
        per_level = remaining // self.size[start:stop]
        if not per_level.any():
            return
        level = np.repeat(np.arange(start, stop), per_level)
        group_start = np.repeat(np.cumsum(per_level) - per_level, per_level)
        x = np.arange(len(level)) - group_start + 1
        rest = remaining - x * self.size[level]
        pipes = count + x
        leaf = rest == 0
        after = level + 1
        few = np.where(leaf, 0, -(-rest // self.largest_after[after]))
        many = np.where(leaf, 0, rest // self.smallest_after[after])
        later = self.tables[after, rest]  # -inf: rest is no sum of later sizes
        ok = (later > -np.inf) & (pipes + many >= run.need) & (pipes + few <= total)
        if run.key is not None:
            k_floor = np.minimum(pipes + few, run.kmax)
            deadline = run.deadline(run.key[0] / _SLACK, self.above[k_floor], self.always[k_floor])
            decided = x * run.caps(deadline, self.ids[level])
            for j, count_j in picks:
                decided = decided + count_j * run.caps(deadline, self.ids[j])
            ok &= later + decided >= total
            if np.count_nonzero(ok) > _PENALTY_AFTER and self.penalties():
                # completions reaching the capacity still missing need Y >= (missing - H_lam) / lam
                missing = np.where(ok, total - decided, 0.0)
                extra = few.astype(float)
                for lam, table in self.penalised:  # built by penalties() above
                    extra = np.maximum(extra, np.ceil((missing - table[after, rest]) / lam - _CAP_SLACK))
                k_tight = np.minimum(pipes + np.where(leaf, 0, extra), run.kmax).astype(int)
                tighter = ok & (k_tight > k_floor)
                if tighter.any():
                    deadline = run.deadline(run.key[0] / _SLACK, self.above[k_tight], self.always[k_tight])
                    have = later + x * run.caps(deadline, self.ids[level])
                    for j, count_j in picks:
                        have = have + count_j * run.caps(deadline, self.ids[j])
                    ok &= have >= total
        chosen = np.nonzero(ok)[0]
        for index in chosen[np.lexsort((-x[chosen], level[chosen]))]:  # per level, most pipelines first
            j, xj = int(level[index]), int(x[index])
            picks.append((j, xj))
            if leaf[index]:
                before = run.key
                run.record(tuple(sorted((int(self.size[l]), m) for l, m in picks)))
                if run.key != before and run.improvements < _IMPROVE_BUDGET:
                    run.improvements += 1
                    self.improve()
                self.refresh()
            elif self.tables[j + 1, rest[index]] > -np.inf:
                self.visit(j + 1, int(pipes[index]), int(rest[index]), picks)
            picks.pop()
