"""The simulator's errors with contention.json as measured, without it, and capped at the
cores, on validations' real runs.

    python benchmarks/contention_resim.py results/validate/<...-real-4> [more directories]

Reads finished `ooblab validate --compute real` output directories (tiny-gpt or a Hugging
Face model: report, trace, calibration, profile and the real runs' summaries) and
simulates every policy three times: with the profile as measured (compute scaled per live
worker count by `contention.json`); with the same profile minus that file (the fixed
profile measured beside N - 1 busy neighbours, as before); and "capped": every count with
more workers than cores computing at the factor of one worker per core (as if each had a
core of its own), so that only the core ceiling (`sim.core_bound`) accounts for the
sharing. Prints each comparison against the same real runs; the real runs are not
repeated, only the simulator differs.

Measured on four HF GPT-2 and tiny-gpt validations of 2026-12-07 (throughput / samples /
recovery, median absolute %): as measured 5.5/13.0/13.5, 14.2/3.5/4.4, 8.4/3.9/4.9,
6.2/29.2/8.3; capped 12.0/15.8/18.8, 6.2/4.9/11.0, 2.9/3.8/10.6, 6.1/25.1/19.6: no
better on the whole, recoveries worse, so the validation keeps the measured factors.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path


def capped_copy(source: Path, target: Path, cores: int) -> None:
    """`source` profile copied to `target` with every factor beside cores - 1 busy neighbours
    or more set to that one's, kept relative to a reference of 1 (the layer times x that
    factor, the factors over it)."""
    from planner.contention import FILE_NAME

    shutil.copytree(source, target)
    contention = json.loads((target / FILE_NAME).read_text())
    factors = contention["compute_factor"]
    cap = factors[str(cores - 1)]
    for k in list(factors):
        factors[k] = (cap if int(k) >= cores - 1 else factors[k]) / cap
    (target / FILE_NAME).write_text(json.dumps(contention))
    layers = json.loads((target / "mb1.json").read_text())
    for layer in layers:
        layer["forward"] *= cap
        layer["backward"] *= cap
    (target / "mb1.json").write_text(json.dumps(layers))


def main(out: Path) -> int:
    from dataclasses import replace

    from experiments.validation.compare import compare_run, summarize
    from experiments.validation.overheads import Overheads
    from experiments.validation.runs import simulate
    from experiments.validation.spec import TINY_GPT, TINY_SHAPE, PreparedModel, ValidationSpec
    from experiments.validation.timelines import real_timeline, sim_timeline
    from planner.contention import FILE_NAME
    from real.config import TinyGptSpec

    report = json.loads((out / "report.json").read_text())
    fields = dict(report["spec"], policies=tuple(report["spec"]["policies"]))
    spec = ValidationSpec(**fields)
    overheads = Overheads.from_dict(json.loads((out / "calibration" / "overheads.json").read_text()))
    overheads = overheads.noticed_apart().with_startup_share().with_core_costs(spec.global_batch)
    overheads = replace(overheads, startup_cores=float(os.cpu_count() or 1))  # as the validation sets it
    events = report["trace_events_s"]
    trace_end = max(events, default=0.0)

    print(out)
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "profile"
        shutil.copytree(out / "profile", plain)
        (plain / FILE_NAME).unlink()
        capped = Path(tmp) / "capped"
        capped_copy(out / "profile", capped, os.cpu_count() or 1)
        variants = {"fixed profile": plain, "contention.json": out / "profile", "capped": capped}
        for label, directory in variants.items():
            run_fields: dict = {"model": spec.model, "profile_dir": str(directory)}
            if spec.model == TINY_GPT:
                run_fields["tiny"] = TinyGptSpec(**TINY_SHAPE)
            model = PreparedModel(run_fields, directory, "")
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
    sys.exit(max(main(Path(arg)) for arg in sys.argv[1:]))
