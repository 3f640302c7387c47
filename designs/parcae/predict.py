"""Parcae's availability predictor: the live node count of the next intervals, from the past.

Parcae (Duan et al., NSDI'24, section 4 "availability predictor") forecasts the number of
available instances per interval with an ARIMA model over a short window of past interval
counts; its code (JF-D/Parcae, liveput/trace_prediction.py) fits ARIMA(p=1, d=1, q=0) on
the last `window` interval counts, rounds, then applies two guards: every later forecast
stays within `grow_bound` (3 there) of the first one, and all stay within the cluster's
bounds. A flat history forecasts itself.

ARIMA(1, 1, 0) without a constant is an AR(1) on the first differences, d_t = phi d_{t-1} + e;
here phi is its least-squares fit over the window (clamped to [-1, 1], the stationary
range; no differences or a zero denominator: phi = 0), so the k-th forecast difference is
phi^k times the last one. That is the whole model: numpy or statsmodels add nothing at this
size, and the fit is exact arithmetic a test can check by hand.

Pure and causal by construction: `forecast` sees only the history it is given.
"""

from __future__ import annotations

from collections.abc import Sequence

GROW_BOUND = 3  # the code's in_grow_bound / out_grow_bound


def ar1_coefficient(history: Sequence[float]) -> float:
    """Least-squares phi of d_t = phi d_{t-1} over the differences of `history`."""
    diffs = [b - a for a, b in zip(history, history[1:])]
    num = sum(x * y for x, y in zip(diffs, diffs[1:]))
    den = sum(x * x for x in diffs[:-1])
    if den == 0:
        return 0.0
    return max(-1.0, min(1.0, num / den))


def forecast(
    history: Sequence[int], steps: int, *, upper: int, lower: int = 0, grow_bound: int = GROW_BOUND
) -> tuple[int, ...]:
    """The live node counts of the next `steps` intervals after `history` (oldest first,
    its last entry the count now)."""
    if steps < 1:
        raise ValueError(f"a forecast needs at least one step, got {steps}")
    if not history:
        raise ValueError("a forecast needs at least one past count")
    last = history[-1]
    if len(set(history)) == 1:
        values = [float(last)] * steps
    else:
        phi = ar1_coefficient(history)
        diff = float(history[-1] - history[-2])
        values, level = [], float(last)
        for _ in range(steps):
            diff *= phi
            level += diff
            values.append(level)
    out = [int(round(v)) for v in values]
    first = out[0]
    out = [min(first + grow_bound, max(first - grow_bound, v)) for v in out]
    return tuple(min(upper, max(lower, v)) for v in out)
