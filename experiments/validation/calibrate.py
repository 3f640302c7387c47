"""The real backend's fixed overheads, measured once per setting, before and apart from
any trace being validated (the simulator must not be fitted to the runs it is compared
with).

Two short jobs on the validation's model, node count and batch, with planned failures of
nodes whose loss leaves a replica of every layer where the plan has one:

- Oobleck: `oobleck_crashes` nodes (3 from 7 nodes on, fewer below; the last nodes of
  pipelines spread over the plan, `spread_indices`) killed by the coordinator at set
  times, `crash_times_s`, as a trace's removals are (at whatever point of its iteration
  the job then is), then the first of them started again.
  `reconfigure_overhead_s` = the median over the recoveries of each one's duration minus
  the iterations it redid at the new plan's steady pace (what the simulator's
  reconfiguration pause must cover: detection, teardown, planning, group rebuild, layer
  copies, the new schedules' set-up); `node_startup_s` = the join's process start to
  its registration. It was once one crash (the backward pass of
  step `CRASH_STEP`) of the first pipeline's node, in the first generation: one sample
  of a pause that spread by 20-40% between recoveries here, taken where the teardown
  cascade around the gradient ring was longest (from its first ranks, `spread_indices`).
  Since the survivors sever their sockets on the coordinator's word
  (`real.worker.sever`) the cascade is gone and the pause no longer depends on where
  the lost ranks sit nor on how many go at once (16 nodes: 0.54-0.59 s for three single
  kills and a pair, against 0.90-1.56 s before).
- Varuna: `varuna_crashes` crashes (3 from 7 nodes on, fewer below), in the backward
  passes of steps `varuna_crash_steps` (each just after a periodic checkpoint), each of
  the last node of the plan the job then runs (`varuna_victims`). Each restart's
  duration minus its redone iterations and minus the periodic checkpoint time (the
  simulator charges Varuna's checkpoint-then-restart as a checkpoint pause plus a
  restart pause), moved along the relaunch slope to the survivors of the first crash
  (`restart_processes`); `restart_overhead_s` = their median. One restart was one sample
  of a start-up of 15-31 processes on 2 shared cores that spreads by 10-50% between
  runs: at 16 nodes one calibration measured 34.1 s for 15 processes, four more an
  hour later 21.6-24.2 s, and the trace's restarts of 14 and 12 took 23.1 and 19.0 s.
- The restart's growth with its processes: one restart of the parts alone (process
  start-up, group creation, checkpoint load: `restart_parts`, no training job) at the
  setting's node count and at half of it; the line through them gives
  `restart_per_process_s`. The simulator charges a relaunch of n processes
  `restart_fixed_s + restart_per_process_s * n`, the fixed part set so that the measured
  restart (of the survivors, `restart_processes`) costs exactly what was measured: a
  restart of fewer processes after more removals, or the start of all of them, costs
  its own.
- The restart's start-up: `restart_startup_share` = the share of the median restart
  that passed before its processes had all started (failure to the end of the respawn
  phase: detection, teardown, planning, respawn), over that restart's own pause at the
  processes it started (`median_startup_share`; until 2026-12-04 over the pause moved
  to the survivors' count, which took two processes' start-up for a rest it never had:
  0.93 for a restart whose start-up was 99% of it). A removal during that part does not
  cut the restart short on the real backend (the other processes finish starting, then
  it restarts again: `real.control.recovery_flow.restart_processes`); the simulator holds
  a new restart for the rest of it (`sim.engine`).
- Both: `checkpoint_fixed_s` = the extra time of the two iterations around each
  periodic checkpoint before the crash (median over both runs; the calibration
  checkpoints every `CHECKPOINT_EVERY` steps) above the median iteration.
- Real compute, where the trace changes the worker count: the core sweep
  (`with_core_sweep`), a failure-free `CORE_SWEEP_STEPS`-step Oobleck job on each count the
  trace reaches, without checkpoints; the core-seconds a sample cost each
  (`core_cost.sweep_points`) give the simulator's ceiling as a line in the workers
  computing (`Overheads.core_options`).

The byte-proportional parts of the simulator's restart and checkpoint model are switched
off (bandwidths `overheads.UNLIMITED_GB_PER_S`): the measured constants hold the whole cost for
this model, as it moves the same bytes every time.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from .crash_plan import (
    CHECKPOINT_EVERY,
    CRASH_STEP,
    crash_times_s,
    oobleck_crashes,
    plan_victims,
    varuna_crash_steps,
    varuna_crashes,
    varuna_victims,
)
from .loaded_hops import PROBE_STEPS, HopProbe, fit_line, probe, probe_groupings, probes_to_dict
from .overheads import CORE_COST_KEY, CORE_SWEEP_KEY, Overheads
from .restart_parts import total_fit

STARTUP_ALLOWANCE_S = 15.0  # how long the calibration run waits for the joining node
# where the loaded-send probes are kept; a calibration cached with the evening's
# sends-per-second fit (under "loaded_hops") is probed again when the term is asked for
LOADED_HOPS_KEY = "loaded_hops_by_processes"
CORE_SWEEP_STEPS = 14  # the first sets the schedules up: 13 steady iterations


def pinned_slope_s(parts_slope_s: float, restart_s: float, processes: int) -> float:
    """The relaunch line's slope: the restart parts' own, but never steeper than the
    measured restart over its processes, so that the line through that restart keeps a
    fixed part >= 0 and still charges it exactly what was measured (the parts' slope came
    out 2.24 s per process against a measured 13.6 s for 7 on an 8-node calibration)."""
    slope = max(0.0, parts_slope_s)
    return min(slope, restart_s / processes) if processes > 0 else slope


def slope_counts(processes: int) -> tuple[int, int]:
    """The two process counts the calibration times a restart's parts at: the setting's
    and half of it (at least 1 apart)."""
    if processes < 2:
        raise ValueError(f"a restart slope needs two process counts; the setting has {processes} process(es)")
    return max(1, processes // 2), processes


def steady_s(times: list[float]) -> float:
    return statistics.median(times) if times else math.nan


def checkpoint_extra_s(times: list[float], every: int, upto: int) -> tuple[float, list[float]]:
    """Median extra time of the iteration pairs (k-1, k) around checkpoints after step
    k - 1 (k a multiple of `every`, 1 < k < upto) above the median iteration."""
    body = times[1:upto]
    if not body or not every:
        return 0.0, []
    base = statistics.median(body)
    extras = [times[k - 1] + times[k] - 2 * base for k in range(every, upto, every) if k >= 2]
    return (max(0.0, statistics.median(extras)) if extras else 0.0), extras


def first_plan_s(summary: Mapping[str, Any]) -> float | None:
    """The predicted iteration of a run's first plan (Oobleck's `iteration_time_s`,
    Varuna's `predicted_iteration_s`), None without one."""
    plan = summary.get("initial_plan") or {}
    value = plan.get("iteration_time_s") or plan.get("predicted_iteration_s")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def measured_steady_s(details: Mapping[str, Any]) -> dict[str, float]:
    """Per calibration job, its steady iteration before the crash (median of steps
    1..CRASH_STEP - 1)."""
    out = {}
    for policy in ("oobleck", "varuna"):
        body = ((details.get(policy) or {}).get("iteration_times_s") or [])[1:CRASH_STEP]
        if body:
            out[policy] = statistics.median(body)
    return out


