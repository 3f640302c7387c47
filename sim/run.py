"""Run one simulation and package its record (DESIGN 4): config, summary, timeline, events.

`simulate(config)` returns a `SimResult`; `SimResult.write(dir)` writes the four files of
`planner.records`. Results are deterministic: the same config (and seed) gives the same
bytes; nothing depends on the wall clock. The default directory is
`results/sim/<run id>`, the run id being readable fields plus a hash of the resolved config.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.records import INFEASIBLE, NEVER_TRAINED, OK, EventRecord, RunSummary, TimelineRow, write_run
from traces.model import Trace

from . import artifact_data as art
from .artifact_quirks import ArtifactQuirks
from .artifact_replay import Replay
from .config import ARTIFACT_CALIBRATIONS, SimConfig
from .engine import Simulation
from .errors import SimError
from .setup import Setup, build

DEFAULT_RESULTS = Path("results") / "sim"


@dataclass(frozen=True)
class SimResult:
    config: dict[str, Any]
    summary: RunSummary
    timeline: tuple[TimelineRow, ...]
    events: tuple[EventRecord, ...]

    @property
    def run_id(self) -> str:
        digest = hashlib.sha256(json.dumps(self.config, sort_keys=True, default=str).encode()).hexdigest()[:10]
        slug = "-".join(str(self.config[k]) for k in ("policy", "model", "calibration"))
        trace = re.sub(
            r"[^A-Za-z0-9._=-]+",
            "_",
            Path(str(self.config["trace"])).stem
            if Path(str(self.config["trace"])).suffix
            else str(self.config["trace"]),
        )
        return re.sub(r"[^A-Za-z0-9._=-]+", "_", f"{slug}-{trace}")[:80] + f"-{digest}"

    def write(self, directory: str | Path | None = None) -> Path:
        target = Path(directory) if directory is not None else DEFAULT_RESULTS / self.run_id
        return write_run(target, self.config, self.summary, self.timeline, self.events)


def simulate(config: SimConfig, *, trace: Trace | None = None) -> SimResult:
    """Run `config` (on `trace` if given, else the one its `trace` field names)."""
    setup = build(config, trace)
    if setup.quirks is not None and setup.quirks.needs_replay():
        return _replayed(setup)
    sim = Simulation(
        setup.trace,
        setup.policy,
        setup.pricing,
        iteration_rows=config.run.timeline == "iterations",
        duration_s=config.run.duration_s,
        adaptive_checkpoints=setup.adaptive,
    ).run()
    return SimResult(setup.resolved, summarize(sim, setup), tuple(sim.timeline), tuple(sim.events))


def outcome(
    infeasible: str | None,
    first_start: float | None,
    events: Sequence[EventRecord],
    launches: tuple[int, float, float] | None = None,
    committed: tuple[int, float, float] | None = None,
) -> dict[str, Any]:
    """`outcome` and `infeasible_reason`: why a run trained nothing, when it did not. Where
    launches began and failures cut every one short (`launches`: how many, the last one's
    seconds, and the mean seconds between losses of working nodes), that is the cause;
    else the reason of the last wait for nodes, from the run's decisions. A run that started
    but committed no iteration (`committed`: iterations, the last plan's iteration seconds,
    the mean seconds between losses of working nodes, 0 for none) trained nothing either."""
    if infeasible is not None:
        return {"outcome": INFEASIBLE, "infeasible_reason": infeasible}
    if first_start is not None and committed is not None and committed[0] == 0:
        _, iteration_s, every_s = committed
        if every_s > 0:
            why = (
                f"never trained: no iteration was committed (one takes {iteration_s:,.0f} s; a working node was "
                f"lost every {every_s:,.0f} s on average)"
            )
        else:
            why = f"never trained: the run ended before its first iteration ({iteration_s:,.0f} s) was committed"
        return {"outcome": NEVER_TRAINED, "infeasible_reason": why}
    if first_start is None and launches is not None and launches[0] > 0 and launches[2] > 0:
        count, launch_s, every_s = launches
        why = (
            f"never trained: failures cut every launch short ({count} launch(es) of {launch_s:,.0f} s; a working "
            f"node was lost every {every_s:,.0f} s on average)"
        )
        return {"outcome": NEVER_TRAINED, "infeasible_reason": why}
    if first_start is None:
        waits = (
            a.get("reason")
            for e in reversed(events)
            if e.kind == "decision"
            for a in e.detail.get("actions", ())
            if a.get("action") == "WaitForNodes" and a.get("reason")
        )
        why = next(waits, None) or "the run ended before its first start completed"
        return {"outcome": NEVER_TRAINED, "infeasible_reason": f"never trained: {why}"}
    return {"outcome": OK, "infeasible_reason": None}


def _every_loss_s(sim: Simulation) -> float:
    """Mean seconds between losses of working nodes over the run (0: none lost)."""
    lost = sim.counts["working_removed"]
    return (sim.end_s - sim.start_s) / lost if lost else 0.0


def _launches(sim: Simulation) -> tuple[int, float, float] | None:
    """(launches begun, the last one's seconds, mean seconds between losses of working
    nodes) of a run that never trained, None where it did or lost none while launching."""
    launched = sim.counts["starts"] + sim.counts["restarts"]
    lost = sim.counts["working_removed"]
    if sim.first_start_t is not None or not launched or not lost or sim.launch_s <= 0:
        return None
    return launched, sim.launch_s, _every_loss_s(sim)


def summarize(sim: Simulation, setup: Setup) -> RunSummary:
    config = setup.config
    led = sim.ledger
    batch = sim.timing.samples_per_iteration
    samples = sim.samples  # iterations x batch, unless plans over part of the batch ran
    span = 0.0
    if sim.first_start_t is not None and sim.last_iteration_t is not None:
        span = sim.last_iteration_t - sim.first_start_t
    node_hours = led.node_s / 3600.0
    counts = sim.counts
    extra = {
        **outcome(
            sim.infeasible,
            sim.first_start_t,
            sim.events,
            _launches(sim),
            (sim.iterations, sim.stretch.tau, _every_loss_s(sim)),
        ),
        "first_start_s": sim.first_start_t,
        "last_iteration_s": sim.last_iteration_t,
        "removals": counts["removals"],
        "working_nodes_removed": counts["working_removed"],
        "starts": counts["starts"],
        "rollbacks": counts["rollbacks"],
        "checkpoints_failed": counts["checkpoints_failed"],
        "iterations_interrupted": counts["iterations_lost"],
        "decisions": counts["decisions"],
        "unfinished_iteration_s": led.unfinished_s,
        "samples_per_iteration": batch,
        "on_demand_cost_usd": node_hours * 3.06 if config.run.calibration in ARTIFACT_CALIBRATIONS else None,
    }
    if setup.resolved.get("detection"):  # per failure kind: the seconds to declare a loss, and by what
        extra["detection"] = {kind: dict(entry) for kind, entry in setup.resolved["detection"].items()}
    if setup.resolved.get("extrapolated_terms"):  # the profile's values used outside their measured range
        extra["extrapolated_terms"] = list(setup.resolved["extrapolated_terms"])
    return RunSummary(
        policy=config.design.name,
        model=config.job.model,
        trace=sim.trace.name,
        calibration=config.run.calibration,
        duration_s=sim.end_s - sim.start_s,
        avg_samples_per_s=samples / span if span > 0 else 0.0,
        committed_samples=samples,
        num_iterations=sim.iterations,
        num_reconfigurations=counts["reconfigurations"],
        num_restarts=counts["restarts"],
        num_checkpoints=counts["checkpoints"],
        failures_survived=counts["failures_survived"],
        node_hours=node_hours,
        cost_usd=node_hours * setup.price_per_node_hour,
        breakdown=led.breakdown(),
        extra=extra,
        idle_gpu_s=led.idle_gpu_s,
    )


def _replayed(setup: Setup) -> SimResult:
    """The artifact's code replayed (`sim.artifact_replay`), packaged like an engine run."""
    config = setup.config
    used = setup.resolved.get("effective_design_options") or setup.resolved.get("design_options") or {}
    rollback = used.get("rollback", True)
    system = getattr(setup.timing, "system", None)
    if not isinstance(system, str):
        raise SimError(f"internal: the artifact replay needs an artifact timing, got {type(setup.timing).__name__}")
    rep = Replay(
        setup.trace,
        system,
        config.job.model,
        setup.quirks or ArtifactQuirks(),
        rollback=bool(rollback),
        node_startup_s=setup.node_startup_s,
        price_per_node_hour=setup.price_per_node_hour,
        duration_s=config.run.duration_s,
        iteration_rows=config.run.timeline == "iterations",
    ).run()
    node_hours = rep.node_s / 3600.0
    steps = rep.committed_steps()
    c = rep.counts
    summary = RunSummary(
        policy=config.design.name,
        model=config.job.model,
        trace=setup.trace.name,
        calibration=config.run.calibration,
        duration_s=(rep.end_ms - rep.start_ms) / 1000,
        avg_samples_per_s=rep.avg_samples_per_s(),
        committed_samples=steps * rep.batch,
        num_iterations=steps,
        num_reconfigurations=rep.recoveries()[0],
        num_restarts=rep.recoveries()[1],
        num_checkpoints=c["checkpoints"] - c["checkpoints_failed"],
        failures_survived=0,
        node_hours=node_hours,
        cost_usd=node_hours * setup.price_per_node_hour,
        breakdown=rep.breakdown(),
        extra={
            **outcome(rep.infeasible, rep.first_ms, rep.events),
            "first_start_s": None if rep.first_ms is None else rep.first_ms / 1000,
            "last_iteration_s": None if rep.last_step_t is None else rep.last_step_t / 1000,
            "removals": c["removals"],
            "rollbacks": c["rollbacks"],
            "checkpoints_failed": c["checkpoints_failed"],
            "stalls": c["stalls"],
            "artifact_steps_complete": rep.steps,
            "samples_per_iteration": rep.batch,
            "on_demand_cost_usd": node_hours * art.ON_DEMAND_PRICE_PER_NODE_HOUR,
        },
        num_failed_checkpoints=c["checkpoints_failed"],
    )
    return SimResult(setup.resolved, summary, tuple(rep.timeline), tuple(rep.events))
