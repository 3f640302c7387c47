"""A finished (or failed) real run in the simulator's schema (`planner.records`).

Times are seconds since the coordinator started. "Training first started" is when every
rank had built its groups (`ready_s`): process start-up, registration and planning count
as waiting, not as training. Summary extras: `losses` (the global training loss of every
step: the mean over the global batch, as the single-process reference computes it),
`final_loss`, the per-iteration times, the steady-state iteration time and throughput
(iterations after the first, which includes the schedules' lazy set-up), the planner's
predicted iteration time, and the plan.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from planner.records import FINISHED, RUNNING, WAITING, EventRecord, RunSummary, TimeBreakdown, TimelineRow, write_run

from .coordinator import RunOutcome


def iteration_times_s(outcome: RunOutcome) -> list[float]:
    if outcome.ready_s is None:
        return []
    ends = [outcome.ready_s, *outcome.step_end_s]
    return [b - a for a, b in zip(ends, ends[1:])]


def steady_iteration_s(times: list[float]) -> float | None:
    """Median iteration time after the first (None with fewer than two iterations)."""
    return statistics.median(times[1:]) if len(times) >= 2 else None


def summarize(outcome: RunOutcome) -> RunSummary:
    config, plan = outcome.config, outcome.plan
    times = iteration_times_s(outcome)
    iterations = len(outcome.step_end_s)
    samples = iterations * config.global_batch
    end_s = outcome.end_s if outcome.end_s is not None else outcome.now_s()
    ready = outcome.ready_s if outcome.ready_s is not None else end_s
    last = outcome.step_end_s[-1] if outcome.step_end_s else ready
    span = last - ready
    steady = steady_iteration_s(times)
    extra: dict[str, Any] = {
        "status": outcome.status,
        "reason": outcome.reason,
        "compute": config.compute,
        "losses": list(outcome.losses),
        "final_loss": outcome.losses[-1] if outcome.losses else None,
        "iteration_times_s": times,
        "steady_iteration_s": steady,
        "steady_samples_per_s": config.global_batch / steady if steady else None,
        "predicted_iteration_s": plan.iteration_time_s if plan else None,
        "predicted_samples_per_s": plan.samples_per_s if plan else None,
        "startup_s": outcome.ready_s,
        "world_size": outcome.layout.world_size if outcome.layout else 0,
        "schedules": {str(k): v for k, v in outcome.schedules.items()},
        "plan": plan.to_dict() if plan else None,
    }
    return RunSummary(
        policy="oobleck",
        model=config.model,
        trace="none",
        calibration="measured",
        duration_s=end_s,
        avg_samples_per_s=samples / span if span > 0 else 0.0,
        committed_samples=samples,
        num_iterations=iterations,
        num_reconfigurations=0,
        num_restarts=0,
        num_checkpoints=0,
        failures_survived=0,
        node_hours=config.nodes * end_s / 3600,
        cost_usd=0.0,
        breakdown=TimeBreakdown(useful_compute_s=span, waiting_s=ready + (end_s - last)),
        extra=extra,
    )


def timeline(outcome: RunOutcome) -> list[TimelineRow]:
    config = outcome.config
    nodes = config.nodes
    rows = [TimelineRow(0.0, 0, 0, WAITING, 0, 0, 0.0, 0.0)]
    if outcome.ready_s is not None:
        rows.append(TimelineRow(outcome.ready_s, nodes, nodes, RUNNING, 0, 0, 0.0, 0.0))
    for index, (end, duration) in enumerate(zip(outcome.step_end_s, iteration_times_s(outcome))):
        rate = config.global_batch / duration if duration > 0 else 0.0
        rows.append(TimelineRow(end, nodes, nodes, RUNNING, index + 1, (index + 1) * config.global_batch, rate, 0.0))
    end = outcome.end_s if outcome.end_s is not None else outcome.now_s()
    iterations = len(outcome.step_end_s)
    rows.append(TimelineRow(end, nodes, 0, FINISHED, iterations, iterations * config.global_batch, 0.0, 0.0))
    return rows


def write_results(outcome: RunOutcome, directory: str | Path) -> tuple[RunSummary, Path]:
    summary = summarize(outcome)
    config = {**outcome.config.to_dict(), "backend": "real"}
    events: list[EventRecord] = list(outcome.events)
    path = write_run(directory, config, summary, timeline(outcome), events)
    return summary, path
