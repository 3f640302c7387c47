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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.records import EventRecord, RunSummary, TimelineRow, write_run
from traces.model import Trace

from .config import SimConfig
from .engine import Simulation
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
    sim = Simulation(
        setup.trace,
        setup.policy,
        setup.timing,
        node_startup_s=setup.node_startup_s,
        price_per_node_hour=setup.price_per_node_hour,
        iteration_rows=config.timeline == "iterations",
        duration_s=config.duration_s,
    ).run()
    return SimResult(setup.resolved, summarize(sim, setup), tuple(sim.timeline), tuple(sim.events))


def summarize(sim: Simulation, setup: Setup) -> RunSummary:
    config = setup.config
    led = sim.ledger
    batch = sim.timing.samples_per_iteration
    samples = sim.iterations * batch
    span = 0.0
    if sim.first_start_t is not None and sim.last_iteration_t is not None:
        span = sim.last_iteration_t - sim.first_start_t
    node_hours = led.node_s / 3600.0
    counts = sim.counts
    extra = {
        "outcome": "ok" if sim.infeasible is None else "infeasible",
        "infeasible_reason": sim.infeasible,
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
        "on_demand_cost_usd": node_hours * 3.06 if config.calibration == "artifact" else None,
    }
    return RunSummary(
        policy=config.policy,
        model=config.model,
        trace=sim.trace.name,
        calibration=config.calibration,
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
    )
