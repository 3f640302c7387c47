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


# -- --remove / --add ---------------------------------------------------------

SMALL = ["plan", "--model", "gpt3-350m", "--nodes", "7", "--f", "1", "--global-batch", "64", "--json"]


def check_reconfiguration(out: dict) -> dict:
    reconf = out["reconfiguration"]
    copies = reconf["copies"]
    assert reconf["copied_bytes"] == sum(c["param_bytes"] + c["optimizer_bytes"] for c in copies)
    received: dict[str, int] = {}
    for c in copies:
        received[c["dst_node"]] = received.get(c["dst_node"], 0) + c["param_bytes"] + c["optimizer_bytes"]
    assert reconf["busiest_node_bytes"] == max(received.values(), default=0)
    assert reconf["lower_bound_bytes"] <= reconf["copied_bytes"] <= reconf["keep_order_bytes"]
    return reconf


def test_remove_count_prints_the_reconfigured_plan_and_its_copies(capsys):
    assert main([*SMALL, "--remove", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    reconf = check_reconfiguration(out)
    last = out["plan"]["pipelines"][0]["nodes"][-1]
    assert reconf["remove"] == [last]
    nodes = [n for p in reconf["plan"]["pipelines"] for n in p["nodes"]]
    assert sorted(nodes) == sorted(f"node{i}" for i in range(7) if f"node{i}" != last)
    assert sum(p["microbatches"] for p in reconf["plan"]["pipelines"]) == 64


def test_remove_named_nodes_with_a_tolerance(capsys):
    assert main([*SMALL, "--remove", "node0", "--throughput-tolerance", "0.05"]) == 0
    reconf = check_reconfiguration(json.loads(capsys.readouterr().out))
    assert reconf["remove"] == ["node0"] and any("chose" in n for n in reconf["notes"])


def test_add_offers_new_nodes(capsys):
    assert main([*SMALL, "--add", "2", "--join-horizon-s", "1e9"]) == 0
    reconf = check_reconfiguration(json.loads(capsys.readouterr().out))
    assert reconf["add"] == ["node7", "node8"]
    assert {"node7", "node8"} <= {n for p in reconf["plan"]["pipelines"] for n in p["nodes"]}


def test_remove_readable_output(capsys):
    assert main([*SMALL[:-1], "--remove", "1"]) == 0
    out = capsys.readouterr().out
    assert "reconfiguration: removed 1 node(s)" in out and "lower bound" in out


@pytest.mark.parametrize(
    "args, reason",
    [
        (SMALL + ["--remove", "node0,node99"], "--remove names nodes not in the plan: ['node99']"),
        (SMALL + ["--remove", "7"], "remove between 1 and 6"),
        (SMALL + ["--remove", "node1,node1"], "more than once"),
        (SMALL + ["--remove", "1", "--throughput-tolerance", "1.5"], "fraction in [0, 1)"),
        (SMALL + ["--throughput-tolerance", "0.1"], "applies to --remove only"),
        (SMALL + ["--add", "0"], "positive number"),
        (
            ["plan", "--model", "gpt3-2.7b", "--nodes", "8", "--global-batch", "32", "--remove", "6"],
            "leaves 2, fewer than n0 = 4 for one replica: the job would wait for nodes",
        ),
    ],
)
def test_bad_reconfiguration_requests_are_one_line_errors(args, reason):
    result = subprocess.run([sys.executable, "-m", "ooblab.cli", *args], capture_output=True, text=True)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and reason in lines[0] and "Traceback" not in result.stderr


def test_command_table_names_the_part_that_registers_each_command():
    """`ooblab <command>` imports only COMMANDS[command]: the table must match what the
    parts register (a stale entry would hide a command or load the wrong part)."""
    import argparse
    import importlib

    from ooblab import cli

    owners = {}
    for name in cli._PARTS:
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        try:
            importlib.import_module(name).register(sub)
        except ModuleNotFoundError:
            continue
        owners.update({command: name for command in sub.choices})
    assert owners == cli.COMMANDS


def test_plan_loads_no_pandas_simpy_or_torch():
    code = (
        "import sys, ooblab.cli; ooblab.cli.main(['plan', '--nodes', '4']); "
        "print(sorted(m for m in ('pandas', 'simpy', 'torch') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
