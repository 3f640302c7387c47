"""The fits behind `communication.json`: a link's latency and bandwidth, and the per-hop overhead.

Pure arithmetic on measured points (no torch, no processes: `comm_profile` measures).

- `fit_link`: one-way seconds of B bytes = `latency_s + B / bytes_per_s` (a
  `planner.profile.LinkProfile`), fitted by least squares on relative residuals (each
  point weighted by 1 / seconds^2), so the microsecond-scale small messages set the
  latency and the large ones the bandwidth, instead of the largest sizes deciding both.
- `fit_hop_overhead`: stage i of S, per microbatch, pays its compute plus, for each of its
  outgoing sends (forward if i < S-1, backward if i > 0), `hop_overhead_s + alpha x
  transfer_s`; the iteration is the 1F1B cost model (`planner.costmodel.pipeline_time_s`)
  of those weights. With `alpha` = 1 (the transfer fully on the critical path, what the
  planner charges) this fits `hop_overhead_s` alone; `fit_overlap` also fits `alpha`
  (0: transfers hidden behind compute), which boundary sizes that differ make
  identifiable. `fit_latency_only` reads the hop cost as a pure delay on each message
  instead (a replay of torch's 1F1B order, `schedule_s`: the stages go on while messages
  travel), the other end of what may overlap. All report each setting's residual; the
  smaller ones say which reading the runtime follows.

The cost model is piecewise linear in h (linear between the points where a run's
bottleneck stage changes, with jumps there: Eq. 1-4 is not continuous in the weights), so
`fit_hop_overhead` takes each piece's least-squares optimum and keeps the best: exact, not
a local search. `fit_overlap` does that for each alpha of a grid, then refines alpha by a
golden-section search; `fit_latency_only` (the replay is continuous, max-plus) uses
Gauss-Newton steps.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from planner.costmodel import bottleneck_index, pipeline_time_s
from planner.profile import LinkProfile


class FitError(ValueError):
    """The points do not determine the fit (too few, or it gives non-physical figures)."""


def fit_link(points: Sequence[tuple[int, float]]) -> LinkProfile:
    """Latency and bandwidth from (bytes, one-way seconds) points of at least two sizes."""
    if len({b for b, _ in points}) < 2:
        raise FitError(f"a link fit needs points of at least two sizes, got {len(points)} point(s)")
    if any(not (math.isfinite(s) and s > 0) or b < 0 for b, s in points):
        raise FitError("a link fit needs positive finite times and non-negative sizes")
    # weighted normal equations of s = a + c b, weights 1 / s^2
    sw = sb = sbb = ss = sbs = 0.0
    for b, s in points:
        w = 1.0 / (s * s)
        sw, sb, sbb, ss, sbs = sw + w, sb + w * b, sbb + w * b * b, ss + w * s, sbs + w * b * s
    det = sw * sbb - sb * sb
    latency = (sbb * ss - sb * sbs) / det
    slope = (sw * sbs - sb * ss) / det
    if not (latency > 0 and slope > 0):
        raise FitError(f"the link fit is not physical (latency {latency:.3g} s, {slope:.3g} s per byte): too noisy")
    return LinkProfile(latency, 1.0 / slope)


@dataclass(frozen=True)
class HopRun:
    """One measured pipeline setting: S stages (their measured compute per microbatch,
    forward + backward), m microbatches, boundary tensors of `boundary_bytes`, and the
    measured iteration (median)."""

    stage_compute_s: tuple[float, ...]
    num_microbatches: int
    boundary_bytes: int
    measured_s: float
    forward_share: float = 1 / 3  # forward's part of each stage's compute (for `schedule_s`)

    @property
    def num_stages(self) -> int:
        return len(self.stage_compute_s)


def hops_per_stage(num_stages: int) -> list[int]:
    """Outgoing sends per microbatch: forward from all but the last, backward from all but the first."""
    return [int(i < num_stages - 1) + int(i > 0) for i in range(num_stages)]


def model_s(run: HopRun, link: LinkProfile, hop_overhead_s: float, alpha: float = 1.0) -> float:
    """The 1F1B cost model's iteration for `run` with the communication term."""
    per_hop = hop_overhead_s + alpha * link.transfer_s(run.boundary_bytes)
    weights = [c + n * per_hop for c, n in zip(run.stage_compute_s, hops_per_stage(run.num_stages))]
    return pipeline_time_s(weights, run.num_microbatches)


