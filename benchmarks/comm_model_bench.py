"""How the pipeline-communication term changes templates and plans. Prints
figures; asserts nothing.

For each model and cluster, the planner runs twice on the same inputs, with the term
(`make_cluster`'s default) and without it (`pipeline_comm=False`, the paper's Eq. 1-4):
n0, how many templates change layout, stage counts and T (N_b = 4 S) of the smallest,
a middle and the largest template, and the instantiated plan (pipeline sizes, iteration
seconds, planning seconds). Models: the shared GPT-2 XL profile (Oobleck's, measured; skipped
without ../shared) and the analytic GPT-3 models on the paper's V100 nodes (1 GPU, 10 Gb/s)
and GPT-3 175B on 8 x A100 80 GB nodes.

    python benchmarks/comm_model_bench.py
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

from planner.analytic import analytic_profile
from planner.hardware import make_cluster
from planner.oobleck_format import load_oobleck_profile
from planner.plan import JobSpec
from planner.planner import Planner

SHARED = Path(os.environ.get("OOBLAB_SHARED", Path(__file__).resolve().parents[2] / "shared"))
GPT2 = SHARED / "traces/profiles/gpt2-xl-h-oobleck"

# (label, profile maker, gpu, gpus per node, nodes, global batch, f)
CASES = [
    ("GPT-2 XL (shared profile)", lambda: load_oobleck_profile(GPT2), "v100-16gb", 1, 32, 1024, 1),
    ("GPT-3 2.7B", lambda: analytic_profile("gpt3-2.7b", "v100-16gb", 1), "v100-16gb", 1, 32, 512, 1),
    ("GPT-3 6.7B", lambda: analytic_profile("gpt3-6.7b", "v100-16gb", 1), "v100-16gb", 1, 32, 1024, 1),
    ("GPT-3 175B", lambda: analytic_profile("gpt3-175b", "a100-80gb", 1), "a100-80gb", 8, 256, 24 * 256, 3),
]


def run(profile, gpu: str, g: int, nodes: int, batch: int, f: int, on: bool):
    start = time.perf_counter()
    planner = Planner(profile, make_cluster(gpu, nodes, g, pipeline_comm=on), JobSpec(batch, 1, f))
    templates = planner.template_set()
    plan = planner.instantiate([f"n{i}" for i in range(nodes)])
    return templates, plan, time.perf_counter() - start


def layout(template) -> tuple:
    return tuple((s.first_layer, s.end_layer, s.num_gpus) for s in template.stages)


def main() -> None:
    for label, make, gpu, g, nodes, batch, f in CASES:
        if label.startswith("GPT-2") and not GPT2.is_dir():
            print(f"{label}: skipped ({GPT2} not found)")
            continue
        profile = make()
        off_t, off_p, off_s = run(profile, gpu, g, nodes, batch, f, False)
        on_t, on_p, on_s = run(profile, gpu, g, nodes, batch, f, True)
        print(f"== {label}: {nodes} nodes x {g} {gpu}, global batch {batch}, f = {f}")
        print(f"   n0 {off_t.min_nodes} -> {on_t.min_nodes}; templates {len(off_t.templates)} -> {len(on_t.templates)}")
        common = [n for n in off_t.node_counts() if on_t.for_nodes(n) is not None]
        changed = sum(layout(off_t.for_nodes(n)) != layout(on_t.for_nodes(n)) for n in common)
        ratios = [on_t.for_nodes(n).iteration_time_s / off_t.for_nodes(n).iteration_time_s for n in common]
        print(
            f"   layouts changed: {changed} of {len(common)}; T(4S) with/without: "
            f"{min(ratios):.4f} .. {max(ratios):.4f}"
        )
        for n in sorted({common[0], common[len(common) // 2], common[-1]}):
            a, b = off_t.for_nodes(n), on_t.for_nodes(n)
            print(
                f"   {n:>4} nodes: stages {a.num_stages} -> {b.num_stages}, "
                f"T(4S) {a.iteration_time_s:.3f} -> {b.iteration_time_s:.3f} s ({b.iteration_time_s / a.iteration_time_s - 1:+.2%}), "
                f"bottleneck {a.bottleneck_s * 1e3:.2f} -> {b.bottleneck_s * 1e3:.2f} ms"
            )
        for name, plan, seconds in (("off", off_p, off_s), ("on ", on_p, on_s)):
            mix = sorted(Counter(p.template.num_nodes for p in plan.pipelines).items())
            print(
                f"   plan {name}: {' + '.join(f'{x} x {n}' for n, x in mix)} nodes, iteration "
                f"{plan.iteration_time_s:.3f} s (exposed all-reduce {plan.allreduce_exposed_s:.3f} s), "
                f"planned in {seconds:.2f} s"
            )
        print(f"   iteration time with the term: {on_p.iteration_time_s / off_p.iteration_time_s - 1:+.2%}")


if __name__ == "__main__":
    main()
