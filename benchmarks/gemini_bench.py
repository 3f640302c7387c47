"""GEMINI in the planner calibration on the paper's figure set (target: < 5 s per
design). Prints figures; asserts nothing.

The figure set's grid for one design: 5 models x 7 traces (the 5 frequency traces and the 2
scaled spot traces, as `sim_bench.py` builds them) = 35 runs, run twice (the first pass
builds the planners' templates); Oobleck's 35 runs on the same traces are the baseline
measured in the same process. Also the samples/s table, and how often a restart came from
peers' memory rather than storage.

    python benchmarks/gemini_bench.py [--shared ../shared] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim_bench import MODELS, trace_set  # noqa: E402

from designs.options import parse_text  # noqa: E402
from sim.config import SimConfig  # noqa: E402
from sim.run import simulate  # noqa: E402


def grid(design: str, trace_list, options: dict) -> tuple[float, list]:
    rows = []
    start = time.perf_counter()
    for model in MODELS:
        for label, trace in trace_list:
            config = SimConfig.of(
                policy=design, model=model, trace=label, calibration="planner", design_options=options
            )
            result = simulate(config, trace=trace)
            actions = [a["action"] for e in result.events if e.kind == "decision" for a in e.detail["actions"]]
            rows.append((model, label, result.summary.avg_samples_per_s, actions.count("RestartFromSnapshot"),
                         actions.count("RestartFromCheckpoint")))  # fmt: skip
    return time.perf_counter() - start, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a GEMINI option")
    args = parser.parse_args()
    options = {k: parse_text(v) for k, v in (s.split("=", 1) for s in args.set)}
    trace_list = trace_set(args.shared)
    for design, opts in (("oobleck", {}), ("gemini", options)):
        first, rows = grid(design, trace_list, opts)
        second, _ = grid(design, trace_list, opts)
        print(f"{design}: {len(rows)} runs, first pass {first:.2f} s, second pass {second:.2f} s")
    print(f"\ngemini {options or 'defaults'}: samples/s (restarts from memory / from storage)")
    for model, label, rate, memory, storage in rows:
        print(f"  {model:<14}{label.split(' ')[0]:<18}{rate:>10.1f}  ({memory} / {storage})")


if __name__ == "__main__":
    main()
