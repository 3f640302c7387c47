"""A finished (or failed) real run in the simulator's schema (`planner.records`).

Times are seconds since the coordinator started. "Training first started" is when every
rank of generation 0 held its layers (`ready_s`): process start-up, registration and
planning count as waiting, not as training. Summary extras: `losses` (the global
training loss of every committed step: the mean over the global batch, as the
single-process reference computes it), `final_loss`, the per-iteration times, the
steady-state iteration time and throughput (iterations after the first, which includes
the schedules' lazy set-up), the planner's predicted iteration time, the plans (first
and last), and for failures `num_reconfigurations`, `num_restarts`, `recovery_s` (one
duration per recovery: failure to the next completed iteration) and `recoveries` (each
split into detection, rebuild, planning, checkpoint, respawn, copy and redo), and
`checkpoint_accounts` (each checkpoint written or loaded: the model's bytes and seconds
for the writers it really had, next to the measured seconds: `checkpoint_accounting`),
and `cpu_busy_share` (per iteration, how busy the coordinator's machine's `cpu_cores`
cores were: `cpu_meter`) with `cpu_steal_share` (of that, the host's steal).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.records import (
    FINISHED,
    EventRecord,
    RunSummary,
    TimeBreakdown,
    TimelineRow,
    write_run,
)

from .cpu_meter import CpuReading, busy_share, steal_share
from .outcome import RunOutcome, committed_samples
from .policies import plan_dict, plan_samples_per_s
from .recovery import RESTART

ShareFn = Callable[[CpuReading | None, CpuReading | None], float | None]


def iteration_times_s(outcome: RunOutcome) -> list[float]:
    if outcome.ready_s is None:
        return []
    ends = [outcome.ready_s, *outcome.step_end_s]
    return [b - a for a, b in zip(ends, ends[1:])]


def cpu_shares(outcome: RunOutcome, share: ShareFn = busy_share) -> list[float | None]:
    """Per committed iteration (as `iteration_times_s`), the busy share of the machine's
    cores over it (`cpu_meter`; None where a reading is missing); `share=steal_share`:
    the share the host stole."""
    if outcome.ready_s is None:
        return []
    ends = [outcome.ready_s, *outcome.step_end_s]
    cpu = outcome.cpu_at_s
    return [share(cpu.get(a), cpu.get(b)) for a, b in zip(ends, ends[1:])]


def steady_iteration_s(times: list[float]) -> float | None:
    """Median iteration time after the first (None with fewer than two iterations)."""
    return statistics.median(times[1:]) if len(times) >= 2 else None


def checkpoint_accounts(outcome: RunOutcome) -> list[dict[str, Any]]:
    """Every checkpoint written or loaded, priced by the model (`checkpoint_accounting`);
    a load's measured seconds are its recovery's `copy` phase (known once it is over)."""
    done = {r.index: r for r in outcome.recoveries}
    out = []
    for account in outcome.checkpoint_accounts:
        row = account.to_dict()
        if account.recovery is not None and account.recovery in done:
            row["measured_s"] = done[account.recovery].phases["copy"]
        out.append(row)
    return out


def summarize(outcome: RunOutcome) -> RunSummary:
    config, plan = outcome.config, outcome.plan
    times = iteration_times_s(outcome)
    iterations = len(outcome.step_end_s)
    samples = committed_samples(outcome)
    partial = {str(k): [list(r) for r in ranges] for k, ranges in enumerate(outcome.step_ranges) if ranges is not None}
    end_s = outcome.end_s if outcome.end_s is not None else outcome.now_s()
    ready = outcome.ready_s if outcome.ready_s is not None else end_s
    last = outcome.step_end_s[-1] if outcome.step_end_s else ready
    span = last - ready
    steady = steady_iteration_s(times)
    recoveries = outcome.recoveries
    live = [r for r in recoveries if r.kind != RESTART]
    restarts = [r for r in recoveries if r.kind == RESTART]
    reconfig_s = sum(r.total_s - r.phases["redo"] for r in live)
    restart_s = sum(r.total_s - r.phases["redo"] for r in restarts)
    lost_s = sum(r.phases["redo"] for r in recoveries)
    useful = max(0.0, span - reconfig_s - restart_s - lost_s)
    extra: dict[str, Any] = {
        "status": outcome.status,
        "reason": outcome.reason,
        "compute": config.compute,
        "losses": list(outcome.losses),
        "final_loss": outcome.losses[-1] if outcome.losses else None,
        "iteration_times_s": times,
        "cpu_busy_share": cpu_shares(outcome),  # of all the machine's cores, per iteration
        "cpu_steal_share": cpu_shares(outcome, steal_share),  # of those, the host's (inside busy)
        "cpu_cores": os.cpu_count(),
        "steady_iteration_s": steady,
        "steady_samples_per_s": (outcome.layout.step_samples if outcome.layout else config.global_batch) / steady
        if steady
        else None,
        "predicted_iteration_s": plan.iteration_time_s if plan is not None else None,
        "predicted_samples_per_s": plan_samples_per_s(plan, config.global_batch),
        "startup_s": outcome.ready_s,
        "world_size": outcome.layout.world_size if outcome.layout else 0,
        "schedules": {str(k): v for k, v in outcome.schedules.items()},
        "plan": plan_dict(plan, config.gpus_per_node),
        "initial_plan": plan_dict(outcome.initial_plan, config.gpus_per_node),
        "generations": outcome.generations,
        "recovery_s": [r.total_s for r in recoveries],
        "recoveries": [r.to_dict() for r in recoveries],
        "lost_iterations": outcome.lost_iterations,
        # planned stops with nobody lost (joins): their pause, the last commit to the new generation's readiness
        "planned_stops": [
            {**stop, "pause_s": stop["t_ready_s"] - stop["t_stop_s"] if stop["t_ready_s"] is not None else None}
            for stop in outcome.planned_stops
        ],
        "failed_checkpoint_steps": list(outcome.failed_checkpoints),
        "checkpoint_accounts": checkpoint_accounts(outcome),
        "injections_fired": sorted(outcome.injections_fired),
        "injections_not_fired": list(outcome.injections_not_fired),
        # steps that trained on part of the batch: step -> [[first microbatch, count], ...]
        **({"partial_steps": partial} if partial else {}),
    }
    return RunSummary(
        policy=config.policy,
        model=config.model,
        trace=config.trace or ("inject" if config.inject else "none"),
        calibration="measured",
        duration_s=end_s,
        avg_samples_per_s=samples / span if span > 0 else 0.0,
        committed_samples=samples,
        num_iterations=iterations,
        num_reconfigurations=outcome.reconfigurations,
        num_restarts=outcome.restarts,
        num_checkpoints=outcome.checkpoints,
        num_failed_checkpoints=len(outcome.failed_checkpoints),
        failures_survived=outcome.failures_survived,
        node_hours=config.nodes * end_s / 3600,
        cost_usd=0.0,
        breakdown=TimeBreakdown(
            useful_compute_s=useful,
            reconfiguration_s=reconfig_s,
            restart_s=restart_s,
            lost_work_s=lost_s,
            waiting_s=end_s - useful - reconfig_s - restart_s - lost_s,
        ),
        extra=extra,
    )


def timeline(outcome: RunOutcome) -> list[TimelineRow]:
    rows = list(outcome.rows)
    end = outcome.end_s if outcome.end_s is not None else outcome.now_s()
    iterations = len(outcome.step_end_s)
    last = rows[-1] if rows else None
    end = max(end, last.time_s) if last else end
    rows.append(
        TimelineRow(
            end,
            last.live_nodes if last else 0,
            0,
            FINISHED,
            iterations,
            committed_samples(outcome),
            0.0,
            0.0,
        )
    )
    return rows


def write_results(outcome: RunOutcome, directory: str | Path) -> tuple[RunSummary, Path]:
    summary = summarize(outcome)
    config = {
        **outcome.config.to_dict(),
        "backend": "real",
        "design": outcome.config.policy,
        "effective_design_options": dict(outcome.design_options),
    }
    events: list[EventRecord] = list(outcome.events)
    path = write_run(directory, config, summary, timeline(outcome), events)
    return summary, path
