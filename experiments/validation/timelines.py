"""Turn a real run's summary and a simulation's result into `compare.RunTimeline`s.

Real: iteration ends are training start (`startup_s`) plus the cumulative iteration
times; recoveries are the backend's own (failure to the interrupted iteration's
completion). Simulated: iteration ends from the per-iteration timeline (the last time
each count was reached, so a rollback's redone iterations count at their new time);
a recovery starts at a removal that interrupts the job (the state right after it is a
pause) and ends when the iteration count first exceeds its value at the removal; a
removal during a recovery belongs to it (as on the real backend).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from planner.records import TimelineRow

from .compare import RunTimeline

PAUSED_STATES = ("reconfiguring", "restarting", "checkpointing")


def real_timeline(summary: Mapping[str, Any], policy: str, global_batch: int | None = None) -> RunTimeline:
    """The measured side. A run with steps over part of the batch (`partial_steps`: replica
    groups with groups out) needs `global_batch` to count each step's samples."""
    start = summary.get("startup_s")
    if start is None:
        raise ValueError(
            f"the real {policy} run never started training ({summary.get('status')}: {summary.get('reason')})"
        )
    ends = list(itertools.accumulate(summary["iteration_times_s"], initial=0.0))[1:]
    recoveries = merge_overlapping(
        [
            (r["t_fail_s"] - start, r["t_done_s"] - start)
            for r in summary.get("recoveries", [])
            if r.get("t_done_s") is not None
        ]
    )
    batch = summary["committed_samples"] // summary["num_iterations"] if summary["num_iterations"] else 1
    per_step: tuple[int, ...] = ()
    partial = summary.get("partial_steps") or {}
    if partial:
        if global_batch is None:
            raise ValueError(f"the real {policy} run trained steps on part of the batch: give global_batch")
        counts = {int(step): sum(count for _, count in ranges) for step, ranges in partial.items()}
        full = summary["num_iterations"] - len(counts)
        microbatch = (summary["committed_samples"] - global_batch * full) / sum(counts.values())
        per_step = tuple(
            round(counts[k] * microbatch) if k in counts else global_batch for k in range(summary["num_iterations"])
        )
        batch = global_batch
    joins = tuple(
        (stop["t_stop_s"] - start, stop["t_ready_s"] - start)
        for stop in summary.get("planned_stops", [])
        if stop.get("t_ready_s") is not None
    )
    return RunTimeline("real", policy, int(batch), tuple(ends), recoveries, ends[-1] if ends else 0.0, joins, per_step)


def merge_overlapping(spans: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """A failure during a recovery belongs to it (the simulator's view; the backend logs
    each failure's own recovery): overlapping spans become one, first failure to last end."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(spans):
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return tuple(out)


def _at_last_reach(rows: Sequence[TimelineRow], field: str) -> list:
    """`field` of the row where each committed iteration count was last reached (a
    rollback's redone iterations count where they were committed again)."""
    out: list = []
    for row in rows:
        n = row.iterations_done
        del out[n:]
        while len(out) < n:
            out.append(getattr(row, field))
    return out


def sim_iteration_ends(rows: Sequence[TimelineRow]) -> list[float]:
    """The time each committed iteration count was last reached."""
    return _at_last_reach(rows, "time_s")


def sim_iteration_samples(rows: Sequence[TimelineRow]) -> list[int]:
    """The samples of each committed iteration, as `sim_iteration_ends` orders them."""
    done = _at_last_reach(rows, "samples_done")
    return [b - a for a, b in zip([0, *done], done)]


def sim_recoveries(rows: Sequence[TimelineRow], removal_times_s: Sequence[float]) -> list[tuple[float, float]]:
    """(failure, recovered) for every removal that paused the running job."""
    out: list[tuple[float, float]] = []
    for t in sorted(set(removal_times_s)):
        if out and t < out[-1][1]:
            continue  # inside a recovery already under way
        at = [r for r in rows if r.time_s == t]
        before = [r for r in rows if r.time_s < t]
        if not at or not before or before[-1].state != "running" or at[-1].state not in PAUSED_STATES:
            continue
        done_at = at[-1].iterations_done
        later = next((r.time_s for r in rows if r.time_s > t and r.iterations_done > done_at), None)
        if later is not None:
            out.append((t, later))
    return out


def sim_joins(rows: Sequence[TimelineRow], removal_times_s: Sequence[float]) -> list[tuple[float, float]]:
    """(pause begins, training goes on) for every pause of the running job that no removal
    began and that is no checkpoint: a plan change with nobody lost (a join)."""
    removed = set(removal_times_s)
    out: list[tuple[float, float]] = []
    for i in range(1, len(rows)):
        row, before = rows[i], rows[i - 1]
        if row.state not in ("reconfiguring", "restarting") or before.state != "running" or row.time_s in removed:
            continue
        end = next((r.time_s for r in rows[i + 1 :] if r.state == "running"), None)
        if end is not None:
            out.append((row.time_s, end))
    return out


def sim_timeline(result: Any, policy: str, lead_s: float, end_s: float) -> RunTimeline:
    """`result`: a `sim.run.SimResult` run with iteration rows on a trace shifted by
    `lead_s` (its training starts then); times are returned relative to that start."""
    first = result.summary.extra.get("first_start_s")
    if first is None:
        raise ValueError(
            f"the simulated {policy} run never started training ({result.summary.extra.get('infeasible_reason')})"
        )
    if abs(first - lead_s) > 1e-6:
        raise ValueError(f"the simulated run started training at {first:g} s, not at the expected {lead_s:g} s")
    rows = list(result.timeline)
    removals = [e.time_s for e in result.events if e.kind == "remove"]
    ends = [t - lead_s for t in sim_iteration_ends(rows)]
    recoveries = tuple((a - lead_s, b - lead_s) for a, b in sim_recoveries(rows, removals))
    joins = tuple((a - lead_s, b - lead_s) for a, b in sim_joins(rows, removals))
    batch = result.summary.extra["samples_per_iteration"]
    samples = sim_iteration_samples(rows)
    varies = tuple(samples) if any(s != batch for s in samples) else ()
    return RunTimeline("sim", policy, batch, tuple(ends), recoveries, end_s, joins, varies)
