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
off (bandwidths `UNLIMITED_GB_PER_S`): the measured constants hold the whole cost for
this model, as it moves the same bytes every time.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from .core_cost import core_line, measured_core_costs, sweep_points
from .loaded_hops import PROBE_STEPS, HopProbe, fit_line, probe, probe_groupings, probes_to_dict
from .notice import pause_apart
from .restart_parts import total_fit

CRASH_STEP = 8
MAX_OOBLECK_CRASHES = 3
MIN_CRASH_GAP_S = 12.0  # between the Oobleck calibration's kills: a recovery and steady iterations
JOIN_AFTER_S = 4.0  # the first victim starts again this long after the last kill
CHECKPOINT_EVERY = 2  # the calibration runs checkpoint often, to time several checkpoints
STARTUP_ALLOWANCE_S = 15.0  # how long the calibration run waits for the joining node
UNLIMITED_GB_PER_S = 1e6
# where the loaded-send probes are kept; a calibration cached with the evening's
# sends-per-second fit (under "loaded_hops") is probed again when the term is asked for
LOADED_HOPS_KEY = "loaded_hops_by_processes"
# details: the core-seconds a sample cost each calibration job, "all" over both jobs'
# iterations (the simulator's), and the "cores" they were measured on (`core_cost`)
CORE_COST_KEY = "sample_core_s"
# details: the core sweep's jobs (`with_core_sweep`): worker count -> run directory
CORE_SWEEP_KEY = "core_sweep"
CORE_SWEEP_STEPS = 14  # the first sets the schedules up: 13 steady iterations


