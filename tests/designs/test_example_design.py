"""The guide's worked example (examples/designs/restart), loaded from its file outside the
package with --design-module, runs in the simulator and on the real backend.

Expectations from the design's rule: every loss of a working node is a restart from the last
checkpoint (never a reconfiguration), and on the real backend the trained parameters still
equal the failure-free reference's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "designs" / "restart"


def ooblab(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ooblab.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        start_new_session=True,
    )


def test_the_example_is_about_a_hundred_lines_laid_out_as_the_built_ins_and_outside_the_package():
    lines = sum(len(f.read_text().splitlines()) for f in EXAMPLE.glob("*.py"))
    assert 60 <= lines <= 150
    assert {f.name for f in EXAMPLE.glob("*.py")} == {"__init__.py", "policy.py"}
    assert not (REPO / "designs" / "restart").exists() and not (REPO / "designs" / "restart.py").exists()


def test_the_example_simulates_every_failure_as_a_restart(tmp_path):
    trace = tmp_path / "trace.csv"  # 6 nodes; n5 leaves at 2 h, n4 at 4 h (ms, add|remove, node)
    trace.write_text("".join(f"0,add,n{i}\n" for i in range(6)) + "7200000,remove,n5\n14400000,remove,n4\n")
    result = ooblab("simulate", "--design-module", str(EXAMPLE), "--design", "restart", "--calibration", "planner",
                    "--model", "gpt3-350m", "--global-batch", "64", "--trace", str(trace), "--duration-s", "21600",
                    "--set", "rendezvous_s=30", "--json", "--out", str(tmp_path / "run"))  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["policy"] == "restart"
    assert summary["num_restarts"] == 2 and summary["num_reconfigurations"] == 0
    assert summary["breakdown"]["lost_work_s"] > 0  # work since the last checkpoint, twice
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["design"] == "restart"
    assert config["effective_design_options"] == {"min_nodes": 1, "rendezvous_s": 30.0}
    # the rendezvous is charged on the start and on both restarts: 3 x 30 s more restart time
    base = ooblab("simulate", "--design-module", str(EXAMPLE), "--design", "restart", "--calibration", "planner",
                  "--model", "gpt3-350m", "--global-batch", "64", "--trace", str(trace), "--duration-s", "21600",
                  "--json", "--no-write")  # fmt: skip
    assert base.returncode == 0, base.stderr
    plain = json.loads(base.stdout)["breakdown"]["restart_s"]
    assert summary["breakdown"]["restart_s"] == pytest.approx(plain + 90.0)


@pytest.mark.timeout(300)
def test_the_example_restarts_from_the_checkpoint_on_the_real_backend(tmp_path):
    pytest.importorskip("torch")
    from real.config import RunConfig
    from real.models.reference import gather_params, max_relative_difference, train_reference

    params = tmp_path / "params"
    result = ooblab("run", "--design-module", str(EXAMPLE), "--design", "restart", "--nodes", "2", "--f", "0",
                    "--steps", "6", "--global-batch", "16", "--dtype", "float64", "--checkpoint-every", "2",
                    "--inject", "3:node1:crash:backward", "--timeout", "15", "--heartbeat-timeout", "3",
                    "--heartbeat-interval", "0.25", "--save-params", str(params), "--out", str(tmp_path / "run"),
                    "--json", timeout_s=240)  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads(result.stdout)
    assert summary["status"] == "finished" and summary["policy"] == "restart"
    assert summary["num_restarts"] == 1 and summary["num_reconfigurations"] == 0
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    decisions = [e for e in events if e["kind"] == "decision"]
    assert decisions[0]["actions"][0]["action"] == "RestartFromCheckpoint"
    (rollback,) = [e for e in events if e["kind"] == "rollback"]
    # the newest checkpoint complete before the decision: step 2's, unless its writes were
    # still in flight when node1 crashed in step 3 (a loaded machine), then the start
    complete = [e["step"] for e in events[: events.index(decisions[0])] if e["kind"] == "checkpoint"]
    assert set(complete) <= {2}
    assert rollback["to_step"] == max(complete, default=0)
    reference = train_reference(RunConfig(nodes=2, fault_tolerance=0, steps=6, global_batch=16, dtype="float64"))
    assert summary["losses"] == pytest.approx(reference.losses, rel=1e-9)
    worst = max(max_relative_difference(p, reference.params) for p in gather_params(params).values())
    assert worst <= 1e-5
