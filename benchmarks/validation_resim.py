"""A finished emulated validation's real runs, simulated again with this checkout's simulator.

    python benchmarks/validation_resim.py /tmp/v32            # as calibrated then
    python benchmarks/validation_resim.py /tmp/v32 --no-hold  # without restart_startup_share

Reads an `ooblab validate` output directory (report, trace, calibration, profile and the
real runs' summaries), simulates every policy against the same real runs and prints the
comparison; the real runs are not repeated, only the simulator differs. A calibration
cached before `restart_startup_share` was measured gets it from its own Varuna restart
(`calibrate.startup_share`), as a fresh calibration would; `--no-hold` sets it to 0 (a
removal abandons a restart at once, the earlier model).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path


def main(out: Path, hold: bool = True, cores: float | None = None) -> int:
    from experiments.validation.calibrate import Overheads, startup_share
    from experiments.validation.compare import compare_run, summarize
    from experiments.validation.runs import simulate
    from experiments.validation.spec import PreparedModel, ValidationSpec
    from experiments.validation.timelines import real_timeline, sim_timeline

    report = json.loads((out / "report.json").read_text())
    if report["spec"]["compute"] != "emulated":
        print("only emulated validations: a real-compute profile needs its model's run fields", file=sys.stderr)
        return 2
    spec = ValidationSpec(**dict(report["spec"], policies=tuple(report["spec"]["policies"])))
    overheads = Overheads.from_dict(json.loads((out / "calibration" / "overheads.json").read_text()))
    if not hold:
        overheads = replace(overheads, restart_startup_share=0.0)
    elif not overheads.restart_startup_share and "varuna" in overheads.details:
        share = startup_share(overheads.details["varuna"]["recovery"], overheads.restart_overhead_s)
        overheads = replace(overheads, restart_startup_share=share)
    if cores is not None:
        overheads = replace(overheads, startup_cores=cores)
    else:
        overheads = replace(overheads, startup_cores=float(report["overheads"].get("startup_cores", 0.0)))
    print(f"restart_startup_share {overheads.restart_startup_share:.3f}, startup_cores {overheads.startup_cores:g}")
    model = PreparedModel({"model": str(out / "profile")}, out / "profile", "")
    events = report["trace_events_s"]
    trace_end = max(events, default=0.0)
    comparisons = []
    for run in report["runs"]:
        policy = run["policy"]
        summary = json.loads((Path(run["run_dir"]) / "summary.json").read_text())
        real = real_timeline(summary, policy)
        window_s = max(real.end_s, trace_end) + 1.0  # simulated twice as long, as `run_policy` does
        result, lead = simulate(spec, model, overheads, policy, out / "trace.csv", report["time_scale"], 2 * window_s)
        comparison = compare_run(real, sim_timeline(result, policy, lead, real.end_s), events)
        comparisons.append(comparison)
        data = comparison.to_dict()
        recoveries = ", ".join(
            f"{r['real_s']:.1f}/{r['sim_s']:.1f} s ({100 * r['error']:+.1f}%)"
            for r in data["recoveries"]
            if r["error"] is not None
        )
        throughput = ", ".join(f"{100 * e:+.1f}%" for e in comparison.throughput_errors())
        print(
            f"{policy:8s} throughput [{throughput}] samples {100 * (comparison.samples_error or 0):+.1f}% "
            f"(real {data['real_samples']}, sim {data['sim_samples']}); recoveries {recoveries}"
        )
    print(f"headline: {json.dumps(summarize(comparisons), default=str)}")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    cores = next((float(a.split("=", 1)[1]) for a in args[1:] if a.startswith("--startup-cores=")), None)
    sys.exit(main(Path(args[0]), hold="--no-hold" not in args[1:], cores=cores))
