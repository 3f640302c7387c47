"""Planner benchmarks (issue: planner). Prints figures; asserts nothing.

1. GPT-2 XL (the shared measured profile), 1 GPU per node, templates for up to 32 nodes,
   f = 1, then instantiation on 32 nodes.
2. GPT-3 175B (analytic, A100 80 GB), 8 GPUs per node, 64 nodes, f = 3: all templates,
   instantiation, and one reconfiguration after 3 node losses.

Baseline in the same run: the same search without its pruning (every candidate bottleneck
tried for every node count), which gives identical templates.
Targets on a 2-core machine: case 1 < 1 s, case 2 < 10 s in total, a reconfiguration
decision < 50 ms.

    python benchmarks/planner_bench.py [--shared ../shared]
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc
from pathlib import Path

from planner.analytic import analytic_profile
from planner.hardware import make_cluster
from planner.oobleck_format import load_oobleck_profile
from planner.plan import JobSpec
from planner.planner import Planner
from planner.reconfigure import on_removal
from planner.templates import TemplateSearch


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def baseline_templates(planner: Planner, counts) -> float:
    search = TemplateSearch(planner.tables)
    _, seconds = timed(lambda: search.best(counts, prune=False))
    return seconds


def run_case(profile, cluster, job, lose):
    planner = Planner(profile, cluster, job)
    templates, t_templates = timed(planner.template_set)
    nodes = [f"node{i}" for i in range(cluster.num_nodes)]
    plan, t_instantiate = timed(lambda: planner.instantiate(nodes))
    result, t_reconf = None, None
    if lose:
        victims = [p.nodes[-1] for p in plan.pipelines[:lose]]
        result, t_reconf = timed(lambda: on_removal(planner, plan, victims))
    return planner, templates, plan, result, (t_templates, t_instantiate, t_reconf)


def case(name, profile, cluster, job, *, lose: int = 0):
    planner, templates, plan, result, (t_templates, t_instantiate, t_reconf) = run_case(profile, cluster, job, lose)
    t_base = baseline_templates(planner, templates.node_counts())
    tracemalloc.start()  # a second, traced run for peak memory (tracing slows it down)
    run_case(profile, cluster, job, lose)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    total = t_templates + t_instantiate + (t_reconf or 0)
    print(f"== {name}")
    print(
        f"  templates: {len(templates.templates)} (n0 = {templates.min_nodes}, sizes {templates.node_counts()[0]}..{templates.node_counts()[-1]})"
    )
    print(
        f"  template search      {t_templates:8.3f} s   (unpruned baseline {t_base:.3f} s, ratio x{t_base / t_templates:.2f})"
    )
    print(
        f"  instantiation        {t_instantiate:8.3f} s   -> {plan.num_pipelines} pipelines {sorted(len(p.nodes) for p in plan.pipelines)}, {plan.samples_per_s:.2f} samples/s"
    )
    if t_reconf is not None:
        print(
            f"  reconfiguration      {t_reconf * 1000:8.1f} ms  after losing {lose} nodes -> {result.plan.num_pipelines} pipelines, {len(result.copies)} copies, {result.copy_bytes / 2**30:.1f} GiB"
        )
    print(f"  total                {total:8.3f} s")
    print(f"  peak traced memory   {peak / 2**20:8.1f} MiB")
    return total, t_reconf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared")
    args = parser.parse_args()
    profile_dir = args.shared / "traces/profiles/gpt2-xl-h-oobleck"
    if profile_dir.is_dir():
        total1, _ = case(
            "case 1: GPT-2 XL measured profile, 32 nodes x 1 GPU (v100-16gb), f = 1",
            load_oobleck_profile(profile_dir),
            make_cluster("v100-16gb", 32, 1),
            JobSpec(1024, 1, 1),
        )
        print(f"  target < 1 s: {'met' if total1 < 1 else 'MISSED'}")
    else:
        print(f"case 1 skipped: {profile_dir} not found")
    total2, t_reconf = case(
        "case 2: GPT-3 175B analytic, 64 nodes x 8 a100-80gb, f = 3",
        analytic_profile("gpt3-175b", "a100-80gb", 1),
        make_cluster("a100-80gb", 64, 8),
        JobSpec(1536, 1, 3),
        lose=3,
    )
    print(
        f"  target < 10 s: {'met' if total2 < 10 else 'MISSED'}; reconfiguration < 50 ms: {'met' if t_reconf < 0.05 else 'MISSED'}"
    )
    print(f"process max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