def _slope(run: HopRun, link: LinkProfile, h: float, alpha: float) -> float:
    """dT/dh at (h, alpha) on the linear piece of the current bottleneck k*: how many hop
    costs T1 + T2 + T3 hold."""
    hops = hops_per_stage(run.num_stages)
    per_hop = h + alpha * link.transfer_s(run.boundary_bytes)
    k = bottleneck_index([c + n * per_hop for c, n in zip(run.stage_compute_s, hops)])
    return float(sum(hops) + (run.num_microbatches - run.num_stages + k - 1) * hops[k] + sum(hops[k:]))


@dataclass(frozen=True)
class HopFit:
    hop_overhead_s: float
    alpha: float  # fraction of the transfer time on the critical path (1 when not fitted)
    residuals_s: tuple[float, ...]  # measured - model, per run

    @property
    def rms_residual_s(self) -> float:
        return math.sqrt(sum(r * r for r in self.residuals_s) / len(self.residuals_s))


def _breaks(run: HopRun) -> list[float]:
    """Per-hop costs at which the cost model's bottleneck stage can change (two stages with
    different hop counts tie); between them the iteration is linear in the per-hop cost."""
    hops, c = hops_per_stage(run.num_stages), run.stage_compute_s
    return [
        (c[b] - c[a]) / (hops[a] - hops[b])
        for a in range(run.num_stages)
        for b in range(a + 1, run.num_stages)
        if hops[a] != hops[b]
    ]


def _check_runs(runs: Sequence[HopRun]) -> None:
    if not runs or any(r.num_stages < 2 for r in runs):
        raise FitError("the hop fit needs runs of at least two stages")


def _fit_h(runs: Sequence[HopRun], link: LinkProfile, alpha: float) -> HopFit:
    """The least-squares `hop_overhead_s` for a given `alpha`, exactly: the model is linear
    in h between the bottleneck changes of all runs (and may jump at them, Eq. 1-4 is not
    continuous there), so each interval's own optimum, kept inside it, is a candidate, and
    the best candidate by the true squared residuals wins."""
    offsets = [alpha * link.transfer_s(r.boundary_bytes) for r in runs]
    cuts = sorted({p - o for r, o in zip(runs, offsets) for p in _breaks(r)})
    edges = [-math.inf, *cuts, math.inf]
    inside = 1e-12  # seconds: candidates stay this far inside their interval
    best: tuple[float, float] | None = None
    for lo, hi in zip(edges, edges[1:]):
        if hi - lo <= 2 * inside:
            continue
        mid = (lo + hi) / 2 if math.isfinite(lo + hi) else (hi - 1.0 if math.isfinite(hi) else lo + 1.0)
        if not (math.isfinite(lo) or math.isfinite(hi)):
            mid = 0.0
        slopes = [_slope(r, link, mid, alpha) for r in runs]
        values = [model_s(r, link, mid, alpha) for r in runs]
        h = mid + sum(a * (r.measured_s - v) for a, r, v in zip(slopes, runs, values)) / sum(a * a for a in slopes)
        h = min(max(h, lo + inside), hi - inside)
        sse = sum((r.measured_s - model_s(r, link, h, alpha)) ** 2 for r in runs)
        if best is None or sse < best[0]:
            best = (sse, h)
    assert best is not None  # the unbounded intervals are always there
    h = best[1]
    return HopFit(h, alpha, tuple(r.measured_s - model_s(r, link, h, alpha) for r in runs))


ALPHA_RANGE = (-2.0, 10.0)  # where fit_overlap looks for the transfer's share


