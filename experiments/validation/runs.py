"""One policy's real run on the trace and its simulated twin, and their comparison.

The real run replays the trace file `time_scale` times faster from the start of
training, for a number of steps that the simulator expects to cover the trace, the
recovery from its last event and a tail of steady training, by default at least as
long as the longest simulated recovery (`planned_end_s`). The
simulator replays the same file (read back, so both see the same rounded times),
compressed by the same factor, its later events shifted by `lead_s` (the
simulated start-up: node start plus the start pause) so that its training starts when
the trace's time 0 comes, exactly as on the real backend; it runs in the planner
calibration on the same profile directory, cluster, batch, f and checkpoint interval,
with the calibration's overheads, and nothing else.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .busy import phase_busy_shares
from .compare import RunComparison, RunTimeline, compare_run
from .overheads import Overheads
from .spec import PreparedModel, ValidationSpec
from .timelines import real_timeline, sim_timeline

MIN_STEPS = 10


def base_run_config(spec: ValidationSpec, model: PreparedModel, nodes: int, steps: int = 20):
    from real.config import RunConfig

    return RunConfig(
        nodes=nodes,
        fault_tolerance=spec.fault_tolerance,
        compute=spec.compute,
        steps=steps,
        global_batch=spec.global_batch,
        gpu=spec.gpu,
        heartbeat_timeout_s=spec.heartbeat_timeout_s,
        checkpoint_every=spec.checkpoint_every,
        seed=spec.seed,
        **model.run_fields,
    )


def sim_trace(trace_file: Path, time_scale: float, lead_s: float):
    """The trace file as the real backend reads it, compressed, later events shifted."""
    from traces import compress, load
    from traces.model import Trace

    trace = compress(load(trace_file), time_scale)
    return Trace(
        tuple(replace(e, time_s=e.time_s + lead_s if e.time_s > 0 else 0.0) for e in trace.events),
        "validation",
    )


def twin_settings(spec: ValidationSpec, model: PreparedModel, policy: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The design's options as the real run resolves them, those the planner calibration
    uses, split into (SimConfig fields, design_options) for the simulated twin."""

    from designs.cli import split_settings
    from designs.options import PLANNER, as_dict
    from real.control.policies import resolve_design
    from sim.config import FLAT_KEYS

    design, options = resolve_design(base_run_config(spec, model, 1).with_(policy=policy))
    values = as_dict(options)
    settings = {s.name: values[s.name] for s in design.option_specs if PLANNER in s.where}
    return split_settings(policy, settings, set(FLAT_KEYS))


def sim_config(spec: ValidationSpec, model: PreparedModel, overheads: Overheads | None, policy: str, duration_s: float):
    """The simulated twin's config (`overheads` None: without the calibrated constants,
    as the calibration itself times plans)."""
    from sim.config import SimConfig

    extra, options = twin_settings(spec, model, policy)
    return SimConfig.of(
        policy=policy,
        model=str(model.profile_dir),
        trace="validation",
        calibration="planner",
        seed=spec.seed,
        global_batch=spec.global_batch,
        microbatch_size=1,
        gpu=spec.gpu,
        gpus_per_node=1,
        checkpoint_every_iterations=spec.checkpoint_every,
        duration_s=duration_s,
        timeline="iterations",
        **(overheads.sim_options(spec.loaded_sends) if overheads is not None else {}),
        # real compute: the host's cores bound the throughput (`core_cost`)
        **(overheads.core_options() if overheads is not None and spec.compute == "real" else {}),
        **extra,
        # the real backend notices a removal by its cause's kind (`real.control.schedule`): a
        # crash's exit at once, an isolated node (network fault, hang) at the heartbeat timeout
        detect_network_s=spec.heartbeat_timeout_s,
        detect_hang_s=spec.heartbeat_timeout_s,
        design_options=options or None,
    )


def failure_free_trace(nodes: int):
    """A trace of `nodes` nodes all there from time 0, none lost: a calibration job's."""
    from traces.model import Trace, TraceEvent

    return Trace(tuple(TraceEvent(0.0, "add", f"node{i}") for i in range(nodes)), "calibration")


def twin_timing_for(spec: ValidationSpec, model: PreparedModel, nodes: int) -> Callable[[float], Any]:
    """`extra` -> the simulator's Oobleck timing of the setting on `nodes` nodes, every
    pipeline send `extra` longer (0: without the term), for the loaded-send calibration
    (`loaded_hops`)."""

    from sim.setup import build

    trace = failure_free_trace(nodes)
    base = sim_config(spec, model, None, "oobleck", 1.0)

    def timing_for(extra_s: float):
        return build(base.with_(loaded_hop_fixed_s=extra_s or None), trace=trace).timing

    return timing_for


