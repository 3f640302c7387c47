"""A restart's cost against the number of processes it starts: a least-squares line.

`benchmarks/restart_fit.py` measures the parts of a restart (process start-up, process
group creation, checkpoint load) at several process counts and fits each with
`fit_line`; the validation's calibration (`calibrate`) fits its own restarts at two or
three counts the same way. Kept free of torch and simpy so both sides and the tests use
one definition.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LineFit:
    """seconds = intercept_s + slope_s * n, fitted to `points` ((n, seconds) pairs)."""

    intercept_s: float
    slope_s: float
    points: tuple[tuple[float, float], ...]

    def at(self, n: float) -> float:
        return self.intercept_s + self.slope_s * n

    @property
    def residuals_s(self) -> tuple[float, ...]:
        return tuple(s - self.at(n) for n, s in self.points)

    @property
    def rms_residual_s(self) -> float:
        res = self.residuals_s
        return math.sqrt(sum(r * r for r in res) / len(res)) if res else 0.0

    def to_dict(self) -> dict:
        return {"intercept_s": self.intercept_s, "slope_s": self.slope_s, "points": [list(p) for p in self.points]}


def fit_line(points: Sequence[tuple[float, float]]) -> LineFit:
    """Ordinary least squares through (n, seconds); at least two distinct n (a single
    count fixes no slope: that is an error, not a flat line)."""
    pts = tuple((float(n), float(s)) for n, s in points)
    if any(not (math.isfinite(n) and math.isfinite(s)) for n, s in pts):
        raise ValueError(f"a restart fit needs finite points, got {pts}")
    counts = {n for n, _ in pts}
    if len(counts) < 2:
        raise ValueError(f"a restart fit needs points at two or more process counts, got {sorted(counts)}")
    mean_n = sum(n for n, _ in pts) / len(pts)
    mean_s = sum(s for _, s in pts) / len(pts)
    sxx = sum((n - mean_n) ** 2 for n, _ in pts)
    sxy = sum((n - mean_n) * (s - mean_s) for n, s in pts)
    slope = sxy / sxx
    return LineFit(mean_s - slope * mean_n, slope, pts)


def fit_quadratic_gain(points: Sequence[tuple[float, float]]) -> float | None:
    """How much a quadratic term lowers the RMS residual against the line, as a fraction
    (0: none; the benchmark reports it to say whether the line is the right form). None
    with fewer than four distinct counts."""
    pts = [(float(n), float(s)) for n, s in points]
    if len({n for n, _ in pts}) < 4:
        return None
    line = fit_line(pts)
    # least squares on (1, n, n^2) by the normal equations (3x3, solved by Cramer's rule)
    sums = [sum(n**k for n, _ in pts) for k in range(5)]
    rhs = [sum(s * n**k for n, s in pts) for k in range(3)]
    a = [[sums[i + j] for j in range(3)] for i in range(3)]

    def det(m):
        return (
            m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
            - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
        )

    d = det(a)
    if d == 0:
        return None
    coef = []
    for k in range(3):
        m = [row[:] for row in a]
        for i in range(3):
            m[i][k] = rhs[i]
        coef.append(det(m) / d)
    rms_q = math.sqrt(sum((s - (coef[0] + coef[1] * n + coef[2] * n * n)) ** 2 for n, s in pts) / len(pts))
    base = line.rms_residual_s
    if base <= 1e-9 * max(1.0, max(abs(s) for _, s in pts)):  # on the line already (up to rounding)
        return 0.0
    return max(0.0, 1.0 - rms_q / base)
