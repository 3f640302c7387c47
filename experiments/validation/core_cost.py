"""The core-seconds a sample costs the host, measured in a calibration job.

For the simulator's ceiling on a job whose workers share one host's cores
(`sim.core_bound`): over each steady iteration of a calibration job's first plan
(after the first iteration, which sets the schedules up, and before the first failure),
the cores' busy share (`real.control.cpu_meter`) x the cores x the iteration's seconds,
over the samples it committed; the median over both calibration jobs' iterations.
Separate jobs on the same machine, not the runs compared: a trace run's own throughput
never reaches the simulator.

Real compute only (`runs.sim_config`): there a sample's CPU work (forward, backward,
sends, sync, optimizer) is the job's, whatever the plan. It grows with the workers
computing: failure-free Oobleck jobs of a 4-block Hugging Face GPT-2 (`hf:gpt2:base`)
cost 47.4, 52.6 and 55.1 core-ms a sample on 2, 3 and 4 workers of 2 cores (Varuna's
49.6, 56.1, 59.7), tiny-gpt's 45.3, 48.2 and 56.1, and a trace run's 2-worker phases
committed 15-20% more than a ceiling measured on 4 workers allowed. Where a trace changes the worker count, the validation runs one such
job per count it reaches (a core sweep, `calibrate.with_core_sweep`) and gives the
simulator the line through them (`core_line`). The emulated backend sleeps its
compute; its cores go to sends and bookkeeping, which differ by plan (42% busy on
single-node pipelines, 72-87% on deep ones), so one plan's figure would not bound another's.
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MIN_ITERATIONS = 3  # steady iterations with a busy reading, fewer: not measured


def iteration_core_costs(summary: Mapping[str, Any], samples_per_iteration: int) -> list[float]:
    """The core-seconds per sample of each of the job's steady iterations before its first
    failure that has a busy reading (none without a core count)."""
    cores = summary.get("cpu_cores")
    times = summary.get("iteration_times_s") or []
    shares = summary.get("cpu_busy_share") or []
    if not cores or samples_per_iteration < 1:
        return []
    ends = list(itertools.accumulate(times, initial=float(summary.get("startup_s") or 0.0)))[1:]
    recoveries = summary.get("recoveries") or []
    first_fail = min((float(r["t_fail_s"]) for r in recoveries), default=float("inf"))
    return [
        share * cores * seconds / samples_per_iteration
        for k, (seconds, end) in enumerate(zip(times, ends))
        if k >= 1 and end < first_fail and k < len(shares) and (share := shares[k]) is not None
    ]


def sample_core_s(summary: Mapping[str, Any], samples_per_iteration: int) -> float | None:
    """The median of `iteration_core_costs` (None: fewer than `MIN_ITERATIONS`)."""
    costs = iteration_core_costs(summary, samples_per_iteration)
    return statistics.median(costs) if len(costs) >= MIN_ITERATIONS else None


def measured_core_costs(details: Mapping[str, Any], samples_per_iteration: int) -> dict[str, Any]:
    """Per policy calibrated (`details[policy]["run_dir"]`), its job's `sample_core_s`;
    `all`, the median over both jobs' iterations, the one the simulator takes; and the
    cores they were measured on. Empty where no job can say.

    One figure for both: a sample's work is the model's, and the trace runs agree (4
    workers, tiny-gpt: Oobleck 52.6 and Varuna 50.6 samples/s, 51.9 and 51.4 the day
    before), where Varuna's job alone said 7-11% more than Oobleck's from the 7 steady
    iterations it has before its crash, right after its start (Oobleck's has 12-13)."""
    out: dict[str, Any] = {}
    pooled: list[float] = []
    for policy in ("oobleck", "varuna"):
        run_dir = (details.get(policy) or {}).get("run_dir")
        path = Path(run_dir) / "summary.json" if run_dir else None
        if path is None or not path.is_file():
            continue
        summary = json.loads(path.read_text())
        costs = iteration_core_costs(summary, samples_per_iteration)
        if len(costs) >= MIN_ITERATIONS:
            out[policy] = statistics.median(costs)
            out["cores"] = float(summary["cpu_cores"])
        pooled += costs
    if "cores" in out:
        out["all"] = statistics.median(pooled)
    return out


def core_line(points: Mapping[int, float]) -> tuple[float, float] | None:
    """The line sample_core_s + per_worker_s x (w - 1) through `points` (workers -> the
    core-seconds a sample cost a job on that many), least squares; None under two points.
    A slope below 0 (noise on a flat cost) is taken as 0 through the points' median, and
    so is one that would leave a single worker no cost: a sample never costs less on more
    workers, nor nothing on one."""
    if len(points) < 2:
        return None
    counts = sorted(points)
    xs = [float(w - 1) for w in counts]
    ys = [float(points[w]) for w in counts]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread
    first = mean_y - slope * mean_x
    if slope < 0 or first <= 0:
        return statistics.median(ys), 0.0
    return first, slope


def sweep_points(sweep: Mapping[str, Any], samples_per_iteration: int) -> dict[int, float]:
    """Per worker count of a core sweep (`sweep["run_dirs"]`: count -> a failure-free job's
    directory), that job's `sample_core_s`; counts whose job cannot say are left out."""
    out = {}
    for count, run_dir in (sweep.get("run_dirs") or {}).items():
        path = Path(run_dir) / "summary.json"
        if path.is_file():
            cost = sample_core_s(json.loads(path.read_text()), samples_per_iteration)
            if cost is not None:
                out[int(count)] = cost
    return out
