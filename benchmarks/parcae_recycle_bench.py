"""Parcae and ReCycle on the paper's figure set (target: < 5 s per design).

The paper's figure set is 5 models x 7 traces (5 frequency traces, 2 scaled spot traces,
as `sim_bench.trace_set`) per design, here in the planner calibration. Each design runs the
set twice in one process (the first pass builds the grids' searches and caches); Varuna, on
the same grids without forecasts or adapted schedules, is the baseline measured in the same
run. Prints seconds per pass and the average samples/s per model. Asserts nothing.

    PYTHONPATH=. python benchmarks/parcae_recycle_bench.py [--shared ../shared] [--designs parcae,recycle]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim_bench import trace_set  # noqa: E402  (benchmarks is no package)

from sim.artifact_data import ARTIFACT_MODELS  # noqa: E402
from sim.config import SimConfig  # noqa: E402
from sim.run import simulate  # noqa: E402


def one_pass(design: str, trace_list) -> tuple[float, dict[str, float]]:
    start = time.perf_counter()
    rates: dict[str, list[float]] = {}
    for model in ARTIFACT_MODELS:
        for label, trace in trace_list:
            config = SimConfig.of(policy=design, model=model, trace=label, calibration="planner")
            rates.setdefault(model, []).append(simulate(config, trace=trace).summary.avg_samples_per_s)
    return time.perf_counter() - start, {m: sum(v) / len(v) for m, v in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared")
    parser.add_argument("--designs", default="varuna,parcae,recycle")
    args = parser.parse_args()
    trace_list = trace_set(args.shared)
    runs = len(ARTIFACT_MODELS) * len(trace_list)
    print(f"traces: {', '.join(label for label, _ in trace_list)}")
    for design in args.designs.split(","):
        first, rates = one_pass(design, trace_list)
        second, _ = one_pass(design, trace_list)
        print(f"{design}: {runs} runs, first pass {first:.2f} s, second pass {second:.2f} s; target < 5 s")
        print("  mean samples/s over the traces: " + ", ".join(f"{m} {r:.1f}" for m, r in rates.items()))


if __name__ == "__main__":
    main()
