"""Datacenter trace generation speed. Prints figures; asserts nothing.

Target: 100,000 GPUs (12,500 hosts) x 30 days in under about 1 s, since the simulator
replays such traces. Baseline measured in the same run: building and validating the
canonical `Trace` from the same event tuples (`Trace.from_tuples`), the part of the cost any
generator of that trace pays; the ratio says how much the failure process itself adds.
Best of 5 runs each.

    python benchmarks/traces_bench.py
"""

from __future__ import annotations

import time

import numpy as np

from traces import Trace, datacenter_failures

CASES = ((100_000, 30.0, 0), (100_000, 30.0, 500), (16_384, 54.0, 0))
REPEATS = 5


def best_s(fn) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    print(
        f"{'gpus':>8} {'days':>5} {'spares':>6} {'events':>7} {'interrupts':>10} "
        f"{'generate s':>10} {'Trace() s':>9} {'ratio':>6}"
    )
    for gpus, days, spares in CASES:
        run = datacenter_failures(gpus, days, rng=np.random.default_rng(0), spares=spares)
        rows = [(e.time_s, e.kind, e.node) for e in run.trace.events]
        gen_s = best_s(
            lambda g=gpus, d=days, k=spares: datacenter_failures(g, d, rng=np.random.default_rng(0), spares=k)
        )
        base_s = best_s(lambda r=rows: Trace.from_tuples(r))
        print(
            f"{gpus:>8} {days:>5g} {spares:>6} {len(rows):>7} {len(run.interruption_time_s):>10} "
            f"{gen_s:>10.4f} {base_s:>9.4f} {gen_s / base_s:>6.2f}"
        )


if __name__ == "__main__":
    main()
