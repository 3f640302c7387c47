"""A finished emulated validation's real runs, simulated again with this checkout's simulator.

    python benchmarks/validation_resim.py /tmp/v32                      # as run then
    python benchmarks/validation_resim.py /tmp/v32 --no-hold            # without restart_startup_share
    python benchmarks/validation_resim.py /tmp/v32 --startup-cores 0    # each start-up on its own
    python benchmarks/validation_resim.py /tmp/v32 --loaded-sends no    # without the loaded-send term
    python benchmarks/validation_resim.py /tmp/v32 --sync-notice no     # the survivors' wait in the pause

Reads an `ooblab validate` output directory (report, trace, calibration, profile and the
real runs' summaries), simulates every policy against the same real runs and prints the
comparison; the real runs are not repeated, only the simulator differs. The start-up
share is worked out again from the calibration's Varuna restarts
(`overheads.median_startup_share`), as a fresh calibration now does; `--no-hold` sets it to 0 (a
removal abandons a restart at once, the earlier model). `--startup-cores N` shares
N cores among start-ups (`sim.startup_pool`; 0: off; default: what the validation
recorded, none before it was kept); `--loaded-sends yes|no` turns the loaded-send term
on or off (its constants must be in the calibration); `--sync-notice no` keeps the
survivors' wait to notice a loss inside the calibrated pause instead of simulating it
(`experiments.validation.notice`; default: simulated, as a validation now does).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path


def main(
    out: Path,
    hold: bool = True,
    cores: float | None = None,
    loaded_sends: bool | None = None,
    notice: bool = True,
) -> int:
    from experiments.validation.compare import compare_run, summarize
    from experiments.validation.overheads import Overheads
    from experiments.validation.runs import simulate
    from experiments.validation.spec import PreparedModel, ValidationSpec
    from experiments.validation.timelines import real_timeline, sim_timeline

    report = json.loads((out / "report.json").read_text())
    if report["spec"]["compute"] != "emulated":
        print("only emulated validations: a real-compute profile needs its model's run fields", file=sys.stderr)
        return 2
    spec = ValidationSpec(**dict(report["spec"], policies=tuple(report["spec"]["policies"])))
    if loaded_sends is not None:
        spec = replace(spec, loaded_sends=loaded_sends)
    overheads = Overheads.from_dict(json.loads((out / "calibration" / "overheads.json").read_text()))
    if notice:
        overheads = overheads.noticed_apart()
    elif overheads.sync_notice:  # the pause as measured, the wait in it
        pauses = overheads.details["oobleck"]["reconfigure_overheads_s"]
        overheads = replace(overheads, reconfigure_overhead_s=max(0.0, statistics.median(pauses)), sync_notice=False)
    if not hold:
        overheads = replace(overheads, restart_startup_share=0.0)
    else:
        overheads = overheads.with_startup_share()
    if cores is not None:
        overheads = replace(overheads, startup_cores=cores)
    else:
        overheads = replace(overheads, startup_cores=float(report["overheads"].get("startup_cores", 0.0)))
    print(
        f"restart_startup_share {overheads.restart_startup_share:.3f}, startup_cores {overheads.startup_cores:g}, "
        f"loaded sends {'on' if spec.loaded_sends else 'off'}, sync notice {'on' if overheads.sync_notice else 'off'} "
        f"(reconfiguration pause {overheads.reconfigure_overhead_s:.3f} s)"
    )
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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="an ooblab validate output directory")
    parser.add_argument("--no-hold", action="store_true", help="restart_startup_share 0")
    parser.add_argument("--startup-cores", type=float, default=None, help="cores the start-ups share (0: off)")
    parser.add_argument("--loaded-sends", choices=("yes", "no"), default=None, help="the loaded-send term")
    parser.add_argument("--sync-notice", choices=("yes", "no"), default="yes", help="the survivors' wait simulated")
    a = parser.parse_args()
    if not (a.out / "report.json").is_file():
        parser.error(f"{a.out} holds no report.json (not an ooblab validate output directory)")
    if a.startup_cores is not None and a.startup_cores < 0:
        parser.error(f"--startup-cores must be >= 0, got {a.startup_cores:g}")
    sends = None if a.loaded_sends is None else a.loaded_sends == "yes"
    sys.exit(main(a.out, hold=not a.no_hold, cores=a.startup_cores, loaded_sends=sends, notice=a.sync_notice == "yes"))