@dataclass(frozen=True)
class Overheads:
    reconfigure_overhead_s: float
    restart_overhead_s: float
    checkpoint_fixed_s: float
    node_startup_s: float
    details: Mapping[str, Any]  # what each figure was computed from
    # the restart measured (`restart_overhead_s`) started this many processes; each one
    # more or fewer costs `restart_per_process_s` (0 and 0: calibrations cached before
    # the slope was measured, a constant restart)
    restart_processes: int = 0
    restart_per_process_s: float = 0.0
    # the share of a restart until its processes have all started (0: calibrations cached
    # before it was measured, a restart that any removal cuts short)
    restart_startup_share: float = 0.0
    # what a pipeline send costs more per the plan's processes (`loaded_hops`; 0, 0 and 0:
    # calibrations cached before it was measured, the profile's hop alone; a slope per
    # sends a second: one cached on the evening of 2026-12-03, measured again when asked)
    loaded_hop_fixed_s: float = 0.0
    loaded_hop_slope_s2: float = 0.0
    loaded_hop_per_process_s: float = 0.0
    # the cores the emulated nodes' processes share (`sim.startup_pool`): the machine
    # that runs the trace runs, set by the validation (0: each start-up on its own)
    startup_cores: float = 0.0
    # `reconfigure_overhead_s` leaves out the survivors' wait to notice the loss, which the
    # simulator then charges as its mean over the iteration (`sim.notice`; False:
    # calibrations cached before it was measured apart, the wait in the pause)
    sync_notice: bool = False

    @property
    def restart_fixed_s(self) -> float:
        """The relaunch line's intercept through the measured restart (never below 0)."""
        return max(0.0, self.restart_overhead_s - self.restart_per_process_s * self.restart_processes)

    def relaunch_s(self, processes: int) -> float:
        """What the simulator charges a relaunch of `processes` (`sim.cost_terms.relaunch_s`)."""
        from sim.cost_terms import relaunch_s

        return relaunch_s(self.restart_fixed_s, self.restart_per_process_s, processes)

    def sim_options(self, loaded_sends: bool = False) -> dict[str, Any]:
        """The simulator's pause options (the same for every policy), with the loaded
        sends' constants where asked (`loaded_hops`)."""
        loaded = {
            "loaded_hop_fixed_s": self.loaded_hop_fixed_s,
            "loaded_hop_slope_s2": self.loaded_hop_slope_s2,
            "loaded_hop_per_process_s": self.loaded_hop_per_process_s,
        }
        return {
            "reconfigure_overhead_s": self.reconfigure_overhead_s,
            "restart_fixed_s": self.restart_fixed_s,
            "restart_per_process_s": self.restart_per_process_s,
            "restart_startup_share": self.restart_startup_share,
            "checkpoint_fixed_s": self.checkpoint_fixed_s,
            "restart_load_gb_per_s": UNLIMITED_GB_PER_S,
            "storage_gb_per_s": UNLIMITED_GB_PER_S,
            "node_startup_s": self.node_startup_s,
            **({"startup_cores": self.startup_cores} if self.startup_cores else {}),
            **({"sync_notice": True} if self.sync_notice else {}),
            **(loaded if loaded_sends else {}),
        }

    def cost_profile(self, where: str, *, loaded_sends: bool = False, real_compute: bool = False):
        """What this calibration fitted, as a cost profile (`sim.cost_profiles`) a
        simulation can name: the options `sim_options` and (real compute) `core_options`
        give the validation's own runs, each sourced to this calibration on `where`."""
        from sim.cost_profiles import from_values

        values = {**self.sim_options(loaded_sends), **(self.core_options() if real_compute else {})}
        fitted = f"fitted by ooblab validate on {where} (overheads.json beside this file)"
        unlimited = "assumed: unlimited, the emulated nodes keep their checkpoints on this host"
        return from_values(
            f"validated-{where}",
            f"the pauses and testbed terms ooblab validate measured on {where}",
            values,
            {"*": fitted, "restart_load_gb_per_s": unlimited, "storage_gb_per_s": unlimited},
        )

    def noticed_apart(self) -> Overheads:
        """These overheads with the reconfiguration pause less the survivors' measured
        wait to notice each loss (`notice.pause_apart`) and `sync_notice` set; as they are
        where that is already so or cannot be measured."""
        if self.sync_notice:
            return self
        apart = pause_apart(self.details.get("oobleck") or {})
        if apart is None:
            return self
        pause, notices = apart
        details = {**self.details, "oobleck": {**self.details["oobleck"], "notices_s": notices}}
        return replace(self, reconfigure_overhead_s=pause, sync_notice=True, details=details)

    def with_startup_share(self) -> Overheads:
        """These overheads with the start-up share worked out from their Varuna details
        (`median_startup_share`), as a fresh calibration does; as they are where the
        details cannot say (a calibration cached before they were kept)."""
        share = median_startup_share(self.details.get("varuna") or {})
        return self if share is None else replace(self, restart_startup_share=share)

    def with_core_costs(self, samples_per_iteration: int) -> Overheads:
        """These overheads with the core-seconds a sample cost each calibration job
        (`core_cost.measured_core_costs`, in `details`), read from the jobs' summaries
        where a calibration cached before them lacks them; as they are otherwise."""
        known = self.details.get(CORE_COST_KEY) or {}
        if "all" in known and ("by_workers" in known or CORE_SWEEP_KEY not in self.details):
            return self
        costs = measured_core_costs(self.details, samples_per_iteration)
        points = sweep_points(self.details.get(CORE_SWEEP_KEY) or {}, samples_per_iteration)
        if points and "all" in costs:
            costs["by_workers"] = {str(w): c for w, c in sorted(points.items())}
        return replace(self, details={**self.details, CORE_COST_KEY: costs})

    def core_options(self) -> dict[str, Any]:
        """The simulator's throughput ceiling (`sim.core_bound`): where a core sweep
        measured two worker counts or more, the line through them (`core_cost.core_line`);
        else the core-seconds a sample cost the calibration jobs
        (`core_cost.measured_core_costs`, both jobs' iterations), on any count; with the
        cores they were measured on; empty where not measured."""
        costs = self.details.get(CORE_COST_KEY) or {}
        if "all" not in costs or not costs.get("cores"):
            return {}
        options = {"compute_cores": float(costs["cores"]), "sample_core_s": float(costs["all"])}
        line = core_line({int(w): float(c) for w, c in (costs.get("by_workers") or {}).items()})
        if line is not None:
            options.update(sample_core_s=line[0], sample_core_per_worker_s=line[1])
        return options

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Overheads:
        return cls(**dict(data))


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


STARTUP_PHASES = ("detection_s", "rebuild_s", "planning_s", "respawn_s")  # failure .. every process started


def median_startup_share(varuna: Mapping[str, Any]) -> float | None:
    """The start-up share of the Varuna calibration's median restart (`details["varuna"]`:
    its `recovery`, among `recoveries`, and each one's measured pause, `restarts_s`), over
    that restart's own pause; None where the details lack them."""
    rec, recoveries, measured = varuna.get("recovery"), varuna.get("recoveries"), varuna.get("restarts_s")
    if not rec or not recoveries or not measured or len(recoveries) != len(measured) or rec not in recoveries:
        return None
    return startup_share(rec, float(measured[recoveries.index(rec)]))


def startup_share(recovery: Mapping[str, Any], restart_s: float) -> float:
    """The share of a restart's pause (`restart_s`) that passed before its processes had
    all started: its phases up to the respawn's end, in [0, 1] (0 without a pause)."""
    if restart_s <= 0:
        return 0.0
    started = sum(float(recovery.get(name) or 0.0) for name in STARTUP_PHASES)
    return min(1.0, max(0.0, started / restart_s))


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