def pace_ratios(details: Mapping[str, Any]) -> dict[str, float]:
    """Per calibration job, its steady iteration before the crash (median of steps
    1..CRASH_STEP - 1) over its first plan's predicted iteration (the job's own
    `predicted_iteration_s`; calibrations cached before it was kept: the Oobleck plan's,
    `details["predicted_iteration_s"]`, which Varuna's plan need not equal).

    The simulator times compute from the profile, so a ratio far from 1 says the profile
    was measured in another state of the machine than the runs (on the 2-core testbed
    0.98-1.69 across three real-compute validations within an hour, CHANGELOG.md).
    It never scales compute (that would fit the simulator to a run). The plan's prediction
    leaves out what the simulator adds (the core ceiling, contention): `reprofile` checks
    the profile against the simulator's own prediction of these jobs instead."""
    ratios = {}
    for policy, steady in measured_steady_s(details).items():
        predicted = (details.get(policy) or {}).get("predicted_iteration_s") or details.get("predicted_iteration_s")
        if isinstance(predicted, (int, float)) and predicted > 0:
            ratios[policy] = steady / predicted
    return ratios


def redone_overheads(summary: Mapping[str, Any], expected: int) -> list[tuple[float, dict]]:
    """Each of the run's `expected` recoveries: its duration minus the iterations it redid
    at the steady pace of the iterations after it (up to 6, none past the next failure).
    A run with another number of recoveries is an error (a kill that did not land, or
    two that merged)."""
    recoveries = summary.get("recoveries") or []
    if len(recoveries) != expected:
        raise RuntimeError(
            f"the calibration run had {len(recoveries)} recoveries, expected {expected} "
            f"({summary.get('status')}: {summary.get('reason')})"
        )
    times = summary["iteration_times_s"]
    ends = list(itertools.accumulate(times, initial=summary["startup_s"]))[1:]
    lost = int(summary.get("lost_iterations") or 0)
    if lost and expected > 1:  # which recovery lost them is not in the summary
        raise RuntimeError(f"the calibration run lost {lost} iteration(s) over {expected} recoveries; expected none")
    out = []
    for i, rec in enumerate(recoveries):
        done = min(range(len(ends)), key=lambda k: abs(ends[k] - rec["t_done_s"]))  # the step that ended it
        stop = len(times)
        if i + 1 < len(recoveries):
            stop = bisect.bisect_left(ends, recoveries[i + 1]["t_fail_s"])  # the next failure's step
        after = times[done + 1 : min(done + 7, stop)]
        pace = steady_s(after) if after else summary["steady_iteration_s"]
        redone = 1 + lost
        rec = {**rec, "completed_step": done, "pace_after_s": pace, "iterations_redone": redone}
        out.append((rec["total_s"] - redone * pace, rec))
    return out


