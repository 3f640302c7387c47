"""A whole validation: prepare, calibrate, run each policy on both sides, compare, write.

`validate(spec, out_dir)` writes under `out_dir`:
  trace.csv                      what both sides replayed
  profile/                       what both sides planned with (in `shared_dir` if given)
  profile-check.json             real compute: the profile against the calibration's pace,
                                 and the measurements taken again where it was off
                                 (`profile-remeasured/`; `reprofile`)
  calibration/overheads.json     the measured fixed overheads and their two runs (ditto)
  <policy>/real/, <policy>/sim/  each side's run record (config, summary, timeline, events)
  <policy>/timeline_{real,sim}.csv, recoveries.json
  report.json                    the spec, the overheads, per-run comparisons, the errors,
                                 the machine's pace in each run against the calibration's
  validation.png                 throughput over time, simulated vs measured, per policy
and returns the report as a dict (its `errors` hold the three headline figures).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from designs import registry

from .busy import as_percents
from .calibrate import calibrate, first_plan_s, measured_steady_s, pace_ratios
from .compare import percent, summarize
from .drift import pace_check
from .overheads import CORE_COST_KEY, Overheads
from .reprofile import REMEASURED, checked_profile
from .runs import base_run_config, run_policy, simulated_iteration_s, twin_timing_for
from .spec import PreparedModel, ValidationSpec, prepare_model, prepare_trace


def shown(policy: str) -> str:
    """A policy as printed lines name it: its design's display name."""
    return registry.shown(policy)


def _profile_check(
    spec: ValidationSpec,
    model: PreparedModel,
    keep: Path,
    nodes: int,
    overheads: Overheads,
    measured: dict[str, float],
    progress,
) -> dict | None:
    """`reprofile.checked_profile` for a model profiled here (real compute), None otherwise:
    each calibration job's steady iteration (`measured`) over the simulator's of the same
    failure-free job (`simulated_iteration_s`); new measurements under `keep`, with the
    first one's communication figures."""
    if spec.compute != "real" or not measured:
        return None
    from planner.oobleck_format import COMMUNICATION_FILE

    def paces_for(directory: Path) -> dict[str, float]:
        candidate = replace(
            model, profile_dir=directory, run_fields={**model.run_fields, "profile_dir": str(directory)}
        )
        return {
            policy: steady / simulated_iteration_s(spec, candidate, overheads, policy, nodes)
            for policy, steady in measured.items()
        }

    def measure(i: int) -> Path:
        parent = keep / REMEASURED / str(i)
        target = parent / "profile"
        target.mkdir(parents=True, exist_ok=True)
        communication = model.profile_dir / COMMUNICATION_FILE
        if communication.exists():  # measured once per output directory
            shutil.copyfile(communication, target / COMMUNICATION_FILE)
        prepare_model(spec, parent, progress)
        return target

    return checked_profile(model.profile_dir, paces_for, measure, progress)


