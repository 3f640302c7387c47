"""Simulator benchmarks (issue: simulator). Prints figures; asserts nothing.

1. The paper's figure set in the artifact calibration: 5 models x 5 frequency traces (6h,
   3h, 1h, 30m, 10m; generated exactly by `fixed:interval=...,hour_decimals=3`) x 3 systems,
   plus 5 models x the 2 scaled spot traces (read from ../shared; generated look-alikes when
   it is absent) x 3 systems: 105 runs. Target < 1 s (the artifact's own
   simulators take about 50 s on this machine, 45 of them Bamboo's endless zero-length steps
   on the GPT-3 models, which both calibrations skip as out of memory).
1b. The same set in the artifact-as-run calibration (the artifact's code replayed,
   `sim.artifact_replay`). Target < 1 s.
2. The same set in the planner calibration (analytic profiles, V100, 10 Gb/s). Target < 15 s.
3. One 24-hour trace with 200 preemptions (30 nodes, each preempted node replaced 10
   minutes later) at 1 s iterations: simulated seconds per wall second. Baseline in the
   same run: the same policy asking to see every iteration end, i.e. one simpy stop and one
   decision per iteration; both must commit the same iterations.

Each set is run twice in one process: the first pass includes building the planners'
templates (cached per model and cluster), the second shows the per-run cost alone.

    python benchmarks/sim_bench.py [--shared ../shared] [--only artifact|planner|long]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

import traces
from planner.policies import CheckpointSchedule
from sim.artifact_data import ARTIFACT_MODELS
from sim.config import SimConfig
from sim.engine import Simulation
from sim.pricing import Pricing
from sim.run import simulate
from sim.setup import build
from sim.timing import IterationCost

MODELS = tuple(ARTIFACT_MODELS)
SYSTEMS = ("oobleck", "bamboo", "varuna")
FREQUENCIES = ("6h", "3h", "1h", "30m", "10m")


def trace_set(shared: Path) -> list[tuple[str, traces.Trace]]:
    out = [
        (f, traces.from_spec(f"fixed:interval={f},hour_decimals=3", rng=np.random.default_rng(0))) for f in FREQUENCIES
    ]
    scaled = shared / "traces" / "oobleck-artifact" / "scaled"
    for name, profile in (("scale_gcp-trace", "gcp-a100"), ("scale_p3-trace", "p3")):
        path = scaled / f"{name}.csv"
        if path.exists():
            out.append((name, traces.load(path)))
        else:
            generated = traces.rescale(
                traces.from_spec(f"spot:profile={profile}", rng=np.random.default_rng(0)),
                15,
                30,
                rng=np.random.default_rng(0),
            )
            out.append((f"{name} (generated: {profile})", generated))
    return out


def figure_set(calibration: str, trace_list) -> tuple[float, list]:
    rows = []
    start = time.perf_counter()
    for model in MODELS:
        for label, trace in trace_list:
            spot = label.startswith("scale_")
            for system in SYSTEMS:
                extra: dict[str, Any] = {}  # SimConfig overrides
                if (
                    calibration in ("artifact", "artifact-as-run")
                    and system == "varuna"
                    and spot
                    and ARTIFACT_MODELS[model].spot_no_rollback
                ):
                    extra["varuna_rollback"] = False  # as the paper's spot-trace figures
                config = SimConfig.of(policy=system, model=model, trace=label, calibration=calibration, **extra)
                result = simulate(config, trace=trace)
                rows.append((model, label, system, result.summary.avg_samples_per_s))
    return time.perf_counter() - start, rows


def print_table(rows, calibration: str) -> None:
    labels = list(dict.fromkeys(r[1] for r in rows))
    print(f"\naverage samples/s, {calibration} calibration (oobleck / bamboo / varuna)")
    print(f"{'model':<14}" + "".join(f"{l.split(' ')[0][:16]:>24}" for l in labels))
    table = {(m, l, s): v for m, l, s, v in rows}
    for model in MODELS:
        cells = []
        for label in labels:
            cells.append(" / ".join(f"{table[(model, label, s)]:.1f}" for s in SYSTEMS))
        print(f"{model:<14}" + "".join(f"{c:>24}" for c in cells))


def long_trace() -> None:
    rng = np.random.default_rng(0)
    live = [f"n{i}" for i in range(30)]
    events = [(0.0, "add", n) for n in live]
    returns: list[tuple[float, str]] = []  # each preempted node is replaced 10 minutes later
    for k, t in enumerate(np.sort(rng.uniform(60.0, 86400.0 - 60.0, 200))):
        while returns and returns[0][0] <= t:
            back_t, name = returns.pop(0)
            events.append((back_t, "add", name))
            live.append(name)
        victim = live.pop(int(rng.integers(len(live))))
        events.append((float(t), "remove", victim))
        returns.append((float(t) + 600.0, f"r{k}"))
    events += [(t, "add", name) for t, name in returns if t < 86400.0]
    events.append((86400.0, "add", "last"))
    trace = traces.Trace.from_tuples(sorted(events, key=lambda e: e[0]), "24h-200-preemptions")
    # Oobleck in the artifact's model (BERT-large's pauses) with every iteration taking 1 s
    setup = build(SimConfig.of(policy="oobleck", model="BERT-large", calibration="artifact"), trace)

    class OneSecond:
        calibration = "artifact"
        samples_per_iteration = setup.timing.samples_per_iteration
        gpus_per_node = 1

        def iteration(self, plan):
            return IterationCost(1.0, 1.0)

        def pause_s(self, action, plan, alive=None):
            return setup.timing.pause_s(action, plan, alive)

        def idle_gpus(self, plan):
            return 0

    class EveryIteration:
        """The baseline: the same policy, asking to see every iteration end."""

        name, checkpoints = "oobleck", CheckpointSchedule()

        def infeasible_reason(self):
            return None

        def decide(self, view, event, current):
            return replace(setup.policy.decide(view, event, current), check_at_iteration_end=True)

    def run(tr, policy):
        start = time.perf_counter()
        sim = Simulation(
            tr, policy, Pricing(OneSecond(), node_startup_s=setup.node_startup_s, price_per_node_hour=0.91)
        ).run()
        return time.perf_counter() - start, sim

    wall, sim = run(trace, setup.policy)
    removals = sum(1 for e in trace.events if e.kind == "remove")
    print(
        f"\n24 h trace, {removals} preemptions, 1 s iterations (Oobleck, artifact pauses): {sim.iterations} iterations, "
        f"{wall * 1e3:.0f} ms wall, {trace.duration_s / wall:,.0f} simulated s per wall s"
    )
    wall_b, sim_b = run(trace, EveryIteration())
    print(
        f"baseline, one simpy stop and one decision per iteration: {sim_b.iterations} iterations, {wall_b:.2f} s wall, "
        f"{trace.duration_s / wall_b:,.0f} simulated s per wall s ({wall_b / wall:.0f}x slower, same iterations: {sim_b.iterations == sim.iterations})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared")
    parser.add_argument("--only", choices=("artifact", "artifact-as-run", "planner", "long"))
    args = parser.parse_args()
    trace_list = trace_set(args.shared)
    runs = len(MODELS) * len(trace_list) * len(SYSTEMS)
    for calibration, target in (("artifact", 1.0), ("artifact-as-run", 1.0), ("planner", 15.0)):
        if args.only not in (None, calibration):
            continue
        first, rows = figure_set(calibration, trace_list)
        second, _ = figure_set(calibration, trace_list)
        print(
            f"{calibration} calibration: {runs} runs, first pass {first:.2f} s ({runs / first:.0f} runs/s), "
            f"second pass {second:.2f} s ({runs / second:.0f} runs/s); target < {target:g} s"
        )
        print_table(rows, calibration)
    if args.only in (None, "long"):
        long_trace()


if __name__ == "__main__":
    main()
