"""The calibration of loaded pipeline sends (`sim.loaded_hops`), apart from any trace;
run only with `ooblab validate --loaded-sends` (experimental, docs/validation.md).

On the 2-core testbed a deep pipeline ran slower than the plan's prediction, the more so
the more worker processes the job had (two 3-stage pipelines of emulated tiny-gpt
layers: x1.04; two 7-stage: x1.16; four 7-stage: x1.31; in two calm validation runs,
about 1.1 ms a critical-path pass at 12-15 processes and 3.3 ms at 29-30), while
single-stage pipelines agreed. Two short jobs time it at the setting's node count (from
8 nodes on): `probe_groupings` forces pipelines of S = nodes // 4 stages (2 to
`MAX_STAGES`), two of them on half the nodes, then as many as the nodes hold. For each,
the extra a send must cost for the simulator's iteration (without the term) to match the
measured steady iteration is solved by bisection (`solve_hop_extra_s`); the line through
the two (processes, extra) points gives `loaded_hop_fixed_s` and
`loaded_hop_per_process_s` (a slope below 0, noise, is held at 0 through their mean).
The second probe runs as many processes as the setting's plans can (up to S - 1 fewer),
so the line is read between its points or below them, hardly above. (The evening of
2026-12-03 fitted it against the plan's sends per second instead: it overshot at 16
nodes; the rate stays a simulator option, `loaded_hop_slope_s2`, that this calibration
sets to 0.) Real compute measures the same effect in its contention profile's hop
readings (`planner.contention`) and is not probed here.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

MAX_STAGES = 8
MIN_NODES = 8
PROBE_STEPS = 24  # the first iterations set up; the summary's steady pace is their median after the first
SOLVE_RANGE_S = (-1.0, 1.0)  # per send; clipped by the profile's hop at the low end
SOLVE_TOLERANCE_S = 1e-7


@dataclass(frozen=True)
class HopProbe:
    """One forced-plan job: its pipelines' sizes, its measured steady iteration, the
    simulator's iteration without the term, its send rate and the solved extra per send."""

    pipelines: tuple[int, ...]
    measured_s: float
    simulated_s: float
    sends_per_s: float
    extra_s: float
    processes: int = 0  # the job's worker processes (0: a probe cached before they were kept)


def probe_groupings(nodes: int) -> list[tuple[int, ...]]:
    """The forced groupings to time: pipelines of S stages, two, then as many as `nodes`
    holds; none below `MIN_NODES` (two 3-stage pipelines ran x1.04, within the targets:
    the quick setting's 4 nodes stay short)."""
    if nodes < MIN_NODES:
        return []
    stages = max(2, min(MAX_STAGES, nodes // 4))
    few, many = (stages, stages), (stages,) * (nodes // stages)
    return [few] if few == many else [few, many]


def solve_hop_extra_s(time_with: Callable[[float], float], measured_s: float, floor_s: float) -> float:
    """The extra per send (>= -floor_s) at which `time_with(extra)`, non-decreasing in it,
    equals `measured_s` (the bound where it cannot)."""
    lo, hi = max(SOLVE_RANGE_S[0], -floor_s), SOLVE_RANGE_S[1]
    if time_with(lo) >= measured_s:
        return lo
    if time_with(hi) <= measured_s:
        return hi
    while hi - lo > SOLVE_TOLERANCE_S:
        mid = (lo + hi) / 2
        if time_with(mid) < measured_s:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def fit_line(probes: list[HopProbe]) -> tuple[float, float]:
    """(fixed_s, per_process_s) through the probes' (processes, extra) points; one probe,
    equal process counts, or a negative slope: (their mean extra, 0)."""
    if not probes:
        return 0.0, 0.0
    if len(probes) == 1 or probes[0].processes == probes[-1].processes:
        return statistics.fmean(p.extra_s for p in probes), 0.0
    a, b = probes[0], probes[-1]
    slope = (b.extra_s - a.extra_s) / (b.processes - a.processes)
    if slope < 0:
        return statistics.fmean(p.extra_s for p in probes), 0.0
    return a.extra_s - slope * a.processes, slope


def probe(plan: Any, measured_s: float, timing_for: Callable[[float], Any], floor_s: float) -> HopProbe:
    """The extra per send that makes the simulator (`timing_for(extra)`: its timing with
    every send `extra` longer, 0 without the term) take `measured_s` for `plan`."""
    from sim.loaded_hops import plan_processes, send_rate_per_s

    simulated = timing_for(0.0).iteration(plan).total_s
    extra = solve_hop_extra_s(lambda x: timing_for(x).iteration(plan).total_s, measured_s, floor_s)
    sizes = tuple(len(p.template.stages) for p in plan.pipelines)
    return HopProbe(sizes, measured_s, simulated, send_rate_per_s(plan), extra, plan_processes(plan))


def probes_to_dict(probes: list[HopProbe]) -> list[dict]:
    return [asdict(p) for p in probes]
