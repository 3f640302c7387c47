"""A restart's parts against the number of processes it starts, and a line fitted to each.
Prints the table and the fits; asserts nothing.

For each count n (default 2, 4, 8, 16, 32), `--repeats` restarts as the real backend does
them on this machine (`experiments.validation.restart_parts`: every process spawned at
once; start-up = spawn + import torch + the worker's imports + check-in with the store;
groups = `real.worker.groups.build_generation` for a Varuna-shaped layout, gloo over
loopback; load = each rank's stage of an 8-layer checkpoint of 1 MiB layers; setup =
importing `torch.distributed.pipelining`, as a worker's stage runner does; each part the
slowest rank's). Fit per part: seconds = a + b n (least squares,
`experiments.validation.restart_fit`), with its residuals and how much a quadratic term
would lower their RMS (whether the line is the right form). The figures feed
`sim.cost_terms`' relaunch defaults and CHANGELOG.md.

    python benchmarks/restart_fit.py [--counts 2,4,8,16,32] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os

from experiments.validation.restart_fit import fit_line, fit_quadratic_gain
from experiments.validation.restart_parts import PARTS, measure


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--counts", default="2,4,8,16,32")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    counts = [int(x) for x in args.counts.split(",")]
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start")
    print(
        f"{'n':>4} {'start-up':>9} {'(spawn)':>8} {'groups':>8} {'load':>7} {'setup':>7} {'total':>8}"
        "   (s, slowest rank)"
    )

    def show(n: int, row: dict[str, float]) -> None:
        print(
            f"{n:4d} {row['startup']:9.2f} {row['spawn']:8.2f} {row['groups']:8.3f} {row['load']:7.3f}"
            f" {row['setup']:7.2f} {row['total']:8.2f}   load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )

    points = measure(counts, args.repeats, show)
    print("\nfit: seconds = a + b * n (least squares)")
    for part in (*PARTS, "spawn"):
        fit = fit_line(points[part])
        gain = fit_quadratic_gain(points[part])
        residuals = " ".join(f"{r:+.3f}" for r in fit.residuals_s)
        extra = f", a quadratic term lowers it by {gain:.0%}" if gain is not None else ""
        print(
            f"  {part:8s} a = {fit.intercept_s:7.3f} s  b = {fit.slope_s:7.4f} s/process"
            f"  residuals [{residuals}] (RMS {fit.rms_residual_s:.3f} s{extra})"
        )


if __name__ == "__main__":
    main()