def lead_s(overheads: Overheads, processes: int) -> float:
    """When the simulated job starts training: the first nodes' start-up, then the start
    pause (the relaunch of its `processes`, as the simulator charges it)."""
    return overheads.node_startup_s + overheads.relaunch_s(processes)


def simulated_iteration_s(
    spec: ValidationSpec, model: PreparedModel, overheads: Overheads, policy: str, nodes: int, iterations: int = 12
) -> float:
    """The simulator's steady iteration of a failure-free job of the setting on `nodes`
    nodes (the median gap between its committed iterations after the first), as the
    calibration jobs' steady iteration is measured: what `reprofile` checks them against."""
    import statistics

    from sim.run import simulate as run_sim

    from .timelines import sim_iteration_ends

    lead = lead_s(overheads, nodes)
    trace = failure_free_trace(nodes)
    horizon_s = 10.0
    for _ in range(8):  # long enough for `iterations`, doubling
        result = run_sim(sim_config(spec, model, overheads, policy, lead + horizon_s), trace=trace)
        ends = sim_iteration_ends(list(result.timeline))
        if len(ends) > iterations:
            return statistics.median(b - a for a, b in zip(ends[1:], ends[2:]))
        horizon_s *= 2
    raise RuntimeError(
        f"internal error: the simulated {policy} job committed {len(ends)} iterations in {horizon_s:.0f} s"
    )


def simulate(spec, model, overheads, policy, trace_file, time_scale, window_s):
    from sim.run import simulate as run_sim

    lead = lead_s(overheads, spec.nodes)  # one process per emulated node (`sim_config`)
    trace = sim_trace(trace_file, time_scale, lead)
    return run_sim(sim_config(spec, model, overheads, policy, lead + window_s), trace=trace), lead


@dataclass(frozen=True)
class PolicyResult:
    policy: str
    real: RunTimeline
    sim: RunTimeline
    comparison: RunComparison
    real_summary: dict
    sim_summary: dict
    run_dir: Path

    def to_dict(self) -> dict:
        keys = (
            "status",
            "num_iterations",
            "committed_samples",
            "num_reconfigurations",
            "num_restarts",
            "num_checkpoints",
            "recovery_s",
            "steady_samples_per_s",
            "predicted_samples_per_s",
            "startup_s",
        )
        sim_keys = ("num_iterations", "committed_samples", "num_reconfigurations", "num_restarts", "num_checkpoints")
        return {
            "policy": self.policy,
            "run_dir": str(self.run_dir),
            "real": {k: self.real_summary.get(k) for k in keys},
            "sim": {k: self.sim_summary.get(k) for k in sim_keys},
            "comparison": self.comparison.to_dict(),
            "phase_cpu_busy_share": self.phase_busy_shares(),
            "phase_cpu_steal_share": self.phase_busy_shares("cpu_steal_share"),
        }

    def phase_busy_shares(self, key: str = "cpu_busy_share") -> list[float | None]:
        """Per compared phase, how busy the machine's cores were in the real run (`busy`);
        `key="cpu_steal_share"`: how much of their time the host stole."""
        return phase_busy_shares(self.real, self.real_summary.get(key) or [], self.comparison.phases)


def write_timelines(result: PolicyResult, directory: Path) -> None:
    """`timeline_real.csv` and `timeline_sim.csv`: per iteration end, samples/s and samples."""
    for side in (result.real, result.sim):
        lines = ["time_s,samples_per_s,samples_done"]
        for t, rate in side.throughput_points():
            if t <= result.comparison.window_s + 1e-9:
                lines.append(f"{t:.6f},{rate:.6f},{side.samples_at(t)}")
        (directory / f"timeline_{side.side}.csv").write_text("\n".join(lines) + "\n")
    (directory / "recoveries.json").write_text(
        json.dumps(
            {
                "real": list(result.real.recoveries),
                "sim": list(result.sim.recoveries),
                "joins": {"real": list(result.real.joins), "sim": list(result.sim.joins)},
            },
            indent=1,
        )
    )


def longest_recovery_s(sim: RunTimeline) -> float:
    """The longest recovery of a timeline (0 without one)."""
    return max((done - fail for fail, done in sim.recoveries), default=0.0)