def _fit_alpha(runs: Sequence[HopRun], link: LinkProfile) -> HopFit:
    """Both parameters: for each alpha the exact h (`_fit_h`); alpha on a grid of 0.1 over
    `ALPHA_RANGE`, then a golden-section search around the best grid point."""
    if len({link.transfer_s(r.boundary_bytes) for r in runs}) < 2:
        raise FitError("fitting the overlap needs runs whose boundary transfers differ")

    def sse(alpha: float) -> float:
        return sum(r * r for r in _fit_h(runs, link, alpha).residuals_s)

    lo_range, hi_range = ALPHA_RANGE
    grid = [lo_range + 0.1 * i for i in range(round((hi_range - lo_range) / 0.1) + 1)]
    start = min(grid, key=sse)
    lo, hi = max(lo_range, start - 0.1), min(hi_range, start + 0.1)
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = sse(a), sse(b)
    while hi - lo > 1e-9:
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = sse(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = sse(b)
    return _fit_h(runs, link, min((start, a, b), key=sse))


def fit_hop_overhead(runs: Sequence[HopRun], link: LinkProfile) -> HopFit:
    """`hop_overhead_s` with the whole transfer charged (the cost model's charge)."""
    _check_runs(runs)
    return _fit_h(runs, link, 1.0)


def fit_overlap(runs: Sequence[HopRun], link: LinkProfile) -> HopFit:
    """`hop_overhead_s` and the fraction `alpha` of the transfer that is not overlapped
    (searched in `ALPHA_RANGE`)."""
    _check_runs(runs)
    return _fit_alpha(runs, link)


def _torch_1f1b_order(num_stages: int, num_microbatches: int) -> list[list[tuple[str, int]]]:
    """Each stage's operations in `Schedule1F1B`'s order: min(m, S - i) forwards, then
    backward and forward alternately, then the remaining backwards."""
    orders = []
    for i in range(num_stages):
        warm = min(num_microbatches, num_stages - i)
        ops = [("F", j) for j in range(warm)]
        forward, backward = warm, 0
        while backward < num_microbatches:
            ops.append(("B", backward))
            backward += 1
            if forward < num_microbatches:
                ops.append(("F", forward))
                forward += 1
        orders.append(ops)
    return orders


def schedule_s(run: HopRun, delay_s: float) -> float:
    """The iteration of torch's 1F1B order when each boundary message arrives `delay_s` after
    it is sent and the sender goes on at once (the hop cost as pure latency)."""
    s = run.num_stages
    orders = _torch_1f1b_order(s, run.num_microbatches)
    done: dict[tuple[str, int, int], float] = {}
    clock, cursor = [0.0] * s, [0] * s
    moved = True
    while moved:
        moved = False
        for i in range(s):
            forward_s = run.stage_compute_s[i] * run.forward_share
            backward_s = run.stage_compute_s[i] - forward_s
            while cursor[i] < len(orders[i]):
                kind, j = orders[i][cursor[i]]
                if kind == "F":
                    source, hop = ("F", i - 1, j), i > 0
                else:
                    source, hop = (("F", i, j), False) if i == s - 1 else (("B", i + 1, j), True)
                if source[1] >= 0 and source not in done:
                    break  # waits for a message not sent yet
                ready = done[source] + (delay_s if hop else 0.0) if source[1] >= 0 else 0.0
                clock[i] = max(clock[i], ready) + (forward_s if kind == "F" else backward_s)
                done[(kind, i, j)] = clock[i]
                cursor[i] += 1
                moved = True
    if any(c < len(o) for c, o in zip(cursor, orders)):
        raise FitError("internal error: the 1F1B replay deadlocked")
    return max(clock)


def fit_latency_only(runs: Sequence[HopRun], link: LinkProfile) -> HopFit:
    """`hop_overhead_s` read as a delay on each message with the transfer (`schedule_s`), not
    a cost the stages pay. Gauss-Newton with slopes by differences (the replay is piecewise
    linear in the delay)."""
    if not runs or any(r.num_stages < 2 for r in runs):
        raise FitError("the hop fit needs runs of at least two stages")

    def predict(r: HopRun, h: float) -> float:
        return schedule_s(r, h + link.transfer_s(r.boundary_bytes))

    h, step = 0.0, 1e-6
    for _ in range(20):
        predicted = [predict(r, h) for r in runs]
        slopes = [(predict(r, h + step) - p) / step for r, p in zip(runs, predicted)]
        change = sum(a * (r.measured_s - p) for a, r, p in zip(slopes, runs, predicted)) / sum(a * a for a in slopes)
        h += change
        if abs(change) < 1e-12:
            break
    return HopFit(h, 1.0, tuple(r.measured_s - predict(r, h) for r in runs))


def hostname() -> str:
    return socket.gethostname()