def oobleck_crashes(nodes: int) -> int:
    """How many nodes the Oobleck calibration kills: 3 (the median of three pauses), fewer
    so that the job keeps 4 nodes where it can, and always one (the quick setting's 4
    nodes: 1)."""
    return max(1, min(MAX_OOBLECK_CRASHES, nodes - 4))


def varuna_crashes(nodes: int) -> int:
    """How many restarts the Varuna calibration times: as many as `oobleck_crashes` (3 from
    7 nodes on; the quick setting's 4 nodes: 1, so its calibration stays short)."""
    return oobleck_crashes(nodes)


def varuna_crash_steps(crashes: int) -> list[int]:
    """The steps whose backward pass each crash strikes: `CRASH_STEP`, then every 6 steps
    (even steps, so each comes just after a periodic checkpoint at `CHECKPOINT_EVERY` = 2
    and the restart redoes one iteration; 5 steady iterations between restarts)."""
    return [CRASH_STEP + 6 * i for i in range(crashes)]


def normalised_restarts_s(measured: list[tuple[float, int]], slope_s: float, processes: int) -> list[float]:
    """Each (restart seconds, processes it started) moved along the relaunch line to
    `processes`: what that restart would have cost with `processes` (the calibration's
    later restarts start fewer processes than its first)."""
    return [seconds + slope_s * (processes - started) for seconds, started in measured]


def crash_times_s(pace_s: float, crashes: int) -> tuple[list[float], float]:
    """(the kills' times since training started, the first victim's return): the first
    after 2 x `CRASH_STEP` predicted iterations (so `CRASH_STEP` real ones run first even
    at twice the predicted pace), then a gap of `MIN_CRASH_GAP_S` or 10 iterations; the
    return as long after the last (`JOIN_AFTER_S` after a single kill, whose live
    recovery on a small job takes about a second: a node that registers during a
    recovery is taken into it, and its copies would lengthen the pause measured)."""
    gap = max(MIN_CRASH_GAP_S, 10 * pace_s)
    first = 2 * CRASH_STEP * pace_s
    kills = [first + i * gap for i in range(crashes)]
    return kills, kills[-1] + (gap if crashes > 1 else JOIN_AFTER_S)


def spread_indices(pipelines: int, count: int) -> list[int]:
    """`count` pipeline indices spread evenly over `pipelines` (1/4, 1/2, 3/4 for three),
    never the first while others are left: a trace removes nodes anywhere, and where the
    lost rank sits set the pause while the failure cascaded around the gradient ring one
    teardown at a time (32 nodes: 5.4 and 9.2 s for the nodes of ranks 0 and 1, 3.6 and
    7.0 s for ranks 16 and 8 at the same moments; `--no-sever` brings that back)."""
    picked = sorted({round((i + 1) * pipelines / (count + 1)) for i in range(count)})
    return [min(i, pipelines - 1) for i in picked] if pipelines > count else list(range(pipelines))[:count]


def _victims(config, policy: str, count: int = 1, nodes: tuple[str, ...] | None = None) -> list[str]:
    """The last node of `count` pipelines spread over the plan (`spread_indices`; Oobleck)
    or the last node of the plan (Varuna) the policy starts with on `nodes` (default: all
    the job's): the same call the coordinator makes. With f >= 1 and two or more
    pipelines left, the loss of any one node keeps every layer."""
    from planner.policies import NodesReady
    from real.control.planning import make_planner, resolve_run_profile
    from real.control.policies import make_policy, view

    profile = resolve_run_profile(config)
    c = config.with_(policy=policy)
    ready = tuple(c.node_names()) if nodes is None else nodes
    plan = (
        make_policy(c, make_planner(c, profile), profile)
        .decide(view(list(ready), "waiting", 0, 0, 0.0), NodesReady(ready), None)
        .plan
    )
    if hasattr(plan, "pipelines"):
        if len(plan.pipelines) < count:
            raise RuntimeError(f"the calibration plan has {len(plan.pipelines)} pipelines, fewer than {count} victims")
        return [plan.pipelines[i].nodes[-1] for i in spread_indices(len(plan.pipelines), count)]
    return [plan.nodes[-1]]


def varuna_victims(config, count: int) -> list[str]:
    """The last node of the plan Varuna starts with, then of the plan it restarts on
    after each earlier victim is gone (the same call the coordinator makes on the
    survivors), so that every crash strikes a node the job is running on."""
    victims: list[str] = []
    for _ in range(count):
        left = tuple(n for n in config.node_names() if n not in victims)
        (victim,) = _victims(config, "varuna", nodes=left)
        victims.append(victim)
    return victims


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
    victims = _victims(base, "oobleck", oobleck_crashes(nodes))
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
