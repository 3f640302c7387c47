"""What naming a cost profile adds to a sweep (target: under 5% on the 105-run figure set).

The paper's three designs on `sim_bench.py`'s figure set (5 models x 7 traces each, planner
calibration), run three ways in the same process, each after a warm-up pass: with no
profile, with the built-in `paper` (its values are the defaults, so the runs are the same
work) and with `paper` written to a JSON file, which every run reads and checks again (as
a sweep's worker processes do); and "no profile" once more, whose ratio is the machine's
noise. Then the profile's own work, timed alone: reading and applying it, per run, against
a run's mean time. Prints the seconds of each and the ratios to the first; asserts nothing.

    python benchmarks/cost_profile_bench.py [--shared ../shared] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from designs_bench import MODELS, PAPER, SIM_BENCH

from sim.config import SimConfig
from sim.cost_profiles import BUILTIN, apply
from sim.errors import SimError
from sim.run import simulate


def one_pass(trace_list, costs: str | None) -> float:
    start = time.perf_counter()
    for design in PAPER:
        for model in MODELS:
            for label, trace in trace_list:
                config = SimConfig.of(policy=design, model=model, trace=label, calibration="planner", costs=costs)
                try:
                    simulate(config, trace=trace)
                except SimError:
                    pass
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared"))
    parser.add_argument("--repeats", type=int, default=3, help="passes of each way, interleaved (best kept)")
    args = parser.parse_args()
    trace_list = SIM_BENCH.trace_set(Path(args.shared))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "paper.json"
        path.write_text(json.dumps(BUILTIN["paper"].to_dict()))
        ways = {"no profile": None, "built-in paper": "paper", "paper from a file": str(path), "no profile again": None}
        one_pass(trace_list, None)  # warm the planner caches once
        best = {name: float("inf") for name in ways}
        for _ in range(args.repeats):
            for name, costs in ways.items():
                best[name] = min(best[name], one_pass(trace_list, costs))
        config = SimConfig.of(policy="oobleck", calibration="planner", costs=str(path))
        reps = 2000
        start = time.perf_counter()
        for _ in range(reps):
            apply(config)
        per_apply_s = (time.perf_counter() - start) / reps
    runs = len(PAPER) * len(MODELS) * len(trace_list)
    base = best["no profile"]
    print(f"{runs} runs, best of {args.repeats} passes each")
    for name, seconds in best.items():
        print(f"  {name:<20}{seconds:8.2f} s  x{seconds / base:.3f}  (target: under x1.05)")
    share = per_apply_s / (base / runs)
    print(f"reading and applying a profile file: {per_apply_s * 1e3:.3f} ms a run, x{1 + share:.4f} of a run's time")


if __name__ == "__main__":
    main()
