"""Every registered design on the paper's figure set, planner calibration (target: < 5 s per design).

The figure set is `sim_bench.py`'s: 5 models x (5 frequency traces + the 2 scaled spot
traces, generated look-alikes without ../shared) = 35 runs per design, 105 for the paper's
three. Per design that runs in the simulator (the registry's, so designs added later are
timed too): seconds for its 35 runs, first pass (building planners, searches and layouts,
cached per model and cluster) and second pass (the runs alone), and the ratio of the
second pass to the mean of the paper's three designs measured in the same run. A design
whose default schedule checkpoints is also timed with the adaptive interval
(`checkpoint_adaptive="daly"`), second pass. Target: < 5 s per design. Prints; asserts
nothing.

    python benchmarks/designs_bench.py [--shared ../shared] [--design NAME ...]
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path
from typing import Any

from designs import SIMULATOR, registry
from sim.config import SimConfig
from sim.errors import SimError
from sim.run import simulate


def _sim_bench() -> Any:
    """benchmarks/sim_bench.py, whose figure set this times (benchmarks is no package)."""
    spec = importlib.util.spec_from_file_location("sim_bench", Path(__file__).with_name("sim_bench.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SIM_BENCH = _sim_bench()
MODELS = SIM_BENCH.MODELS

PAPER = ("oobleck", "bamboo", "varuna")
TARGET_S = 5.0


def run_set(design: str, trace_list, **extra: Any) -> tuple[float, int, int]:
    """Seconds for the design's 35 runs; how many trained and how many the simulator refused."""
    start = time.perf_counter()
    trained = refused = 0
    for model in MODELS:
        for label, trace in trace_list:
            config = SimConfig.of(policy=design, model=model, trace=label, calibration="planner", **extra)
            try:
                result = simulate(config, trace=trace)
            except SimError:
                refused += 1
                continue
            trained += result.summary.committed_samples > 0
    return time.perf_counter() - start, trained, refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared"))
    parser.add_argument("--design", action="append", default=[], help="only these designs (default: all)")
    args = parser.parse_args()
    trace_list = SIM_BENCH.trace_set(Path(args.shared))
    names = [d.name for d in registry.all_designs() if SIMULATOR in d.runs_on]
    if args.design:
        names = [n for n in names if n in args.design] or names
    print(f"figure set: {len(MODELS)} models x {len(trace_list)} traces per design, planner calibration")
    rows = {}
    for name in names:
        cold, trained, refused = run_set(name, trace_list)
        warm, _, _ = run_set(name, trace_list)
        schedule = registry.get(name).default_checkpoints
        adaptive = (
            run_set(name, trace_list, checkpoint_adaptive="daly")[0]
            if schedule.every_iterations or schedule.every_s
            else None
        )
        rows[name] = (cold, warm, adaptive, trained, refused)
    paper = [rows[n][1] for n in PAPER if n in rows]
    base = sum(paper) / len(paper) if paper else float("nan")
    print(f"\n{'design':<16}{'1st pass s':>11}{'2nd pass s':>11}{'x paper 3':>10}{'adaptive s':>11}  runs  target")
    for name, (cold, warm, adaptive, trained, refused) in rows.items():
        ok = "met" if cold < TARGET_S else "MISSED"
        extra = f"{adaptive:11.2f}" if adaptive is not None else f"{'-':>11}"
        runs = f"{trained} trained" + (f", {refused} refused" if refused else "")
        print(f"{name:<16}{cold:11.2f}{warm:11.2f}{warm / base:10.2f}{extra}  {runs}  {ok} (< {TARGET_S:g} s)")
    print(f"\nthe paper's three, second pass: {sum(paper):.2f} s for {35 * len(paper)} runs")


if __name__ == "__main__":
    main()
