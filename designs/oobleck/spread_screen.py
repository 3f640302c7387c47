"""Many template mixes' exact iteration times at once, for the join's spread.

`oobleck_join._spread` asks, for every spare, which one-node growth (one pipeline of size s
to s + 1) shortens the plan's exact iteration time (`Planner.mix_seconds`) most. A mix's
time is the slowest pipeline after the exact integer batch split, plus the all-reduce left
exposed; evaluating it growth by growth was most of a 1,024-node spot day (36,000 calls).
`MixScreen.seconds` returns the same floats for a batch of mixes:

- the split, with array operations over (mix, size): the threshold unit cost theta (the
  smallest unit c + beta m, m >= 2, with the microbatches beyond each pipeline's first at
  or below it), reached from the fractional optimum by moving whole levels as
  `batching.split_groups` does, then each size's busiest pipeline (base + its largest
  tied extra, tied units going to the lowest indices): the same comparisons of the same
  unit costs, so the same microbatch counts, and the finishes from the templates;
- the exposed all-reduce end of `allreduce.grouped_exposed_allreduce_s`, max over
  templates t, stages s of t and templates t' of (finish(t') - min over s's layers of
  t''s backward-before) + (all-reduce of s's layers). Rounding is monotone, so taking the
  minimum backward-before first gives the same floats; the per-(t, t') stage arrays are
  cached, and only the (t, t') whose real-valued maximum is within 1e-9 of the best are
  evaluated (rounding moves a term by ~1e-13, so no other can be the float maximum).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence

import numpy as np

from planner.batching import linear_cost
from planner.planner import Planner
from planner.templates import PipelineTemplate

_SCREENS: weakref.WeakKeyDictionary[Planner, dict[int, MixScreen]] = weakref.WeakKeyDictionary()


def screen_for(planner: Planner, pipelines: int) -> MixScreen:
    """The (cached) screen of `planner`'s mixes of `pipelines` pipelines in all."""
    per = _SCREENS.setdefault(planner, {})
    if pipelines not in per:
        shared = next(iter(per.values()))._shared if per else _Templates(planner)
        per[pipelines] = MixScreen(planner, pipelines, shared)
    return per[pipelines]


class _Templates:
    """What every pipeline count shares: templates, their lines and, per (t, t'), the
    minimum of t''s backward-before over each stage of t (padded with +inf to one width)."""

    def __init__(self, planner: Planner):
        self.planner = planner
        self.width = planner.profile.num_layers  # at most one stage per layer
        self.templates: dict[int, PipelineTemplate] = {}
        self.lines: dict[int, tuple[float, float] | None] = {}  # (c, beta); None: no template
        self.least: dict[tuple[int, int], np.ndarray] = {}

    def line(self, size: int) -> tuple[float, float] | None:
        if size not in self.lines:
            template = self.planner.template(size)
            line = None if template is None else linear_cost(template)
            if template is not None and line is not None and line[1] > 0:
                self.templates[size] = template
            else:
                line = None
            self.lines[size] = line
        return self.lines[size]

    def least_rows(self, t: int, others: list[int]) -> np.ndarray:
        missing = [tp for tp in others if (t, tp) not in self.least]
        if missing:
            starts = self.templates[t].stage_starts
            before = np.stack([self.templates[tp].backward_before_s for tp in missing])
            rows = np.full((len(missing), self.width), np.inf)
            rows[:, : len(starts)] = np.minimum.reduceat(before, starts, axis=1)
            self.least.update(((t, tp), row) for tp, row in zip(missing, rows))
        return np.stack([self.least[t, tp] for tp in others])


