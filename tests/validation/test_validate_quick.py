"""The quick validation end to end: calibration, real runs of both policies on a
time-compressed trace, their simulated twins, the errors (a few minutes on 2 cores).

It is the validation experiment's quick run (`ooblab reproduce validation --quick`, the
same settings as `ooblab validate --quick`), made once per test session in the session's
quick-results tree: `tests/experiments/test_reproduce.py` runs every experiment's quick
setting there first, and this test reads that run instead of repeating three minutes of
real processes (it runs it itself when alone). `ooblab validate` runs the same function
on the same settings; its argument checks are tested in `test_spec.py`.

The bars here are loose on purpose (the figures themselves are reported, not asserted:
this machine is shared and small); what must hold is the structure: every run finished,
each removal paired a measured recovery with a simulated one, every phase long enough
was compared, and the headline errors are the medians of the per-run ones.
"""

from __future__ import annotations

import json
import os
import statistics

import pytest

from experiments.reproduce import reproduce

from ..conftest import session_quick_results


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """The run directory of the session's quick validation (made here if not yet made)."""
    with session_quick_results(tmp_path_factory):
        done = reproduce("validation", quick=True, progress=False)
    (row,) = done.table.to_dict("records")
    assert row["outcome"] == "ok", row.get("infeasible_reason")
    return done.out_dir / "runs" / row["key"]


@pytest.mark.timeout(600)
def test_quick_validation_reports_the_three_errors_with_their_runs(quick_run):
    out = quick_run
    report = json.loads((out / "report.json").read_text())
    errors = report["errors"]
    for key in ("throughput_error", "samples_error", "recovery_error"):
        assert errors[key] is not None and errors[key] >= 0, key
    assert [r["policy"] for r in report["runs"]] == ["oobleck", "varuna"]
    removals = len(report["trace_events_s"])
    assert removals == 2
    per_phase, per_recovery = [], []
    for run in report["runs"]:
        c = run["comparison"]
        assert run["real"]["status"] == "finished"
        assert c["real_samples"] > 0 and c["sim_samples"] > 0
        assert len(c["phases"]) >= 2
        # and how busy the machine's cores were in each of those phases of the real run
        busy = run["phase_cpu_busy_share"]
        assert len(busy) == len(c["phases"]) and all(b is not None and 0 < b <= 1 for b in busy), busy
        stolen = run["phase_cpu_steal_share"]  # the host's part of it
        assert len(stolen) == len(busy) and all(t is not None and 0 <= t <= b for t, b in zip(stolen, busy)), stolen
        per_phase += [abs(p["error"]) for p in c["phases"]]
        per_recovery += [abs(r["error"]) for r in c["recoveries"] if r["error"] is not None]
        # every measured recovery found its simulated twin at the same trace event
        assert all(r["sim_s"] is not None and abs(r["sim_fail_s"] - r["real_fail_s"]) < 1.0 for r in c["recoveries"])
    assert errors["throughput_error"] == pytest.approx(statistics.median(per_phase))
    assert errors["recovery_error"] == pytest.approx(statistics.median(per_recovery))
    # Oobleck's live recoveries, as measured, stay far below Varuna's restarts
    live = [r["real_s"] for r in report["runs"][0]["comparison"]["recoveries"]]
    restart = [r["real_s"] for r in report["runs"][1]["comparison"]["recoveries"]]
    assert live and restart and max(live) < min(restart)
    # the simulated twins started their processes on this machine's cores, as the real ones did
    assert report["overheads"]["startup_cores"] == os.cpu_count()
    sim_config = json.loads((out / "varuna" / "sim" / "config.json").read_text())
    assert sim_config["startup_cores"] == os.cpu_count()
    # the calibration measured every overhead, and nothing came from the validated runs
    # (the experiment keeps the calibration per setting, beside its runs)
    (calibration,) = (out.parent.parent / "calibration").glob("*/calibration/overheads.json")
    overheads = json.loads(calibration.read_text())
    assert (
        overheads["reconfigure_overhead_s"] >= 0
        and overheads["restart_overhead_s"] > overheads["reconfigure_overhead_s"]
    )
    # the reconfiguration pause less the survivors' measured wait to notice the loss, which
    # the simulated twins charge themselves (`sim.notice`)
    pauses, waits = (overheads["details"]["oobleck"][k] for k in ("reconfigure_overheads_s", "notices_s"))
    assert overheads["sync_notice"] is True and len(waits) == len(pauses) >= 1 and all(w > 0 for w in waits)
    assert overheads["reconfigure_overhead_s"] == pytest.approx(
        max(0.0, statistics.median(p - w for p, w in zip(pauses, waits)))
    )
    assert json.loads((out / "oobleck" / "sim" / "config.json").read_text())["sync_notice"] is True
    assert all(overheads["details"][p]["predicted_iteration_s"] > 0 for p in ("oobleck", "varuna"))
    # each trace run's first phase timed against its calibration job on the same 4 nodes
    checks = {c["policy"]: c for c in report["pace_checks"]}
    assert set(checks) == {"oobleck", "varuna"}
    for c in checks.values():
        assert c["run_nodes"] == c["calibration_nodes"] == 4 and c["run_iterations"] >= 3
        assert c["run_pace"] > 0 and c["calibration_pace"] > 0
        assert c["drift"] == pytest.approx(c["run_pace"] / c["calibration_pace"] - 1)
    assert (out / "validation.png").stat().st_size > 10_000
    for policy in ("oobleck", "varuna"):
        assert (out / policy / "timeline_real.csv").exists() and (out / policy / "sim" / "summary.json").exists()