def planned_end_s(sim: RunTimeline, trace_end_s: float, tail_s: float, cover_recovery: bool = False) -> float | None:
    """When the real run should end, in time since training started: a tail of steady
    training after the trace's last event or, when the simulated job is still recovering
    then, after its last recovery ends, so that both sides end in steady state (ending
    inside a restart would make the committed samples at the end a comparison of where
    that restart ends: a Varuna restart of 20-190 s against a tail of 13 s did that
    before). The tail is `tail_s` or, with `cover_recovery`, at least as long as the
    longest simulated recovery: over a shorter tail the committed samples weigh a
    restart's error more than the whole steady training (the 32-node Varuna run: a 14 s
    tail after a 188 s restart that really took 204 s, so +34.5% in samples from a -7.5%
    recovery error). None when the simulation does not reach that point with training
    (a recovery still open at its horizon, or the job waiting for nodes): simulate longer."""
    back_s = max([trace_end_s, *(done for _, done in sim.recoveries)])
    end_s = back_s + (max(tail_s, longest_recovery_s(sim)) if cover_recovery else tail_s)
    ends = sim.iteration_end_s
    if not ends or ends[-1] < end_s or end_s > sim.end_s:
        return None
    return end_s


def planned_steps(
    spec,
    model,
    overheads,
    policy,
    trace_file,
    time_scale,
    trace_end_s: float,
    tail_s: float,
    cover_recovery: bool = False,
):
    """(steps, end_s, recovered): the real run's length from the simulator's twin
    (`planned_end_s`), simulating over a horizon that doubles until it covers the last
    recovery. A job that never trains again there (waiting for nodes to the end) gets the
    steps simulated by the trace's end plus the tail, and `recovered` False."""
    horizon_s = trace_end_s + tail_s
    for _ in range(8):
        horizon_s *= 2
        result, lead = simulate(spec, model, overheads, policy, trace_file, time_scale, horizon_s)
        timeline = sim_timeline(result, policy, lead, horizon_s)
        end_s = planned_end_s(timeline, trace_end_s, tail_s, cover_recovery)
        if end_s is not None:
            return max(MIN_STEPS, bisect.bisect_right(timeline.iteration_end_s, end_s)), end_s, True
    end_s = trace_end_s + tail_s
    return max(MIN_STEPS, bisect.bisect_right(timeline.iteration_end_s, end_s)), end_s, False


def run_policy(
    spec: ValidationSpec,
    model: PreparedModel,
    overheads: Overheads,
    policy: str,
    trace_file: Path,
    time_scale: float,
    nodes: int,
    event_times_s: list[float],
    directory: Path,
    progress: Callable[[str], None] = print,
    trace_end_s: float | None = None,
) -> PolicyResult:
    from real.launch.local import run_local

    trace_end = max(max(event_times_s, default=0.0), trace_end_s or 0.0)
    cover = spec.tail_s is None  # the default tail; a tail that was given is kept as given
    tail = spec.tail_s if spec.tail_s is not None else max(8.0, 0.15 * trace_end)
    steps, planned_s, recovered = planned_steps(
        spec, model, overheads, policy, trace_file, time_scale, trace_end, tail, cover
    )
    config = base_run_config(spec, model, nodes, steps).with_(
        policy=policy,
        trace=str(trace_file),
        time_scale=time_scale,
        wait_for_nodes_s=max(120.0, 2 * planned_s),
    )
    why = "its last recovery, " if recovered else "no training after it in the simulation: "
    progress(
        f"{policy}: real run of {steps} steps on the trace ({planned_s:.0f} s expected: the trace's "
        f"{trace_end:.0f} s, {why}a tail of {tail:.0f} s{' or the longest recovery' if cover else ''}) ..."
    )
    run = run_local(config, directory / "real")
    summary = run.summary.to_dict()
    if summary["status"] != "finished":
        raise RuntimeError(f"the real {policy} run failed: {summary['reason']} (see {run.directory})")
    real = real_timeline(summary, policy, spec.global_batch)
    # Compared over [0, real.end_s] only, but simulated twice as long: a recovery that
    # begins near the window's end must be able to finish in the simulation (a slower
    # simulated restart cut off by the horizon would leave its measured twin unmatched).
    window_s = max(real.end_s, planned_s) + 1.0
    result, lead = simulate(spec, model, overheads, policy, trace_file, time_scale, 2 * window_s)
    sim = sim_timeline(result, policy, lead, real.end_s)
    result.write(directory / "sim")
    comparison = compare_run(real, sim, event_times_s)
    out = PolicyResult(policy, real, sim, comparison, summary, result.summary.to_dict(), run.directory)
    write_timelines(out, directory)
    return out