class MixScreen:
    """`mix_seconds` of many mixes with one pipeline count (so one all-reduce table),
    caching per-template and per-template-pair data."""

    def __init__(self, planner: Planner, pipelines: int, shared: _Templates):
        self.planner = planner
        self.pipelines = pipelines
        self.total = planner.job.num_microbatches
        self._shared = shared
        self._layer_s = planner.layer_allreduce_s(pipelines) if pipelines > 1 else None
        self._pair = np.full((0, 0), np.nan)  # [t, t'] by node count: P(t, t'), NaN until needed
        self._spans: dict[int, np.ndarray] = {}  # t -> all-reduce of each stage's layers (0-padded)

    def _spans_of(self, t: int) -> np.ndarray:
        if t not in self._spans:
            assert self._layer_s is not None  # pipelines > 1
            starts = self._shared.templates[t].stage_starts
            row = np.zeros(self._shared.width)
            row[: len(starts)] = np.add.reduceat(self._layer_s, starts)
            self._spans[t] = row
        return self._spans[t]

    def _pairs(self, sizes: list[int]) -> np.ndarray:
        """P[t, t'] over `sizes`: max over stages s of template t of (all-reduce of s's
        layers - min over s's layers of t''s backward-before); missing entries filled a
        row at a time. Indexed by node count (sizes are at most a few hundred)."""
        if sizes[-1] >= len(self._pair):
            grown = np.full((sizes[-1] + 33,) * 2, np.nan)  # room for a few more sizes
            grown[: len(self._pair), : len(self._pair)] = self._pair
            self._pair = grown
        index = np.array(sizes)
        pair = self._pair[np.ix_(index, index)]
        for row in np.nonzero(np.isnan(pair).any(axis=1))[0]:
            t = sizes[row]
            missing = [tp for tp, gap in zip(sizes, np.isnan(pair[row])) if gap]
            self._pair[t, missing] = (self._spans_of(t)[None, :] - self._shared.least_rows(t, missing)).max(axis=1)
        return self._pair[np.ix_(index, index)]

    def seconds(self, mixes: Sequence[Mapping[int, int]]) -> list[float] | None:
        """Each mix's ({size: pipelines}, summing to `pipelines`) `Planner.mix_seconds`,
        bit for bit, or None where a size has no template or there are fewer microbatches
        than pipelines (`mix_seconds` then says why)."""
        sizes = sorted({n for mix in mixes for n, x in mix.items() if x})
        lines = [self._shared.line(n) for n in sizes]
        need = self.total - self.pipelines
        if not sizes or need < 0 or any(line is None for line in lines):
            return None
        c = np.array([line[0] for line in lines if line is not None])
        beta = np.array([line[1] for line in lines if line is not None])
        x = np.array([[mix.get(n, 0) for n in sizes] for mix in mixes], dtype=np.int64)
        present = x > 0
        top = np.ones_like(x) if need == 0 else self._latest_units(c, beta, x, need)
        finish = np.full(x.shape, -np.inf)
        width = int(top.max()) + 1
        keys, where = np.unique((np.arange(len(sizes)) * width + top)[present], return_inverse=True)
        times = np.array([self._shared.templates[sizes[k // width]].iteration_time(int(k % width)) for k in keys])
        finish[present] = times[where.ravel()]  # each distinct (size, microbatches) timed once, exactly
        latest = finish.max(axis=1)
        if self._layer_s is None:
            return [float(v) for v in latest]  # one pipeline: nothing to all-reduce
        pair = self._pairs(sizes)  # [t, t']
        both = present[:, :, None] & present[:, None, :]
        score = np.where(both, finish[:, None, :] + pair[None, :, :], -np.inf)  # [mix, t, t'], real-valued end
        best = score.max(axis=(1, 2))
        slack = 1e-9 * (1.0 + np.abs(best))  # rounding moves a term by ~1e-13 of it
        rows, ts, tps = np.nonzero(score >= (best - slack)[:, None, None])  # the only candidates for the float maximum
        least = np.stack([self._shared.least[sizes[t], sizes[tp]] for t, tp in zip(ts, tps)])
        spans = np.stack([self._spans[sizes[t]] for t in ts])
        terms = ((finish[rows, tps][:, None] - least) + spans).max(axis=1)  # padding: -inf
        end = np.full(len(mixes), -np.inf)
        np.maximum.at(end, rows, terms)
        return [float(v) + max(0.0, float(e) - float(v)) for v, e in zip(latest, end)]

    def _levels(self, c: np.ndarray, beta: np.ndarray, theta: np.ndarray, strict: bool) -> np.ndarray:
        """`split_groups`' levels for every (mix, group): how many m >= 2 have c + beta m
        <= theta (< when strict), with the same float comparisons."""
        total = self.total
        t = theta[:, None]
        with np.errstate(invalid="ignore", over="ignore"):
            m = np.clip(np.floor((t - c) / beta), 1, total).astype(np.int64)

        def below(v: np.ndarray) -> np.ndarray:
            return v < t if strict else v <= t

        while True:
            down = (m >= 2) & ~below(c + beta * m)
            if not down.any():
                break
            m -= down
        while True:
            up = (m < total) & below(c + beta * (m + 1))
            if not up.any():
                break
            m += up
        return m - 1

    def _latest_units(self, c: np.ndarray, beta: np.ndarray, x: np.ndarray, need: int) -> np.ndarray:
        """Per (mix, group): the microbatches of the group's busiest pipeline in the exact split."""
        present = x > 0
        rows = np.arange(len(x))
        slope = (x / beta).sum(axis=1)  # units per second of theta
        estimate = (self.total + (x * (c / beta)).sum(axis=1)) / slope
        # one Newton step from the fractional optimum (floors lose about half a level per
        # pipeline): any start gives the same theta, a nearer one fewer level moves
        with np.errstate(invalid="ignore", over="ignore"):
            rough = np.clip(np.floor((estimate[:, None] - c) / beta), 1, self.total) - 1
        estimate = estimate + (need - (x * rough).sum(axis=1)) / slope
        held = self._levels(c, beta, estimate, False)
        count = (x * held).sum(axis=1)
        theta = np.empty(len(x))
        flip = slice(None, None, -1)
        active = count >= need  # drop the dearest level while `need` units remain
        while active.any():
            cost = np.where(present & (held > 0), c + beta * (1 + held), -np.inf)
            g = cost.shape[1] - 1 - cost[:, flip].argmax(axis=1)  # ties: the later group, as max() on (cost, g)
            worth = cost[rows, g]
            xg = x[rows, g]
            stop = active & (count - xg < need)
            theta[stop] = worth[stop]
            go = active & ~stop
            held[rows[go], g[go]] -= 1
            count[go] -= xg[go]
            active = go
        active = count < need  # take the cheapest next level until `need` are held
        while active.any():
            cost = np.where(present, c + beta * (2 + held), np.inf)
            g = cost.argmin(axis=1)
            worth = cost[rows, g]
            xg = x[rows, g]
            held[rows[active], g[active]] += 1
            count[active] += xg[active]
            done = active & (count >= need)
            theta[done] = worth[done]
            active = active & ~done
        at_most = self._levels(c, beta, theta, False) + 1  # the largest m with c + beta m <= theta
        m = at_most.copy()  # then the largest with c + beta m < theta (or 1): step off the ties
        while True:
            tie = (m >= 2) & ~(c + beta * m < theta[:, None])
            if not tie.any():
                break
            m -= tie
        below, tied = m - 1, at_most - m
        left = need - (x * below).sum(axis=1)
        capacity = np.where(present, x * tied, 0)
        before = np.cumsum(capacity, axis=1) - capacity
        got = np.clip(left[:, None] - before, 0, capacity)  # tied units, lowest indices first
        extra = np.where((tied > 0) & (got >= tied), tied, got)
        return 1 + below + extra