def normalised_restarts_s(measured: list[tuple[float, int]], slope_s: float, processes: int) -> list[float]:
    """Each (restart seconds, processes it started) moved along the relaunch line to
    `processes`: what that restart would have cost with `processes` (the calibration's
    later restarts start fewer processes than its first)."""
    return [seconds + slope_s * (processes - started) for seconds, started in measured]


def _run(base, policy: str, steps: int, inject: str | None, directory: Path):
    from real.launch.local import run_local

    run = run_local(base.with_(policy=policy, steps=steps, inject=inject), directory / policy)
    summary = run.summary.to_dict()
    if summary["status"] != "finished":
        raise RuntimeError(f"the {policy} calibration run failed: {summary['reason']} (see {run.directory})")
    return run, summary


def calibrate(
    base,
    directory: Path,
    progress: Callable[[str], None] = print,
    timing_for: Callable[[float], Any] | None = None,
    core_counts: tuple[int, ...] = (),
) -> Overheads:
    """Run the calibration jobs from `base` (a `RunConfig` without failures) and return
    the overheads; results are cached in `directory/overheads.json`. `timing_for(extra)`:
    the simulator's timing of the setting with every pipeline send `extra` longer (0:
    without the term); given, the loaded sends are calibrated too (`loaded_hops`).
    `core_counts`: the worker counts of a core sweep (`with_core_sweep`), real compute."""
    directory = Path(directory)
    cached = directory / "overheads.json"
    if cached.exists():
        overheads = Overheads.from_dict(json.loads(cached.read_text())).noticed_apart().with_startup_share()
        overheads = with_core_sweep(overheads, base, directory, core_counts, progress)  # asked for after caching
        overheads = overheads.with_core_costs(base.global_batch)
        if timing_for is None or LOADED_HOPS_KEY in overheads.details:
            return overheads
        return _with_loaded_hops(overheads, base, directory, timing_for, progress)  # asked for after caching
    from real.control.planning import make_plan, make_planner

    base = base.with_(checkpoint_every=CHECKPOINT_EVERY, trace=None, time_scale=1.0, inject=None, checkpoint_dir=None)

    planner = make_planner(base)
    pace = make_plan(planner, base.with_(pipelines=None), base.node_names()).iteration_time_s
    details: dict[str, Any] = {"predicted_iteration_s": pace}

    nodes = len(base.node_names())
    victims = plan_victims(base, "oobleck", oobleck_crashes(nodes))
    kills, join = crash_times_s(pace, len(victims))
    victim = victims[0]
    steps = math.ceil((join + STARTUP_ALLOWANCE_S) / pace) + 6  # the join, its start-up, 6 iterations
    schedule = ",".join([*(f"{t:.2f}s:{v}:crash" for t, v in zip(kills, victims)), f"{join:.2f}s:{victim}:join"])
    progress(
        f"calibration 1/4: Oobleck, {steps} steps, {', '.join(victims)} killed at "
        f"{', '.join(f'{t:.1f}' for t in kills)} s, {victim} back at {join:.1f} s"
    )
    run, summary = _run(base, "oobleck", steps, schedule, directory)
    measured = redone_overheads(summary, len(victims))
    reconfigure = statistics.median(m[0] for m in measured)
    events = run.outcome.events
    joined = next(
        (
            e.time_s
            for e in events
            if e.kind == "injected" and "join" in str(e.detail.get("what")) and e.detail.get("applied")
        ),
        None,
    )
    ready = next(
        (
            e.time_s
            for e in events
            if e.kind == "node_ready" and e.detail.get("node") == victim and joined is not None and e.time_s >= joined
        ),
        None,
    )
    if joined is None or ready is None:
        raise RuntimeError(
            f"the Oobleck calibration run never saw {victim} rejoin (raise STARTUP_ALLOWANCE_S on a slow machine)"
        )
    startup = ready - joined
    _, extras_o = checkpoint_extra_s(summary["iteration_times_s"], base.checkpoint_every, CRASH_STEP)
    details["oobleck"] = {
        "run_dir": str(run.directory),
        "recoveries": [m[1] for m in measured],
        "reconfigure_overheads_s": [m[0] for m in measured],
        "joined_s": joined,
        "ready_s": ready,
        "checkpoint_extras_s": extras_o,
        "iteration_times_s": summary["iteration_times_s"],
        "predicted_iteration_s": first_plan_s(summary),
    }

    victims = varuna_victims(base, varuna_crashes(nodes))
    crash_steps = varuna_crash_steps(len(victims))
    steps = crash_steps[-1] + 8
    progress(
        f"calibration 2/4: Varuna, {steps} steps, {', '.join(victims)} crash at steps "
        f"{', '.join(map(str, crash_steps))}"
    )
    inject = ",".join(f"{k}:{v}:crash:backward" for k, v in zip(crash_steps, victims))
    run, summary = _run(base, "varuna", steps, inject, directory)
    restarts = redone_overheads(summary, len(victims))
    _, extras_v = checkpoint_extra_s(summary["iteration_times_s"], base.checkpoint_every, CRASH_STEP)
    extras = extras_o + extras_v
    checkpoint = max(0.0, statistics.median(extras)) if extras else 0.0
    counts = slope_counts(nodes * base.gpus_per_node)
    progress(f"calibration 3/4: a restart's parts alone at {counts[0]} and {counts[1]} processes (its slope)")
    line = total_fit(counts)
    details["restart_parts"] = line.to_dict()
    survivors = (nodes - 1) * base.gpus_per_node  # Varuna restarts on the survivors of the first crash
    # each restart without its checkpoint, at the processes it started (one node fewer each time)
    measured_v = [
        (
            max(0.0, total - (checkpoint if rec.get("checkpoint_s", 0) > 0 else 0.0)),
            (nodes - 1 - i) * base.gpus_per_node,
        )
        for i, (total, rec) in enumerate(restarts)
    ]
    first_slope = pinned_slope_s(line.slope_s, measured_v[0][0], survivors)
    normalised = normalised_restarts_s(measured_v, first_slope, survivors)
    restart = max(0.0, statistics.median(normalised))
    median_rec = restarts[normalised.index(statistics.median_low(normalised))][1]  # its phases
    details["varuna"] = {
        "run_dir": str(run.directory),
        "recovery": median_rec,
        "recoveries": [rec for _, rec in restarts],
        "restarts_s": [m[0] for m in measured_v],
        "restarts_at_survivors_s": normalised,
        "checkpoint_extras_s": extras_v,
        "iteration_times_s": summary["iteration_times_s"],
        "predicted_iteration_s": first_plan_s(summary),
    }
    overheads = Overheads(
        reconfigure_overhead_s=max(0.0, reconfigure),
        restart_overhead_s=restart,
        checkpoint_fixed_s=checkpoint,
        node_startup_s=max(0.0, startup),
        details=details,
        restart_processes=survivors,
        restart_per_process_s=pinned_slope_s(line.slope_s, restart, survivors),
    ).noticed_apart()
    overheads = overheads.with_startup_share()  # the median restart's, over its own pause
    overheads = with_core_sweep(overheads, base, directory, core_counts, progress)
    overheads = overheads.with_core_costs(base.global_batch)
    directory.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(overheads.to_dict(), indent=2, default=str))
    if timing_for is not None:
        return _with_loaded_hops(overheads, base, directory, timing_for, progress)
    return overheads


