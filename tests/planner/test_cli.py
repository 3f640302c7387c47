"""`ooblab plan`: readable by default, one JSON object with --json, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ooblab.cli import main


def test_plan_json_has_the_documented_fields(capsys):
    assert main(["plan", "--model", "gpt3-350m", "--nodes", "7", "--f", "1", "--global-batch", "64", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"templates", "plan"} <= out.keys()
    for template in out["templates"]:
        assert {"num_nodes", "num_stages", "iteration_time_s", "stages"} <= template.keys()
        layers = [layer for stage in template["stages"] for layer in range(*stage["layers"])]
        assert layers == list(range(26))  # embedding + 24 blocks + head, in order, once
        assert all(stage["num_gpus"] >= 1 for stage in template["stages"])
    plan = out["plan"]
    assert {"pipelines", "iteration_time_s", "samples_per_s"} <= plan.keys()
    assert sum(p["num_nodes"] for p in plan["pipelines"]) == 7
    assert sum(p["microbatches"] for p in plan["pipelines"]) == 64
    assert len(plan["pipelines"]) >= 2
    assert plan["samples_per_s"] == pytest.approx(64 / plan["iteration_time_s"])


def test_plan_readable_output(capsys):
    assert main(["plan", "--model", "bert-large", "--nodes", "6", "--global-batch", "32"]) == 0
    out = capsys.readouterr().out
    assert "plan:" in out and "samples/s" in out and "n0 =" in out


@pytest.mark.parametrize(
    "args, reason",
    [
        (["--global-batch", "511", "--microbatch", "2"], "not a multiple of the microbatch"),
        (["--nodes", "3", "--f", "2"], "needs at least"),
        (["--model", "gpt3-175b", "--nodes", "2"], "does not fit"),
        (["--model", "nonsense"], "neither a profile directory nor a built-in model"),
    ],
)
def test_infeasible_requests_exit_non_zero_with_one_line(args, reason):
    result = subprocess.run([sys.executable, "-m", "ooblab.cli", "plan", *args], capture_output=True, text=True)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and reason in lines[0]
