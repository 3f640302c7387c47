"""Instantiation at scale. Prints figures; asserts nothing.

GPT-3 175B (analytic), 8 x A100 80 GB per node, f = 3, global batch 24 x nodes (the issue's
12,500-node case: 300,000). For each node count:
1. in process: template search, the count-per-size search (planner/mix.py) and, where it
   finishes within --reference-limit-s, the part-by-part search it replaced
   (planner/mix_reference.py) on the same templates, with the ratio and whether both
   chose the same mix;
2. the whole `ooblab plan` process (text output) under /usr/bin/time -v: wall seconds and
   peak resident memory, killed after --process-limit-s.
Targets: 12,500 nodes < 5 s and < 2 GB whole process; 1,024 nodes < 1 s.
The pipeline-communication term is on, as in `ooblab plan`; --no-pipeline-comm
measures the paper's Eq. 1-4 (the figures before the term).

    python benchmarks/scale_plan_bench.py [--nodes 256 1024 2048 12500]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from planner.analytic import analytic_profile
from planner.hardware import make_cluster
from planner.plan import JobSpec
from planner.planner import Planner

ROOT = Path(__file__).resolve().parents[1]


PIPELINE_COMM = "--no-pipeline-comm" not in sys.argv


def make_planner(num_nodes: int) -> Planner:
    return Planner(
        analytic_profile("gpt3-175b", "a100-80gb", 1),
        make_cluster("a100-80gb", num_nodes, 8, pipeline_comm=PIPELINE_COMM),
        JobSpec(24 * num_nodes, 1, 3),
    )


def _reference(num_nodes: int, queue) -> None:
    planner = make_planner(num_nodes)
    sizes = planner.template_sizes(num_nodes, 4)
    start = time.perf_counter()
    best = planner._reference_mix(num_nodes, 4, sizes)
    assert best is not None, f"no mix fits {num_nodes} nodes"
    queue.put((time.perf_counter() - start, tuple(best)))


def reference_seconds(num_nodes: int, limit_s: float):
    """(seconds, sizes) of the old search in a child process, or None past the limit."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_reference, args=(num_nodes, queue))
    child.start()
    try:
        return queue.get(timeout=limit_s + 60)  # + the child's own template search
    except Exception:
        return None
    finally:
        child.terminate()
        child.join(10)


def in_process(num_nodes: int, reference_limit_s: float) -> None:
    planner = make_planner(num_nodes)
    start, cpu = time.perf_counter(), time.process_time()
    sizes = planner.template_sizes(num_nodes, 4)
    templates_s, templates_cpu = time.perf_counter() - start, time.process_time() - cpu
    start, cpu = time.perf_counter(), time.process_time()
    result = planner.mix_search(num_nodes, 4, sizes).best(num_nodes, 4)
    new_s, new_cpu = time.perf_counter() - start, time.process_time() - cpu
    assert result is not None, f"no mix fits {num_nodes} nodes"
    print(
        f"== {num_nodes} nodes, global batch {24 * num_nodes}: {len(sizes)} templates in {templates_s:.2f} s "
        f"({templates_cpu:.2f} s CPU), load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    print(
        f"  new search        {new_s:8.3f} s ({new_cpu:.3f} s CPU) -> {dict(result.counts)} {result.seconds:.4f} s/iteration "
        f"({result.mixes_solved} mixes solved, {result.nodes_expanded} nodes, lower bound {result.lower_bound_s:.4f} s)"
    )
    if reference_limit_s > 0:
        old = reference_seconds(num_nodes, reference_limit_s)
        if old is None:
            print(f"  reference search  not done after {reference_limit_s:.0f} s")
        else:
            same = old[1] == result.sizes
            print(f"  reference search  {old[0]:8.3f} s  ratio x{old[0] / new_s:.1f}, same mix: {same}")
    sys.stdout.flush()


def whole_process(num_nodes: int, limit_s: float) -> None:
    command = [
        "/usr/bin/time",
        "-v",
        sys.executable,
        "-m",
        "ooblab.cli",
        "plan",
        "--model",
        "gpt3-175b",
        "--gpu",
        "a100-80gb",
        "--gpus-per-node",
        "8",
        "--f",
        "3",
        "--nodes",
        str(num_nodes),
        "--global-batch",
        str(24 * num_nodes),
        *([] if PIPELINE_COMM else ["--no-pipeline-comm"]),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit_s, cwd=ROOT)
    except subprocess.TimeoutExpired:
        print(f"  ooblab plan       not done after {limit_s:.0f} s")
        return
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", done.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    assert wall is not None and rss is not None, "GNU time -v prints both lines"
    cpu = sum(float(m) for m in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", done.stderr))
    seconds = int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3))
    print(
        f"  ooblab plan       {seconds:8.2f} s wall, {cpu:.2f} s CPU, {int(rss.group(1)) / 2**20:.2f} GB peak RSS, "
        f"exit {done.returncode}, {len(done.stdout.splitlines())} lines of output, load {os.getloadavg()[0]:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[256, 1024, 2048, 12500])
    parser.add_argument("--reference-limit-s", type=float, default=120.0, help="0: skip the reference search")
    parser.add_argument("--process-limit-s", type=float, default=600.0)
    parser.add_argument("--no-pipeline-comm", action="store_true", help="plan with Eq. 1-4 (no communication term)")
    args = parser.parse_args()
    context = multiprocessing.get_context("spawn")
    for num_nodes in args.nodes:
        child = context.Process(target=in_process, args=(num_nodes, args.reference_limit_s if num_nodes <= 2048 else 0))
        child.start()
        child.join(args.process_limit_s)
        if child.is_alive():
            child.terminate()
            child.join(10)
            print(f"== {num_nodes} nodes: in-process search not done after {args.process_limit_s:.0f} s", flush=True)
        whole_process(num_nodes, args.process_limit_s)


if __name__ == "__main__":
    main()
