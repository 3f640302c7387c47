"""Two finished validations of one setting: the second's real runs measured against the
first's, with the validation's own comparison: the run-to-run noise floor of the targets.

    python benchmarks/validation_repeat.py /tmp/v8a /tmp/v8b

Reads two `ooblab validate` output directories made with the same options (trace, nodes,
batch, policies) and compares, per policy, the second's real run with the first's
exactly as `experiments.validation.compare.compare_run` compares a simulation with a
real run (phases between the trace's events, committed samples at the end of the
shorter run, recoveries paired by failure time). A simulator cannot be expected to
match a real run more closely than two real runs of the same job match each other, so
these figures say how much of a validation's error is the real backend's own spread on
this machine. The simulated sides are printed beside them, each against its own run.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path


def _fail(message: str) -> int:
    print(f"validation_repeat: {message}", file=sys.stderr)
    return 2


def _load(out: Path) -> dict:
    path = out / "report.json"
    if not path.exists():
        raise FileNotFoundError(f"{out} holds no report.json (not an `ooblab validate` output directory)")
    return json.loads(path.read_text())


def _same_setting(a: dict, b: dict) -> str | None:
    for key in ("trace", "window", "nodes", "global_batch", "compute", "model"):
        if a["spec"].get(key) != b["spec"].get(key):
            return f"the two validations differ in {key}: {a['spec'].get(key)!r} against {b['spec'].get(key)!r}"
    if a["trace_events_s"] != b["trace_events_s"]:
        return "the two validations replayed different trace events"
    return None


def main(first: Path, second: Path) -> int:
    from experiments.validation.compare import compare_run, percent, summarize
    from experiments.validation.timelines import real_timeline

    try:
        a, b = _load(first), _load(second)
    except FileNotFoundError as exc:
        return _fail(str(exc))
    why = _same_setting(a, b)
    if why:
        return _fail(why)
    events = a["trace_events_s"]
    runs_b = {run["policy"]: run for run in b["runs"]}
    comparisons = []
    for run in a["runs"]:
        policy = run["policy"]
        if policy not in runs_b:
            print(f"{policy:8s} only in {first}")
            continue
        sides = []
        for r in (run, runs_b[policy]):
            summary = json.loads((Path(r["run_dir"]) / "summary.json").read_text())
            sides.append(real_timeline(summary, policy))
        end_s = min(side.end_s for side in sides)
        ref, other = (replace(side, end_s=end_s) for side in sides)
        comparison = compare_run(ref, replace(other, side="sim"), events)
        comparisons.append(comparison)
        recoveries = ", ".join(
            f"{r.real_s:.1f}/{r.sim_s:.1f} s ({percent(r.error)})" for r in comparison.recoveries if r.error is not None
        )
        throughput = ", ".join(percent(e) for e in comparison.throughput_errors())
        sim_a = run["comparison"]["samples_error"]
        sim_b = runs_b[policy]["comparison"]["samples_error"]
        print(
            f"{policy:8s} second vs first real run: throughput [{throughput}] samples {percent(comparison.samples_error)} "
            f"(first {comparison.real_samples}, second {comparison.sim_samples} by {end_s:.1f} s); "
            f"recoveries first/second {recoveries}; the simulator's samples error in each: {percent(sim_a)}, {percent(sim_b)}"
        )
    print(f"real against real: {json.dumps(summarize(comparisons), default=str)}")
    for name, report in ((first, a), (second, b)):
        print(f"simulator in {name}: {json.dumps(report.get('errors'), default=str)}")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) != 2 or any(x.startswith("-") for x in args):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(args[0]), Path(args[1])))
