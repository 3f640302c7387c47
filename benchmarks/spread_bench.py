"""Oobleck's join spread on a recorded day: the batched `_spread` against `_reference_spread`
(every growth through `Planner.mix_seconds`), same calls, same process.

    python benchmarks/spread_bench.py                                # spot:nodes=1024,hours=24
    python benchmarks/spread_bench.py --trace 'datacenter:gpus=8192,days=7,seed=0' --nodes 1024

Runs the planner-calibration simulation once (GPT-3 175B, a100-80gb, 8 GPUs per node,
global batch 24 x nodes, f = 3) recording every spread the policy asks for (plan sizes,
spares, largest template), then replays them all with each implementation and prints the
CPU seconds of each, their ratio, the `mix_seconds` calls each made, and whether every
decision is identical (it must be: the batched screen returns mix_seconds' floats).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import designs.oobleck.join as join
import traces
from sim import SimConfig, simulate


def record(spec: str, nodes: int):
    calls, planners = [], []
    original = join._spread

    def spy(planner, groups, spares, largest):
        planners.append(planner)
        calls.append(([len(g) for g in groups], len(spares), largest))
        return original(planner, groups, spares, largest)

    join._spread = spy
    try:
        config = SimConfig.of(
            policy="oobleck",
            calibration="planner",
            model="gpt3-175b",
            gpu="a100-80gb",
            gpus_per_node=8,
            global_batch=24 * nodes,
            trace=spec,
            fault_tolerance=3,
        )
        simulate(config, trace=traces.from_spec(spec, rng=np.random.default_rng(0)))
    finally:
        join._spread = original
    if not calls:
        raise SystemExit(f"no spread on {spec}: nothing to compare")
    return planners[0], calls


def replay(function, planner, calls):
    counted = {"n": 0}
    exact = planner.mix_seconds

    def mix_seconds(counts):
        counted["n"] += 1
        return exact(counts)

    planner.mix_seconds = mix_seconds
    try:
        outs = []
        start = time.process_time()
        for sizes, spares, largest in calls:
            groups, first = [], 0
            for n in sizes:
                groups.append([f"n{first + i}" for i in range(n)])
                first += n
            outs.append(function(planner, groups, [f"s{i}" for i in range(spares)], largest))
        return time.process_time() - start, counted["n"], outs
    finally:
        del planner.mix_seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", default="spot:nodes=1024,hours=24")
    parser.add_argument("--nodes", type=int, default=1024)
    args = parser.parse_args(argv)
    planner, calls = record(args.trace, args.nodes)
    new_s, new_calls, new = replay(join._spread, planner, calls)
    ref_s, ref_calls, ref = replay(join._reference_spread, planner, calls)
    same = sum(a == b for a, b in zip(new, ref))
    print(f"{args.trace}: {len(calls)} spreads")
    print(f"batched _spread     {new_s:6.2f} CPU s, {new_calls} mix_seconds calls")
    print(f"_reference_spread   {ref_s:6.2f} CPU s, {ref_calls} mix_seconds calls")
    print(f"ratio {ref_s / new_s:.1f}x; identical decisions: {same} of {len(calls)}")
    return 0 if same == len(calls) else 1


if __name__ == "__main__":
    raise SystemExit(main())
