"""The simulator's errors with and without contention.json, on one validation's real runs.

    python benchmarks/contention_resim.py results/validate/<...-tiny-gpt-real-4>

Reads a finished `ooblab validate --compute real --model tiny-gpt` output directory (its
report, trace, calibration, profile and the real runs' summaries), simulates every
policy twice: with the profile as measured (compute scaled per live worker count by
`contention.json`) and with the same profile minus that file (the fixed profile measured
beside N - 1 busy neighbours, as before), and prints both comparisons against the same
real runs. The real runs are not repeated: only the simulator differs.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path


def main(out: Path) -> int:
    from experiments.validation.calibrate import Overheads
    from experiments.validation.compare import compare_run, summarize
    from experiments.validation.runs import simulate
    from experiments.validation.spec import TINY_SHAPE, PreparedModel, ValidationSpec
    from experiments.validation.timelines import real_timeline, sim_timeline
    from planner.contention import FILE_NAME
    from real.config import TinyGptSpec

    report = json.loads((out / "report.json").read_text())
    fields = dict(report["spec"], policies=tuple(report["spec"]["policies"]))
    spec = ValidationSpec(**fields)
    overheads = Overheads.from_dict(json.loads((out / "calibration" / "overheads.json").read_text()))
    events = report["trace_events_s"]
    trace_end = max(events, default=0.0)

    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "profile"
        shutil.copytree(out / "profile", plain)
        (plain / FILE_NAME).unlink()
        variants = {"fixed profile": plain, "contention.json": out / "profile"}
        for label, directory in variants.items():
            model = PreparedModel(
                {"model": "tiny-gpt", "profile_dir": str(directory), "tiny": TinyGptSpec(**TINY_SHAPE)}, directory, ""
            )
            comparisons = []
            for run in report["runs"]:
                policy = run["policy"]
                summary = json.loads((Path(run["run_dir"]) / "summary.json").read_text())
                real = real_timeline(summary, policy)
                window_s = max(real.end_s, trace_end) + 1.0  # simulated twice as long, as `run_policy` does
                result, lead = simulate(
                    spec, model, overheads, policy, out / "trace.csv", report["time_scale"], 2 * window_s
                )
                comparison = compare_run(real, sim_timeline(result, policy, lead, real.end_s), events)
                comparisons.append(comparison)
                errors = ", ".join(f"{100 * e:+.1f}%" for e in comparison.throughput_errors())
                print(
                    f"{label:16s} {policy:8s} throughput [{errors}] samples {100 * (comparison.samples_error or 0):+.1f}%"
                )
            headline = summarize(comparisons)
            print(f"{label:16s} headline: {json.dumps(headline, default=str)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
