"""The real backend's commands: light to import, clear errors, the run's files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from ooblab.cli import main
from planner.records import read_timeline

from .conftest import REPO, ooblab


def test_registering_the_commands_does_not_import_torch():
    code = "import sys, ooblab.cli; ooblab.cli.build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "--nodes", "7", "--pipelines", "3,3"], "use 6 nodes, the job has 7"),
        (["run", "--model", "gpt3-1.3b"], "can run with --compute emulated"),
        (["run", "--global-batch", "10", "--microbatch", "3"], "not a multiple of the microbatch size"),
        (["run", "--pipelines", "2,x", "--nodes", "4"], "comma-separated node counts"),
        (["run", "--nodes", "2", "--f", "2"], "f = 2 needs at least"),
        (["run", "--compute", "emulated", "--model", "no-such-model"], "neither a profile directory nor a built-in"),
        (["worker", "--coordinator", "nowhere", "--name", "a"], "must be HOST:PORT"),
        (["node", "--coordinator", "localhost:1", "--name", "a", "--gpus", "0"], "--gpus must be >= 1"),
    ],
)
def test_bad_requests_exit_2_with_a_reason(args, message, capsys):
    """Checked before any process or store is started, so in-process is safe (the SIGTERM
    handler a launcher installs is put back)."""
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert main(args) == 2
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1  # one line, no traceback


@pytest.mark.timeout(120)
def test_run_writes_the_shared_record_and_a_readable_summary(tmp_path):
    # a crash an hour in: the 3-step run ends first, and says so rather than dropping it
    args = ["run", "--nodes", "2", "--f", "1", "--steps", "3", "--inject", "3600s:node1:crash", "--out", str(tmp_path)]
    result = ooblab(args, 90)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "status finished" in result.stdout and "samples/s" in result.stdout
    assert "note: 1 --inject entry never happened: the run ended first (crash node1/0 3600 s)" in result.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["injections_not_fired"] == ["crash node1/0 3600 s"] and summary["failures_survived"] == 0
    assert summary["num_iterations"] == 3 and summary["committed_samples"] == 3 * 16
    assert len(summary["losses"]) == 3 and summary["final_loss"] == summary["losses"][-1]
    assert summary["avg_samples_per_s"] > 0
    # how busy the machine's cores were over each iteration (`real.control.cpu_meter`)
    shares = summary["cpu_busy_share"]
    assert len(shares) == len(summary["iteration_times_s"]) == 3 and summary["cpu_cores"] >= 1
    stolen = summary["cpu_steal_share"]
    assert len(stolen) == len(shares)
    if os.path.exists("/proc/stat"):
        assert all(0.0 <= s <= 1.0 for s in shares), shares
        assert all(0.0 <= t <= s for s, t in zip(shares, stolen)), (shares, stolen)
    assert sum(summary["breakdown"].values()) == pytest.approx(summary["duration_s"])
    assert summary["effective_training_time"] == pytest.approx(
        summary["breakdown"]["useful_compute_s"] / summary["duration_s"]
    )
    rows = read_timeline(tmp_path)
    assert [r.state for r in rows][:2] == ["waiting", "running"] and rows[-1].state == "finished"
    assert [r.iterations_done for r in rows if r.state == "running"] == [0, 1, 2, 3]
    assert all(a.time_s <= b.time_s for a, b in zip(rows, rows[1:]))
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert kinds == [
        "coordinator_started",
        "workers_registered",
        "plan_published",
        "training_started",
        "finished",
        "injections_not_fired",
    ]
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["nodes"] == 2 and config["backend"] == "real"


def test_the_text_report_names_a_varuna_plans_microbatches(tmp_path, capsys):
    from real.launch.cli import _report

    # a Varuna plan as its summary holds it: the microbatch count once, for every replica
    plan = {
        "depth": 1,
        "width": 2,
        "microbatches": 8,
        "pipelines": [{"nodes": ["node3"], "num_nodes": 1}, {"nodes": ["node1"], "num_nodes": 1}],
    }
    summary = {"status": "finished", "reason": "", "plan": plan, "losses": [], "avg_samples_per_s": 30.0}
    _report(summary, tmp_path, False)
    assert "plan: 1 nodes x 8 mb, 1 nodes x 8 mb" in capsys.readouterr().out


def test_run_takes_a_design_option_in_the_dotted_form_simulate_takes():
    from ooblab.cli import build_parser
    from real.launch.cli_args import config_from_args

    argv = ["run", "--nodes", "2", "--set", "design.join_horizon_s=100", "--set", "design.min_nodes=2"]
    config = config_from_args(build_parser(argv).parse_args(argv))
    assert config.join_horizon_s == 100 and config.design_options == {"min_nodes": 2}