def validate(
    spec: ValidationSpec,
    out_dir: str | Path,
    progress: Callable[[str], None] = print,
    shared_dir: str | Path | None = None,
) -> dict:
    """Run the validation into `out_dir`; `shared_dir` (default `out_dir`) keeps the
    profile and the calibration, so validations of one setting on several traces measure
    them once."""
    from traces import save_events_csv

    t0 = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prepared = prepare_trace(spec)
    trace_file = out / "trace.csv"
    save_events_csv(prepared.trace, trace_file)
    live = prepared.trace.live_counts()["live_nodes"]
    nodes = int(live.max())
    keep = Path(shared_dir) if shared_dir is not None else out
    keep.mkdir(parents=True, exist_ok=True)
    model = prepare_model(spec, keep, progress)
    progress(f"trace: {prepared.note}; model: {model.note}; {nodes} nodes, {spec.compute} compute")
    # the loaded sends, where asked (emulated compute only: real compute's contention
    # profile holds its loaded hop per busy neighbours, `planner.contention`)
    timing_for = twin_timing_for(spec, model, nodes) if spec.loaded_sends else None
    # real compute: what a sample costs the cores on each worker count the trace reaches
    low = max(1, int(live.min()))
    core_counts = tuple(range(low, nodes + 1)) if spec.compute == "real" and low < nodes else ()
    overheads = calibrate(base_run_config(spec, model, nodes), keep / "calibration", progress, timing_for, core_counts)
    # every emulated node's processes start on this machine's cores: a node that joins
    # during a restart shares them with the restart's processes (`sim.startup_pool`)
    overheads = replace(overheads, startup_cores=float(os.cpu_count() or 1))
    progress(
        "overheads: "
        + ", ".join(
            f"{k} {('on' if v else 'off') if isinstance(v, bool) else f'{v:.3f}'}{' s' if k.endswith('_s') else ''}"
            for k, v in overheads.to_dict().items()
            if k != "details"
        )
    )
    ratios = pace_ratios(overheads.details)
    if ratios:
        progress(
            "calibration pace (the real job's steady iteration over the plan's prediction; far from 1, the profile "
            "was measured in another state of the machine): "
            + ", ".join(f"{shown(policy)} x{ratio:.2f}" for policy, ratio in ratios.items())
        )
    # real compute: a profile the calibration jobs contradict is measured again (`reprofile`)
    steady = measured_steady_s(overheads.details)
    profile_check = _profile_check(spec, model, keep, nodes, overheads, steady, progress)
    if spec.compute == "real":
        bound = overheads.core_options()
        costs = overheads.details.get(CORE_COST_KEY) or {}
        jobs = ", ".join(f"{shown(p)} {1000 * costs[p]:.1f} ms" for p in ("oobleck", "varuna") if p in costs)
        swept = costs.get("by_workers") or {}
        per_worker = bound.get("sample_core_per_worker_s")
        if not bound:
            line = "core-seconds a sample: not measured (no busy readings in the calibration jobs), no ceiling"
        elif per_worker is not None:
            line = (
                "core-seconds a sample, core sweep: "
                + ", ".join(f"{1000 * c:.1f} ms on {w}" for w, c in swept.items())
                + f" workers; the simulator's line {1000 * bound['sample_core_s']:.1f} + {1000 * per_worker:.1f} ms "
                f"a worker past the first, on {bound['compute_cores']:g} cores (the calibration jobs: {jobs})"
            )
        else:
            line = (
                f"core-seconds a sample cost the calibration jobs ({jobs}): {1000 * bound['sample_core_s']:.1f} ms "
                f"on {bound['compute_cores']:g} cores, the simulator's ceiling at "
                f"{bound['compute_cores'] / bound['sample_core_s']:.1f} samples/s"
            )
        progress(line)
    from traces import compress, load

    replayed = compress(load(trace_file), prepared.time_scale)
    event_times = sorted({e.time_s for e in replayed.events if e.time_s > 0})
    results = []
    for policy in spec.policies:
        directory = out / policy
        directory.mkdir(exist_ok=True)
        result = run_policy(
            spec,
            model,
            overheads,
            policy,
            trace_file,
            prepared.time_scale,
            nodes,
            event_times,
            directory,
            progress,
            prepared.replay_s,
        )
        c = result.comparison
        busy, steal = result.phase_busy_shares(), result.phase_busy_shares("cpu_steal_share")
        progress(
            f"{shown(policy)}: samples real {c.real_samples} sim {c.sim_samples} ({percent(c.samples_error)}); "
            f"throughput errors {[percent(e) for e in c.throughput_errors()]}; recovery errors {[percent(e) for e in c.recovery_errors()]}"
            + (
                "; joins (real/sim s) "
                + ", ".join(f"{j.real_s:.2f}/{'n/a' if j.sim_s is None else f'{j.sim_s:.2f}'}" for j in c.joins)
                if c.joins
                else ""
            )
            + (f"; cores busy per phase {as_percents(busy)}" if any(busy) else "")
            + (f", of which stolen by the host {as_percents(steal)}" if any(steal) else "")
        )
        results.append(result)
    # the machine's pace in each trace run against its calibration's (a diagnosis only); where
    # the profile was replaced, the calibration jobs' paces against the kept profile's plans
    # (the trace runs' first ones)
    if profile_check is not None and profile_check["chosen"] != 0:
        plans = {r.policy: first_plan_s(r.real_summary) for r in results}
        ratios = {p: steady[p] / s for p, s in plans.items() if p in steady and s}
    checks = [pace_check(r.policy, ratios, nodes, r.real, r.real_summary, event_times) for r in results]
    for check in checks:
        if (warning := check.warning()) is not None:
            progress(f"warning: {warning}")
    report = {
        "spec": spec.to_dict(),
        "trace": prepared.note,
        "time_scale": prepared.time_scale,
        "trace_events_s": event_times,
        "model": model.note,
        "nodes": nodes,
        "overheads": {
            **{k: v for k, v in overheads.to_dict().items() if k != "details"},
            "restart_fixed_s": overheads.restart_fixed_s,
        },
        "runs": [r.to_dict() for r in results],
        "errors": summarize([r.comparison for r in results]),
        "pace_checks": [c.to_dict() for c in checks],
        "profile_check": profile_check,
        "wall_s": time.perf_counter() - t0,
    }
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    # what was fitted, as a cost profile a simulation can name (`ooblab simulate --costs FILE`)
    where = f"{socket.gethostname()}, {time.strftime('%Y-%m-%d')}"
    profile = overheads.cost_profile(where, loaded_sends=spec.loaded_sends, real_compute=spec.compute == "real")
    (out / "costs.json").write_text(json.dumps(profile.to_dict(), indent=2))
    try:
        from .plots import timeline_figure

        fig = timeline_figure(
            results, event_times, title=f"{spec.label or prepared.note}: {model.note}, {spec.compute}"
        )
        fig.savefig(out / "validation.png", dpi=110, bbox_inches="tight")
        report["figure"] = str(out / "validation.png")
    except ImportError:  # matplotlib missing: the numbers still stand
        pass
    return report
