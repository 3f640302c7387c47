"""Reconfiguration that keeps state where it is. Prints; asserts nothing.

GPT-3 175B (analytic, A100 80 GB), 8 GPUs per node, f = 3, global batch 24 x nodes:

1. 64 nodes, lose 3 (the last node of each of the first three pipelines) and 256 nodes,
   lose 1: copied bytes with the nodes kept in the rules' order (what the planner copied
   before, the baseline of the same run), with the exact ordering, and with the
   throughput-tolerance option (refills), each against its lower bound, with the
   busiest node's bytes and the decision time.
2. 12,500 nodes, lose 1 and 3: the decision time (target < 100 ms). Instantiation over
   12,500 nodes is being sped up elsewhere; until then (`--instantiate` to try it) the
   plan is built once from the 256-node optimum's pipeline sizes repeated, with the rest
   in 98-node pipelines, and only the reconfiguration is timed.

    python benchmarks/scale_reconf_bench.py [--instantiate] [--big 12500]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial

from planner.catalog import resolve_profile
from planner.hardware import make_cluster
from planner.plan import ExecutionPlan, JobSpec
from planner.planner import Planner
from planner.reconfigure import Reconfiguration, on_removal

GIB = 2**30
TOLERANCE = 0.02


def make_planner(num_nodes: int) -> Planner:
    profile = resolve_profile("gpt3-175b", "a100-80gb", 1)
    return Planner(profile, make_cluster("a100-80gb", num_nodes, 8), JobSpec(24 * num_nodes, 1, 3))


def victims(plan: ExecutionPlan, count: int) -> list[str]:
    return [p.nodes[-1] for p in plan.pipelines[:count]]


def timed_ms(fn: Callable[[], Reconfiguration], repeats: int = 5) -> tuple[Reconfiguration, float]:
    times: list[float] = []
    result: Reconfiguration | None = None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1000)
    assert result is not None, "timed_ms needs repeats >= 1"
    return result, statistics.median(times)


def line(label: str, result: Reconfiguration, ms: float) -> str:
    plan = result.plan
    assert plan is not None, "the benchmark's cases always leave a plan"
    return (
        f"    {label:<22} copied {result.copy_bytes / GIB:8.1f} GiB  bound {result.lower_bound_bytes / GIB:7.1f} GiB  "
        f"busiest {result.busiest_node_bytes / GIB:6.1f} GiB  {len(result.copies):4d} copies  "
        f"{plan.samples_per_s:8.3f} samples/s  {sorted(len(p.nodes) for p in plan.pipelines)[:6]}  {ms:7.1f} ms"
    )


def small_cases() -> None:
    for num_nodes, lose in ((64, 3), (256, 1)):
        planner = make_planner(num_nodes)
        start = time.perf_counter()
        plan = planner.instantiate([f"node{i}" for i in range(num_nodes)])
        built_s = time.perf_counter() - start
        gone = victims(plan, lose)
        print(
            f"== {num_nodes} nodes {sorted(len(p.nodes) for p in plan.pipelines)}, {plan.samples_per_s:.3f} samples/s "
            f"(instantiated in {built_s:.1f} s); lose {gone}"
        )
        rules, ms = timed_ms(partial(on_removal, planner, plan, gone))
        print(f"    {'kept order (before)':<22} copied {rules.keep_order_bytes / GIB:8.1f} GiB")
        print(line("exact order (after)", rules, ms))
        print(
            f"    ratio before/after x{rules.keep_order_bytes / max(1, rules.copy_bytes):.2f}; "
            f"after/bound x{rules.copy_bytes / max(1, rules.lower_bound_bytes):.2f}"
        )
        for tolerance in (0.0, TOLERANCE):
            chosen, ms = timed_ms(partial(on_removal, planner, plan, gone, throughput_tolerance=tolerance))
            print(line(f"tolerance {tolerance:g}", chosen, ms))
        print(f"    {chosen.notes[-1]}")


def representative_plan(planner: Planner, num_nodes: int) -> ExecutionPlan:
    """The 256-node optimum's pipeline sizes repeated, the rest in 98-node pipelines (and
    one pipeline of what is left over)."""
    base = [20, 20, 20, 98, 98]
    sizes: list[int] = []
    while sum(sizes) + sum(base) <= num_nodes:
        sizes += base
    while num_nodes - sum(sizes) >= 98 + planner.min_nodes or num_nodes - sum(sizes) == 98:
        sizes.append(98)
    if num_nodes - sum(sizes):
        sizes.append(num_nodes - sum(sizes))
    names = [f"node{i}" for i in range(num_nodes)]
    groups, start = [], 0
    for size in sorted(sizes):
        groups.append(names[start : start + size])
        start += size
    return planner.build_plan(groups)


def big_case(num_nodes: int, instantiate: bool) -> None:
    planner = make_planner(num_nodes)
    start = time.perf_counter()
    if instantiate:
        plan = planner.instantiate([f"node{i}" for i in range(num_nodes)])
        how = "instantiated"
    else:
        plan = representative_plan(planner, num_nodes)
        how = "built from repeated 256-node sizes"
    built_s = time.perf_counter() - start
    start = time.perf_counter()  # every template a reconfiguration may switch to, as at a job's start
    planner.ensure_templates(list(range(planner.min_nodes, max(len(p.nodes) for p in plan.pipelines) + 1)))
    print(
        f"== {num_nodes} nodes, {plan.num_pipelines} pipelines ({how} in {built_s:.1f} s, "
        f"templates up to the largest pipeline in {time.perf_counter() - start:.1f} s)"
    )
    for lose in (1, 3):
        gone = victims(plan, lose)
        result, ms = timed_ms(partial(on_removal, planner, plan, gone))
        print(f"  lose {lose}: kept order {result.keep_order_bytes / GIB:.1f} GiB")
        print(line("exact order", result, ms))
        chosen, ms = timed_ms(partial(on_removal, planner, plan, gone, throughput_tolerance=TOLERANCE), repeats=3)
        print(line(f"tolerance {TOLERANCE:g}", chosen, ms))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big", type=int, default=12_500, help="node count of the large case")
    parser.add_argument("--instantiate", action="store_true", help="instantiate the large plan instead of building it")
    args = parser.parse_args()
    small_cases()
    big_case(args.big, args.instantiate)


if __name__ == "__main__":
    main()
