"""Replica groups on the paper's figure set, planner calibration. Prints figures; asserts nothing.

The figure set of `sim_bench.py` (5 models x 5 frequency traces + the 2 scaled spot traces)
for the `replica_groups` design: 35 runs, target < 5 s. Baseline in the same run:
Oobleck on the same 35 cells. Each set runs twice in one process; the first pass includes
building the planners' templates, the second shows the per-run cost alone.

    python benchmarks/replica_groups_bench.py [--shared ../shared]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from sim_bench import MODELS, trace_set  # the sibling script (its folder is on the path when run as a script)

from sim.config import SimConfig
from sim.run import simulate


def figure_set(design: str, trace_list) -> tuple[float, dict]:
    rows = {}
    start = time.perf_counter()
    for model in MODELS:
        for label, trace in trace_list:
            config = SimConfig.of(policy=design, model=model, trace=label, calibration="planner")
            summary = simulate(config, trace=trace).summary
            rows[(model, label)] = (summary.avg_samples_per_s, summary.breakdown.reconfiguration_s)
    return time.perf_counter() - start, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared")
    args = parser.parse_args()
    trace_list = trace_set(args.shared)
    results = {}
    for design in ("oobleck", "replica_groups"):
        first, rows = figure_set(design, trace_list)
        second, _ = figure_set(design, trace_list)
        results[design] = rows
        runs = len(rows)
        print(
            f"{design}: {runs} runs, first pass {first:.2f} s, second pass {second:.2f} s ({runs / second:.0f} runs/s)"
        )
    labels = [label for label, _ in trace_list]
    print("\naverage samples/s, planner calibration (oobleck / replica_groups)")
    print(f"{'model':<14}" + "".join(f"{label.split(' ')[0][:16]:>20}" for label in labels))
    for model in MODELS:
        cells = [
            f"{results['oobleck'][(model, l)][0]:.1f} / {results['replica_groups'][(model, l)][0]:.1f}" for l in labels
        ]
        print(f"{model:<14}" + "".join(f"{c:>20}" for c in cells))


if __name__ == "__main__":
    main()
