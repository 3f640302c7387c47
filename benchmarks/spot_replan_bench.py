"""Oobleck's re-instantiations on the 1,024-node spot day (target: under 10 s), replayed.

The planner calibration's relaunch line (40 s + 3 ms per GPU: 65 s at 8,192 GPUs) outlasts the minute
between the trace's removals, so Oobleck's start is relaunched about 219 times, each
instantiating over its node count: 62 distinct counts (929-1,024 nodes), each an exact
template-mix search (planner/mix.py, cached per count). For each checkout this script
1. runs `sim.simulate` on the day (GPT-3 175B, a100-80gb, 8 GPUs/node, batch 24 x 1,024,
   f = 3, planner calibration) recording the (node count, pipelines) of every search, in
   order, and the wall time of the whole run;
2. replays those searches in the same order through `Planner.instantiate` on fresh planners
   of the run's model, cluster and job (templates built beforehand, so only the searches
   are timed): CPU seconds, the least of --reps runs;
and prints both next to the baseline's (same run), whether the chosen (sizes, microbatches)
are the same at every count, and whether the day's summary is identical. Asserts nothing.

    python benchmarks/spot_replan_bench.py [--baseline /work/main] [--reps 3]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from checkout_run import run_driver

ROOT = Path(__file__).resolve().parents[1]

DRIVER = r"""
import hashlib, json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
reps = int(sys.argv[2])
import traces
from planner.planner import Planner
from sim import SimConfig, simulate

calls, owner = [], []
search = Planner._best_shape
def recorded(self, num_nodes, k, **kwargs):
    calls.append((num_nodes, k))
    owner[:] = [self]
    return search(self, num_nodes, k, **kwargs)
Planner._best_shape = recorded
spec, nodes = "spot:nodes=1024,hours=24", 1024
trace = traces.from_spec(spec, rng=np.random.default_rng(0))
config = SimConfig.of(policy="oobleck", calibration="planner", model="gpt3-175b", gpu="a100-80gb", gpus_per_node=8,
                   global_batch=24 * nodes, trace=spec, fault_tolerance=3)
start = time.perf_counter()
result = simulate(config, trace=trace)
wall = time.perf_counter() - start
Planner._best_shape = search
summary = json.dumps(result.summary.to_dict(), sort_keys=True, default=str)
used = owner[0]
cpus = []
for _ in range(reps):
    planner = Planner(used.profile, used.cluster, used.job)
    planner._templates, planner._floors, planner._floor_limit = dict(used._templates), dict(used._floors), used._floor_limit
    start = time.process_time()
    for num_nodes, k in calls:
        planner.instantiate([f"n{i}" for i in range(num_nodes)], k)
    cpus.append(time.process_time() - start)
shapes = repr([planner._shapes[key] for key in calls])
print(json.dumps({"wall_s": wall, "searches": len(calls), "counts": len(set(calls)), "replay_cpu_s": cpus,
                  "iterations": result.summary.num_iterations,
                  "shapes": hashlib.sha1(shapes.encode()).hexdigest()[:12],
                  "summary": hashlib.sha1(summary.encode()).hexdigest()[:12]}))
"""


def run(code_root: Path, reps: int, timeout_s: float) -> dict | str:
    return run_driver(code_root, DRIVER, [str(code_root), str(reps)], timeout_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="a checkout of today's code to compare with (e.g. /work/main)")
    parser.add_argument("--reps", type=int, default=3, help="replays per checkout (the least CPU time is printed)")
    parser.add_argument("--timeout-s", type=float, default=600.0)
    args = parser.parse_args(argv)
    rows = [("this code", run(ROOT, args.reps, args.timeout_s))]
    if args.baseline:
        rows.append(("baseline", run(args.baseline, args.reps, args.timeout_s)))
    print(
        "code | simulate wall s (iterations) | searches (distinct counts) | replay CPU s, least (all) | shapes | summary"
    )
    for label, row in rows:
        if isinstance(row, str):
            print(f"{label} | {row}")
            continue
        runs = " ".join(f"{x:.2f}" for x in row["replay_cpu_s"])
        print(
            f"{label} | {row['wall_s']:.2f} ({row['iterations']}) | {row['searches']} ({row['counts']}) | "
            f"{min(row['replay_cpu_s']):.3f} ({runs}) | {row['shapes']} | {row['summary']}"
        )
    if len(rows) == 2 and all(isinstance(row, dict) for _, row in rows):
        mine, base = rows[0][1], rows[1][1]
        assert isinstance(mine, dict) and isinstance(base, dict)
        print(
            f"replay ratio x{min(base['replay_cpu_s']) / min(mine['replay_cpu_s']):.1f}, simulate ratio "
            f"x{base['wall_s'] / mine['wall_s']:.2f}; same shapes: {mine['shapes'] == base['shapes']}, "
            f"same summary: {mine['summary'] == base['summary']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