def with_core_sweep(overheads: Overheads, base, directory: Path, counts: tuple[int, ...], progress) -> Overheads:
    """`overheads` with a failure-free Oobleck job of `CORE_SWEEP_STEPS` steps on each of
    `counts` nodes (f lowered to fit a count under f + 1), no checkpoints, the jobs'
    directories kept under `CORE_SWEEP_KEY` (and in `directory/overheads.json`) for
    `with_core_costs`; as they are where `counts` is empty or those counts were swept.
    Failure-free and apart from the trace: the trace tells only which counts it reaches."""
    wanted = sorted(set(counts))
    kept = (overheads.details.get(CORE_SWEEP_KEY) or {}).get("run_dirs") or {}
    if not wanted or sorted(int(w) for w in kept) == wanted:
        return overheads
    base = base.with_(trace=None, time_scale=1.0, inject=None, checkpoint_dir=None, checkpoint_every=0)
    run_dirs = {}
    for i, count in enumerate(wanted):
        progress(
            f"calibration: core sweep, a failure-free job on {count} node(s), {CORE_SWEEP_STEPS} steps "
            f"({i + 1} of {len(wanted)})"
        )
        config = base.with_(nodes=count, fault_tolerance=min(base.fault_tolerance, count - 1), pipelines=None)
        run, _ = _run(config, "oobleck", CORE_SWEEP_STEPS, None, directory / f"cores{count}")
        run_dirs[str(count)] = str(run.directory)
    costs = {k: v for k, v in (overheads.details.get(CORE_COST_KEY) or {}).items() if k != "by_workers"}
    details = {**overheads.details, CORE_SWEEP_KEY: {"run_dirs": run_dirs}, CORE_COST_KEY: costs}
    out = replace(overheads, details=details)
    (directory / "overheads.json").write_text(json.dumps(out.to_dict(), indent=2, default=str))
    return out


