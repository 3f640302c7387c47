"""Checkpoint intervals from checkpoint cost and failure rate (Young 1974, Daly 2006).

A blocking checkpoint that costs C seconds, taken every tau seconds of training on a job
that fails every M seconds on average, costs C / tau of the time in writes and about
tau / 2 per failure in lost work. Young's first-order optimum is tau = sqrt(2 C M) (J. W.
Young, "A first order approximation to the optimum checkpoint interval", CACM 17(9), 1974);
Daly's correction for the time the checkpoint itself takes is tau = sqrt(2 C M) - C, and
tau = M once C >= 2 M, where checkpointing more often than once per failure cannot pay (J. T.
Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps", FGCS
22(3), 2006: the first-order form of his estimate; his higher-order series is not used:
with C << M the terms it adds are below the simulator's one-iteration granularity).

`AdaptiveCheckpoints` is the run-level rule that re-derives tau while the job runs, as
CheckFreq does (Mohan, Phanishayee, Chidambaram, "CheckFreq: Frequent, Fine-Grained DNN
Checkpointing", FAST 2021: the frequency follows from checkpoint costs profiled online
rather than from a constant): `IntervalTracker` keeps what the engine has seen so far
and nothing else:

- C: the mean of the last `cost_window` checkpoints the engine charged (completed ones);
  before the first, the price of a checkpoint of the plan that trains, which the caller
  passes in (CheckFreq's profiling step, here taken at no cost);
- M: (seconds since the run started + `prior_mtbf_s`) / (interruptions seen + 1): the
  observed failure rate with one pseudo-failure over `prior_mtbf_s` as a prior, so that M is
  defined before the first failure and the observations take over as they accumulate (a
  Gamma-Poisson posterior mean with shape 1). An interruption is an instant at which the
  trace removes at least one node the job trains on.

Everything here is pure arithmetic on values already observed: the interval at time t
depends only on checkpoints charged and interruptions seen before t.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

RULES = ("young", "daly")
DEFAULT_PRIOR_MTBF_S = 3600.0
DEFAULT_COST_WINDOW = 3


def _check(checkpoint_s: float, mtbf_s: float) -> None:
    if not (math.isfinite(checkpoint_s) and checkpoint_s > 0):
        raise ValueError(f"checkpoint cost must be > 0 s, got {checkpoint_s!r}")
    if not (math.isfinite(mtbf_s) and mtbf_s > 0):
        raise ValueError(f"mean time between failures must be > 0 s, got {mtbf_s!r}")


def young_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Young's optimum training time between checkpoints, sqrt(2 C M) (both in seconds)."""
    _check(checkpoint_s, mtbf_s)
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly's first-order optimum, sqrt(2 C M) - C, and M once C >= 2 M."""
    _check(checkpoint_s, mtbf_s)
    if checkpoint_s >= 2.0 * mtbf_s:
        return mtbf_s
    return math.sqrt(2.0 * checkpoint_s * mtbf_s) - checkpoint_s


INTERVALS = {"young": young_interval_s, "daly": daly_interval_s}


@dataclass(frozen=True)
class AdaptiveCheckpoints:
    """The rule (young or daly), the prior mean time between failures (s) and how many of
    the latest checkpoint costs are averaged."""

    rule: str = "young"
    prior_mtbf_s: float = DEFAULT_PRIOR_MTBF_S
    cost_window: int = DEFAULT_COST_WINDOW

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"unknown checkpoint interval rule {self.rule!r}; known: {', '.join(RULES)}")
        if not (isinstance(self.prior_mtbf_s, (int, float)) and math.isfinite(self.prior_mtbf_s)):
            raise ValueError(
                f"prior mean time between failures must be a finite number of s, got {self.prior_mtbf_s!r}"
            )
        if not self.prior_mtbf_s > 0:
            raise ValueError(f"prior mean time between failures must be > 0 s, got {self.prior_mtbf_s!r}")
        if isinstance(self.cost_window, bool) or not isinstance(self.cost_window, int) or self.cost_window < 1:
            raise ValueError(f"checkpoint cost window must be a whole number >= 1, got {self.cost_window!r}")

    def interval_s(self, checkpoint_s: float, mtbf_s: float) -> float:
        return INTERVALS[self.rule](checkpoint_s, mtbf_s)


class IntervalTracker:
    """What an engine has observed, and the interval it implies (see the module doc)."""

    def __init__(self, rule: AdaptiveCheckpoints, start_s: float):
        self.rule = rule
        self.start_s = start_s
        self.costs_s: deque[float] = deque(maxlen=rule.cost_window)
        self.interruptions = 0
        self._last_t: float | None = None

    def checkpointed(self, seconds: float) -> None:
        """A checkpoint completed after the engine charged `seconds` for it."""
        self.costs_s.append(float(seconds))

    def interrupted(self, time_s: float) -> None:
        """The trace removed working nodes at `time_s` (one count per instant)."""
        if time_s != self._last_t:
            self.interruptions += 1
            self._last_t = time_s

    def checkpoint_s(self, profiled_s: float) -> float:
        """C: the mean of the latest charged checkpoints, else `profiled_s`."""
        return sum(self.costs_s) / len(self.costs_s) if self.costs_s else profiled_s

    def mtbf_s(self, now_s: float) -> float:
        """M at `now_s`: the observed failure rate with the prior's pseudo-failure."""
        return (max(0.0, now_s - self.start_s) + self.rule.prior_mtbf_s) / (self.interruptions + 1)

    def interval_s(self, now_s: float, profiled_s: float) -> float:
        """The training seconds between checkpoints now; 0 when checkpoints are free (a
        cost factor of 0): one after every iteration then loses nothing."""
        cost = self.checkpoint_s(profiled_s)
        if not cost > 0:
            return 0.0
        return self.rule.interval_s(cost, self.mtbf_s(now_s))
