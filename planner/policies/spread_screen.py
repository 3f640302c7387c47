"""Many template mixes' iteration times at once, to within 1e-9, for the join's spread.

`oobleck_join._spread` asks, for every spare, which one-node growth (one pipeline of size s
to s + 1) shortens the plan's exact iteration time (`Planner.mix_seconds`) most. A mix's
time is the slowest pipeline after the exact integer batch split, plus the all-reduce left
exposed; evaluating it per growth was most of a 1,024-node spot day. `MixScreen.approx`
computes the same two terms for a batch of mixes with array operations:

- the split: the threshold unit cost theta (the smallest unit c + beta m, m >= 2, with the
  microbatches beyond each pipeline's first at or below it), found from the fractional
  optimum by moving whole levels as `batching.split_groups` does, then each group's
  latest pipeline (base + its largest tied extra, the tied units going to the lowest
  indices). This part is exact: the same float comparisons of the same unit costs;
- the times: each group's latest finish as c + beta m (the templates' time is linear in
  m; checked per template, else `approx` declines), and the exposed all-reduce end as
  max over templates t, t' of finish(t') + P(t, t'), with P(t, t') = max over stages s of
  t of (all-reduce of s's layers - min over s's layers of t''s backward-before): the same
  maxima as `allreduce.grouped_exposed_allreduce_s`, regrouped, so only rounding differs.

The callers decide from these values only where a 1e-9 relative margin separates them and
ask `Planner.mix_seconds` otherwise, so decisions stay those of the exact times.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence

import numpy as np

from ..batching import linear_cost
from ..planner import Planner
from ..templates import PipelineTemplate

RELATIVE_MARGIN = 1e-9  # |approx - exact| stays far below this (rounding is ~1e-15 relative)

_SCREENS: weakref.WeakKeyDictionary[Planner, dict[int, MixScreen]] = weakref.WeakKeyDictionary()


def screen_for(planner: Planner, pipelines: int) -> MixScreen:
    """The (cached) screen of `planner`'s mixes of `pipelines` pipelines in all."""
    per = _SCREENS.setdefault(planner, {})
    if pipelines not in per:
        per[pipelines] = MixScreen(planner, pipelines)
    return per[pipelines]


class MixScreen:
    """Approximate `mix_seconds` of mixes with a fixed pipeline count (the all-reduce of one
    replica count), caching per-template and per-template-pair data."""

    def __init__(self, planner: Planner, pipelines: int):
        self.planner = planner
        self.pipelines = pipelines
        self.total = planner.job.num_microbatches
        self._layer_s = planner.layer_allreduce_s(pipelines) if pipelines > 1 else None
        self._templates: dict[int, PipelineTemplate] = {}
        self._line: dict[int, tuple[float, float] | None] = {}  # None: not linear in m
        self._pair: dict[tuple[int, int], float] = {}  # (t, t') -> P(t, t')

    def _linear(self, size: int) -> tuple[float, float] | None:
        if size not in self._line:
            template = self.planner.template(size)
            line = None if template is None else linear_cost(template)
            if template is not None and line is not None:
                self._templates[size] = template
                c, beta = line
                for m in (1, 2, self.total):
                    exact = template.iteration_time(m)
                    if not beta > 0 or abs(exact - (c + beta * m)) > 1e-12 * abs(exact):
                        line = None
                        break
            self._line[size] = line
        return self._line[size]

    def _pairs(self, sizes: list[int]) -> np.ndarray:
        """P[t, t'] over `sizes`: max over stages s of template t of (all-reduce of s's
        layers - min over s's layers of t''s backward-before), missing rows filled at once."""
        for t in sizes:
            missing = [tp for tp in sizes if (t, tp) not in self._pair]
            if missing:
                starts = self._templates[t].stage_starts
                spans = np.add.reduceat(self._layer_s, starts)
                before = np.stack([self._templates[tp].backward_before_s for tp in missing])
                worst = (spans[None, :] - np.minimum.reduceat(before, starts, axis=1)).max(axis=1)
                self._pair.update(((t, tp), float(v)) for tp, v in zip(missing, worst))
        return np.array([[self._pair[t, tp] for tp in sizes] for t in sizes])

    def approx(self, mixes: Sequence[Mapping[int, int]]) -> np.ndarray | None:
        """Each mix's ({size: pipelines}, summing to `pipelines`) iteration time within
        RELATIVE_MARGIN, or None where the screen cannot vouch for that (a template not
        linear in its microbatches, too few microbatches): ask `mix_seconds` then."""
        sizes = sorted({n for mix in mixes for n, x in mix.items() if x})
        lines = [self._linear(n) for n in sizes]
        need = self.total - self.pipelines
        if not sizes or need < 0 or any(line is None for line in lines):
            return None
        c = np.array([line[0] for line in lines if line is not None])
        beta = np.array([line[1] for line in lines if line is not None])
        x = np.array([[mix.get(n, 0) for n in sizes] for mix in mixes], dtype=np.int64)
        present = x > 0
        top = np.ones_like(x) if need == 0 else self._latest_units(c, beta, x, need)
        finish = np.where(present, c + beta * top, -np.inf)
        latest = finish.max(axis=1)
        if self._layer_s is None:
            return latest
        pair = self._pairs(sizes)  # [t, t']
        reach = np.where(present[:, :, None], pair[None, :, :], -np.inf).max(axis=1)  # [mix, t']
        end = np.where(present, finish + reach, -np.inf).max(axis=1)
        return np.maximum(latest, end)

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
        estimate = (self.total + (x * (c / beta)).sum(axis=1)) / (x / beta).sum(axis=1)
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
        below = self._levels(c, beta, theta, True)
        tied = self._levels(c, beta, theta, False) - below
        left = need - (x * below).sum(axis=1)
        capacity = np.where(present, x * tied, 0)
        before = np.cumsum(capacity, axis=1) - capacity
        got = np.clip(left[:, None] - before, 0, capacity)  # tied units, lowest indices first
        extra = np.where((tied > 0) & (got >= tied), tied, got)
        return 1 + below + extra
