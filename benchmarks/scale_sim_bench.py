"""Simulation at scale: wall time and peak memory of planner-calibration runs, next to a
baseline checkout (today's code) run on the same inputs in the same invocation.

    python benchmarks/scale_sim_bench.py                          # the 1,024-node spot cases
    python benchmarks/scale_sim_bench.py --case dc                # 12,500 nodes x 30 days, every design
    python benchmarks/scale_sim_bench.py --dc-trace 'poisson:nodes=12500,days=30'
    python benchmarks/scale_sim_bench.py --baseline /work/main --baseline-timeout-s 120

Every run is a subprocess (fresh interpreter, its own peak RSS) timing `sim.simulate` only
(the trace is built first and not counted). Model GPT-3 175B on a100-80gb, 8 GPUs per node,
global batch 24 x nodes, Oobleck f = 3. The 12,500-node case replays the traces package's
datacenter generator (`datacenter:gpus=100000,days=30`, 8-GPU hosts, Llama 3's failure
rates); the stand-in used before it landed is still here: `poisson:nodes=N,days=D,
per_node_per_day=R,repair_h=H`, every node failing as a Poisson process at R per day
(default 0.004) and coming back after an exponential repair of mean H hours. Any
`traces.from_spec` spec works in their place. A baseline that runs past its timeout is reported as such, not extrapolated.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from checkout_run import run_driver

ROOT = Path(__file__).resolve().parents[1]

DRIVER = r"""
import json, resource, sys, time
import numpy as np
spec, policy, nodes = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, sys.argv[4])
import traces
from traces.model import Trace
from sim import SimConfig, simulate

def poisson(spec):
    keys = dict(item.split("=") for item in spec.partition(":")[2].split(",") if item)
    n, days = int(keys.get("nodes", 12500)), float(keys.get("days", 30))
    rate, repair = float(keys.get("per_node_per_day", 0.004)) / 86400, float(keys.get("repair_h", 6)) * 3600
    rng = np.random.default_rng(int(keys.get("seed", 0)))
    end = days * 86400
    rows = [(0.0, "add", f"n{i}") for i in range(n)]
    for i in range(n):
        t, gen = 0.0, 0
        while True:
            t += 1 + rng.exponential(1 / rate)  # >= 1 s after the return: never the same instant
            if t >= end:
                break
            rows.append((round(t), "remove", f"n{i}.{gen}" if gen else f"n{i}"))
            t += rng.exponential(repair)
            gen += 1
            if t >= end:
                break
            rows.append((round(t), "add", f"n{i}.{gen}"))
    rows.append((end, "add", "end-marker"))
    rows.sort(key=lambda r: (r[0], r[1] == "add"))
    return Trace.from_tuples(rows, spec)

trace = poisson(spec) if spec.startswith("poisson:") else traces.from_spec(spec, rng=np.random.default_rng(0))
config = SimConfig.of(policy=policy, calibration="planner", model="gpt3-175b", gpu="a100-80gb", gpus_per_node=8,
                   global_batch=24 * nodes, trace=spec, **({"fault_tolerance": 3} if policy == "oobleck" else {}))
t0 = time.perf_counter()
result = simulate(config, trace=trace)
wall = time.perf_counter() - t0
s = result.summary
print(json.dumps({"wall_s": wall, "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                  "events": len(trace), "iterations": s.num_iterations, "samples_per_s": s.avg_samples_per_s,
                  "checkpoints": s.num_checkpoints, "checkpoints_failed": s.extra["checkpoints_failed"],
                  "checkpoint_h": s.breakdown.checkpoint_s / 3600, "decisions": s.extra["decisions"]}))
"""

DESIGNS = ("oobleck", "varuna", "bamboo", "gemini", "parcae", "recycle", "replica_groups")
# case -> (policy, trace spec (None: --dc-trace), nodes, target seconds (None: no target))
CASES: dict[str, list[tuple[str, str | None, int, float | None]]] = {
    "spot": [
        ("oobleck", "spot:nodes=1024,hours=24", 1024, 10.0),
        ("varuna", "spot:nodes=1024,hours=24", 1024, 10.0),
        ("bamboo", "spot:nodes=1024,hours=24", 1024, 10.0),
    ],
    # every built-in design, a month of 100,000 GPUs; the target is 5 s each
    "dc": [(design, None, 12500, 5.0) for design in DESIGNS],
    "small": [
        ("oobleck", "spot:nodes=128,hours=24", 128, None),
        ("varuna", "spot:nodes=128,hours=24", 128, None),
        ("bamboo", "spot:nodes=128,hours=24", 128, None),
    ],
}


def run(code_root: Path, spec: str, policy: str, nodes: int, timeout_s: float) -> dict | str:
    return run_driver(code_root, DRIVER, [spec, policy, str(nodes), str(code_root)], timeout_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=sorted(CASES), action="append", help="default: spot")
    parser.add_argument("--policy", action="append", choices=list(DESIGNS))
    parser.add_argument(
        "--dc-trace", default="datacenter:gpus=100000,days=30", help="trace spec of the 12,500-node case"
    )
    parser.add_argument("--baseline", type=Path, help="a checkout of today's code to compare with (e.g. /work/main)")
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--baseline-timeout-s", type=float, default=120.0)
    args = parser.parse_args(argv)
    print(
        "case | policy | trace | this code: wall s, peak GB, iterations, ckpts ok/failed | baseline wall s | ratio | target"
    )
    for case in args.case or ["spot"]:
        for policy, spec, nodes, target in CASES[case]:
            if args.policy and policy not in args.policy:
                continue
            spec = spec or args.dc_trace
            mine = run(ROOT, spec, policy, nodes, args.timeout_s)
            base = run(args.baseline, spec, policy, nodes, args.baseline_timeout_s) if args.baseline else "not run"
            if isinstance(mine, dict):
                cell = (
                    f"{mine['wall_s']:.2f} s, {mine['peak_rss_gb']:.2f} GB, {mine['iterations']} it, "
                    f"{mine['checkpoints']}/{mine['checkpoints_failed']} ({mine['events']} events)"
                )
            else:
                cell = mine
            if isinstance(base, dict):
                bcell = f"{base['wall_s']:.2f} s ({base['iterations']} it)"
                ratio = f"{base['wall_s'] / mine['wall_s']:.1f}x" if isinstance(mine, dict) else "-"
            else:
                bcell, ratio = base, "-"
            goal = f"< {target:g} s" if target else ""
            print(f"{case} | {policy} | {spec} | {cell} | {bcell} | {ratio} | {goal}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
