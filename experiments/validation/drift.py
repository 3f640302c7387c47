"""Did the machine keep its pace between the calibration and the trace runs?

The calibration is measured once per setting and may be reused for hours (`shared_dir`),
and on a small shared machine the pace of the same job moves by tens of percent between
spells: g32h's calibration ran its plan at x1.71 the prediction and its trace runs at
about x1.5, so the calibrated overheads (profile hop, start-ups, restarts) came from a
slower machine than the one compared (docs/validation.md). Each run's first phase (before
the trace's first event, a failure-free stretch on the trace's first plan) is timed the
same way as the calibration's jobs (`calibrate.pace_ratios`: steady iteration over the
plan's predicted iteration), and the two are set side by side.

This is a diagnosis only: nothing here reaches the simulator (scaling it by the run's
pace would fit it to the run it is compared with). A drift beyond `DRIFT_WARN` says the
errors of that validation measure the machine's change as much as the simulator; re-run
with a fresh calibration (a new `--out`, or delete its `calibration/`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from designs import registry

from .calibrate import first_plan_s
from .compare import MIN_PHASE_ITERATIONS, RunTimeline, steady_durations

DRIFT_WARN = 0.10


@dataclass(frozen=True)
class PaceCheck:
    """One policy's pace in its calibration job and in its trace run's first phase."""

    policy: str
    calibration_pace: float | None  # steady iteration / predicted, calibration job (None: not measured)
    run_pace: float | None  # the same in the trace run's first phase (None: fewer than 3 steady iterations)
    run_iterations: int  # steady iterations of that first phase
    calibration_nodes: int
    run_nodes: int  # nodes of the trace run's first plan

    @property
    def drift(self) -> float | None:
        """The run's pace over the calibration's, minus 1 (+0.10: the run went 10% slower)."""
        if self.calibration_pace is None or self.run_pace is None:
            return None
        return self.run_pace / self.calibration_pace - 1.0

    def warning(self) -> str | None:
        """One line when the drift passes `DRIFT_WARN`, else None."""
        d = self.drift
        if d is None or abs(d) <= DRIFT_WARN:
            return None
        plans = (
            "on a plan of as many nodes"
            if self.run_nodes == self.calibration_nodes
            else f"(plans of {self.calibration_nodes} and {self.run_nodes} nodes, which may differ in pace by themselves)"
        )
        return (
            f"{registry.shown(self.policy)}: the trace run's first phase went x{self.run_pace:.2f} its prediction against the "
            f"calibration's x{self.calibration_pace:.2f} {plans}: the machine ran {abs(d):.0%} "
            f"{'slower' if d > 0 else 'faster'} than when it was calibrated, so this validation's errors hold that "
            "change too (re-run with a fresh calibration)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "calibration_pace": self.calibration_pace,
            "run_pace": self.run_pace,
            "run_iterations": self.run_iterations,
            "calibration_nodes": self.calibration_nodes,
            "run_nodes": self.run_nodes,
            "drift": self.drift,
        }


def plan_nodes(plan: Mapping[str, Any] | None) -> int:
    """Nodes of a run summary's plan (Varuna's `nodes`, or the sum over Oobleck's
    pipelines); 0 if none."""
    if not plan:
        return 0
    if isinstance(plan.get("nodes"), int):
        return int(plan["nodes"])
    return sum(int(p["num_nodes"]) for p in plan.get("pipelines") or [])


def first_phase_pace(
    real: RunTimeline, first_event_s: float | None, predicted_iteration_s: float
) -> tuple[float | None, int]:
    """(median steady iteration before `first_event_s` over `predicted_iteration_s`, how
    many iterations it is the median of); the pace is None under `MIN_PHASE_ITERATIONS`
    iterations or without a prediction."""
    end = first_event_s if first_event_s is not None else real.end_s
    durations = steady_durations(real, 0.0, min(end, real.end_s))
    if len(durations) < MIN_PHASE_ITERATIONS or not predicted_iteration_s > 0:
        return None, len(durations)
    return statistics.median(durations) / predicted_iteration_s, len(durations)


def pace_check(
    policy: str,
    calibration_ratios: Mapping[str, float],
    calibration_nodes: int,
    real: RunTimeline,
    real_summary: Mapping[str, Any],
    event_times_s: Sequence[float],
) -> PaceCheck:
    """The check of one policy's trace run (`real`, its summary) against its calibration."""
    first_event = min((t for t in event_times_s if t > 0), default=None)
    pace, n = first_phase_pace(real, first_event, first_plan_s(real_summary) or 0.0)
    nodes = plan_nodes(real_summary.get("initial_plan"))
    return PaceCheck(policy, calibration_ratios.get(policy), pace, n, calibration_nodes, nodes)
