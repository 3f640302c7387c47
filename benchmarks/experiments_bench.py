"""How long each experiment takes end to end (runs + figures), quick and full, from an
empty results directory. Prints a Markdown table (docs/experiments.md's runtimes); asserts nothing.

    python benchmarks/experiments_bench.py [--only NAME ...] [--quick-only] [--processes N]

Each setting runs in a fresh temporary results tree, so nothing is skipped. Planner
timings run one at a time whatever --processes says.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from experiments.registry import all_experiments


def timed(name: str, quick: bool, processes: int | None) -> tuple[float, int, int]:
    from experiments.reproduce import reproduce

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["OOBLAB_RESULTS"] = tmp
        start = time.perf_counter()
        done = reproduce(name, quick=quick, processes=processes, progress=False)
        seconds = time.perf_counter() - start
    return seconds, len(done.table), sum(1 for p in done.figures if p.suffix == ".png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="experiment names (default: all)")
    parser.add_argument("--quick-only", action="store_true")
    parser.add_argument("--processes", type=int, default=None)
    args = parser.parse_args()
    names = args.only or list(all_experiments())
    print(f"{os.cpu_count()} CPUs")
    print("| experiment | quick: runs, figures, time | full: runs, figures, time |")
    print("|---|---|---|")
    for name in names:
        q_s, q_runs, q_figs = timed(name, True, args.processes)
        full = "(skipped)"
        if not args.quick_only:
            f_s, f_runs, f_figs = timed(name, False, args.processes)
            full = f"{f_runs} runs, {f_figs} figures, {f_s:.1f} s"
        print(f"| {name} | {q_runs} runs, {q_figs} figures, {q_s:.1f} s | {full} |", flush=True)


if __name__ == "__main__":
    main()
