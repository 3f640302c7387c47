"""The fits behind `communication.json`: a link's latency and bandwidth, and the per-hop overhead.

Pure arithmetic on measured points (no torch, no processes: `comm_profile` measures).

- `fit_link`: one-way seconds of B bytes = `latency_s + B / bytes_per_s`, fitted by least
  squares on relative residuals (each point weighted by 1 / seconds^2), so the
  microsecond-scale small messages set the latency and the large ones the bandwidth,
  instead of the largest sizes deciding both.
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

The model is piecewise linear in (h, alpha) (the bottleneck stage can change), so the fits
are Gauss-Newton steps on exact slopes, repeated until the bottleneck stays put.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from planner.costmodel import bottleneck_index, pipeline_time_s

LINKS = ("in_node", "across_nodes")


class FitError(ValueError):
    """The points do not determine the fit (too few, or it gives non-physical figures)."""


@dataclass(frozen=True)
class LinkFit:
    latency_s: float
    bytes_per_s: float

    def transfer_s(self, num_bytes: float) -> float:
        return self.latency_s + num_bytes / self.bytes_per_s

    def to_dict(self) -> dict[str, float]:
        return {"latency_s": self.latency_s, "bytes_per_s": self.bytes_per_s}


def fit_link(points: Sequence[tuple[int, float]]) -> LinkFit:
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
    return LinkFit(latency, 1.0 / slope)


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


def model_s(run: HopRun, link: LinkFit, hop_overhead_s: float, alpha: float = 1.0) -> float:
    """The 1F1B cost model's iteration for `run` with the communication term."""
    per_hop = hop_overhead_s + alpha * link.transfer_s(run.boundary_bytes)
    weights = [c + n * per_hop for c, n in zip(run.stage_compute_s, hops_per_stage(run.num_stages))]
    return pipeline_time_s(weights, run.num_microbatches)


def _slope(run: HopRun, link: LinkFit, h: float, alpha: float) -> float:
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


def _solve(runs: Sequence[HopRun], link: LinkFit, fit_alpha: bool) -> HopFit:
    if not runs or any(r.num_stages < 2 for r in runs):
        raise FitError("the hop fit needs runs of at least two stages")
    h, alpha = 0.0, 1.0
    for _ in range(8):
        slopes = [_slope(r, link, h, alpha) for r in runs]
        transfers = [link.transfer_s(r.boundary_bytes) for r in runs]
        # T(h, alpha) = T(0, 0) + a (h + alpha t) on the current linear piece
        base = [
            r.measured_s - (model_s(r, link, h, alpha) - a * (h + alpha * t))
            for r, a, t in zip(runs, slopes, transfers)
        ]
        if fit_alpha:
            x = slopes
            y = [a * t for a, t in zip(slopes, transfers)]
            sxx, sxy, syy = sum(v * v for v in x), sum(u * v for u, v in zip(x, y)), sum(v * v for v in y)
            sxb, syb = sum(u * v for u, v in zip(x, base)), sum(u * v for u, v in zip(y, base))
            det = sxx * syy - sxy * sxy
            if det <= 1e-12 * sxx * syy:
                raise FitError("fitting the overlap needs runs whose boundary transfers differ")
            new_h, new_alpha = (syy * sxb - sxy * syb) / det, (sxx * syb - sxy * sxb) / det
        else:
            new_alpha = 1.0
            t_part = [a * t for a, t in zip(slopes, transfers)]
            new_h = sum(a * (b - tp) for a, b, tp in zip(slopes, base, t_part)) / sum(a * a for a in slopes)
        done = abs(new_h - h) < 1e-12 and abs(new_alpha - alpha) < 1e-9
        h, alpha = new_h, new_alpha
        if done:
            break
    residuals = tuple(r.measured_s - model_s(r, link, h, alpha) for r in runs)
    return HopFit(h, alpha, residuals)


def fit_hop_overhead(runs: Sequence[HopRun], link: LinkFit) -> HopFit:
    """`hop_overhead_s` with the whole transfer charged (the cost model's charge)."""
    return _solve(runs, link, fit_alpha=False)


def fit_overlap(runs: Sequence[HopRun], link: LinkFit) -> HopFit:
    """`hop_overhead_s` and the fraction `alpha` of the transfer that is not overlapped."""
    return _solve(runs, link, fit_alpha=True)


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


def fit_latency_only(runs: Sequence[HopRun], link: LinkFit) -> HopFit:
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


# -- communication.json ------------------------------------------------------------------

KEYS = ("source", "in_node", "across_nodes", "hop_overhead_s", "samples")


def communication_dict(
    source: str, links: Mapping[str, LinkFit], hop_overhead_s: float, samples: Sequence[tuple[str, int, float]]
) -> dict[str, Any]:
    """The `communication.json` object (schema in DESIGN/issue 15's interface)."""
    return {
        "source": source,
        "in_node": links["in_node"].to_dict(),
        "across_nodes": links["across_nodes"].to_dict(),
        "hop_overhead_s": hop_overhead_s,
        "samples": [{"link": link, "bytes": int(b), "seconds": float(s)} for link, b, s in samples],
    }


def check_communication(data: Any, where: str = "communication.json") -> dict[str, Any]:
    """`data` if it has the schema's keys and physical figures; FitError naming the field otherwise."""

    def positive(value: Any, name: str, zero_ok: bool = False) -> None:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or value < 0 or (value == 0 and not zero_ok):
            raise FitError(
                f"{where}: {name} must be a {'non-negative' if zero_ok else 'positive'} number, got {value!r}"
            )

    if not isinstance(data, dict) or set(data) != set(KEYS):
        got = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise FitError(f"{where}: expected the keys {', '.join(KEYS)}, got {got}")
    if not isinstance(data["source"], str):
        raise FitError(f"{where}: source must be a string")
    for link in LINKS:
        entry = data[link]
        if not isinstance(entry, dict) or set(entry) != {"latency_s", "bytes_per_s"}:
            raise FitError(f"{where}: {link} must be {{latency_s, bytes_per_s}}, got {entry!r}")
        positive(entry["latency_s"], f"{link}.latency_s")
        positive(entry["bytes_per_s"], f"{link}.bytes_per_s")
    positive(data["hop_overhead_s"], "hop_overhead_s", zero_ok=True)
    if not isinstance(data["samples"], list):
        raise FitError(f"{where}: samples must be a list")
    for i, sample in enumerate(data["samples"]):
        if not isinstance(sample, dict) or set(sample) != {"link", "bytes", "seconds"} or sample["link"] not in LINKS:
            raise FitError(f"{where}: samples[{i}] must be {{link (in_node|across_nodes), bytes, seconds}}")
        positive(sample["bytes"], f"samples[{i}].bytes", zero_ok=True)
        positive(sample["seconds"], f"samples[{i}].seconds")
    return data


def hostname() -> str:
    return socket.gethostname()
