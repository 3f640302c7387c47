"""Sweep throughput, local process pool vs Ray on this machine, and Ray's cost per chunk.

    python benchmarks/ray_sweep.py [--experiment frequency] [--quick] [--cpus N] [--noop-runs 200]

1. runs/s of one experiment's sweep (its simulations, no figures) on the local pool and on
   a local Ray instance of the same CPUs (default chunking, and one run per chunk), each
   from an empty results directory; the tables are checked equal;
2. the per-chunk overhead: `--noop-runs` runs that do nothing (the sweep still writes their
   two files), one per chunk versus one big chunk per CPU; (difference) / (extra chunks);
3. the local instance's start and stop.

Prints figures and ratios against the local pool measured in the same run; asserts nothing.
Needs ray (pip install -e '.[ray]').
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from experiments.base import Setting
from experiments.paths import shared_dir
from experiments.registry import get
from experiments.sweep import RunSpec, run_sweep
from experiments.sweep_ray import auto_chunk_size, ray_session


def noop(spec: RunSpec, run_dir: Path) -> Mapping[str, Any]:
    """A run that does nothing: what is left is the sweep's own cost."""
    return {"i": spec.params["i"]}


def timed_sweep(specs, runner, **options) -> tuple[float, pd.DataFrame]:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        table = run_sweep(specs, runner, tmp, progress=False, **options)
        return time.perf_counter() - start, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="frequency", help="whose specs to sweep (default: frequency)")
    parser.add_argument("--quick", action="store_true", help="its quick setting")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="pool processes = Ray CPUs")
    parser.add_argument("--noop-runs", type=int, default=200, help="runs of the per-chunk overhead measurement")
    args = parser.parse_args()
    experiment = get(args.experiment)
    specs = experiment.specs(Setting(quick=args.quick, shared=shared_dir()))
    n, cpus = len(specs), args.cpus
    print(f"{os.cpu_count()} CPUs here; {cpus} pool processes / Ray CPUs")

    local_s, local_table = timed_sweep(specs, experiment.runner, processes=cpus)
    start = time.perf_counter()
    with ray_session(None, cpus) as ray:
        ray_start_s = time.perf_counter() - start
        ray.get([ray.remote(lambda: None).remote() for _ in range(cpus)])  # workers up, as a long sweep has them
        size = auto_chunk_size(n, cpus)
        ray_s, ray_table = timed_sweep(specs, experiment.runner, backend="ray", processes=cpus)
        one_s, _ = timed_sweep(specs, experiment.runner, backend="ray", processes=cpus, chunk_size=1)
        pd.testing.assert_frame_equal(ray_table, local_table)

        runs = [RunSpec("noop", "noop", {"i": i}) for i in range(args.noop_runs)]
        big = math.ceil(len(runs) / cpus)
        small_s, _ = timed_sweep(runs, noop, backend="ray", processes=cpus, chunk_size=1)
        big_s, _ = timed_sweep(runs, noop, backend="ray", processes=cpus, chunk_size=big)
        stop = time.perf_counter()
    ray_stop_s = time.perf_counter() - stop
    extra_chunks = len(runs) - math.ceil(len(runs) / big)
    per_chunk_s = (small_s - big_s) / extra_chunks * cpus  # chunks run `cpus` at a time: per-chunk cost on one CPU

    label = f"{args.experiment}{' quick' if args.quick else ''}"
    print(f"\n| sweep of {n} runs ({label}) | time | runs/s | vs local pool |")
    print("|---|---|---|---|")
    print(f"| local pool, {cpus} processes | {local_s:.2f} s | {n / local_s:.1f} | 1.00 |")
    print(f"| Ray, {size} runs per chunk | {ray_s:.2f} s | {n / ray_s:.1f} | {local_s / ray_s:.2f} |")
    print(f"| Ray, 1 run per chunk | {one_s:.2f} s | {n / one_s:.1f} | {local_s / one_s:.2f} |")
    print(
        f"\nno-op runs: {len(runs)} chunks of 1 in {small_s:.2f} s, {math.ceil(len(runs) / big)} of {big} in {big_s:.2f} s"
    )
    print(f"per-chunk overhead: {per_chunk_s * 1e3:.1f} ms of a CPU per extra chunk")
    print(f"local Ray instance: start {ray_start_s:.2f} s, stop {ray_stop_s:.2f} s (not in the sweep times above)")
    print("tables equal: yes")


if __name__ == "__main__":
    main()