def _with_loaded_hops(overheads: Overheads, base, directory: Path, timing_for, progress) -> Overheads:
    """`overheads` with the loaded sends measured now (`loaded_hops`), cached with them."""
    base = base.with_(trace=None, time_scale=1.0, inject=None, checkpoint_dir=None)
    probes = _loaded_hop_probes(base, directory, timing_for, progress)
    fixed, per_process = fit_line(probes)
    details = {**overheads.details, LOADED_HOPS_KEY: probes_to_dict(probes)}
    out = replace(
        overheads,
        loaded_hop_fixed_s=fixed,
        loaded_hop_slope_s2=0.0,
        loaded_hop_per_process_s=per_process,
        details=details,
    )
    (directory / "overheads.json").write_text(json.dumps(out.to_dict(), indent=2, default=str))
    return out


def _loaded_hop_probes(base, directory: Path, timing_for: Callable[[float], Any], progress) -> list[HopProbe]:
    """Time the forced groupings of `probe_groupings` (no failures, no checkpoints) and
    solve each one's extra per send."""
    from real.control.planning import make_plan, make_planner

    groupings = probe_groupings(len(base.node_names()))
    probes = []
    for i, groups in enumerate(groupings):
        config = base.with_(nodes=sum(groups), pipelines=groups, checkpoint_every=0)
        progress(
            f"calibration 4/4: loaded pipeline sends, {len(groups)} pipelines of {groups[0]} stages "
            f"({i + 1} of {len(groupings)})"
        )
        _, summary = _run(config, "oobleck", PROBE_STEPS, None, directory / f"sends{i}")
        planner = make_planner(config)
        floor = planner.profile.communication.hop_overhead_s if planner.profile.communication is not None else 0.0
        plan = make_plan(planner, config, config.node_names())
        probes.append(probe(plan, summary["steady_iteration_s"], timing_for, floor))
    return probes
