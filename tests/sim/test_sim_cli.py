"""`ooblab simulate`, the run record, bad input and determinism."""

from __future__ import annotations

import json

import pytest

from ooblab.cli import main
from planner.records import read_timeline
from sim.config import SimConfig
from sim.errors import SimError
from sim.run import simulate


def run_cli(capsys, *argv):
    code = main(["simulate", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_defaults_print_a_readable_summary(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "--out", str(tmp_path / "run"))
    assert code == 0
    assert "Oobleck on GPT-3-medium (artifact calibration)" in out and "average throughput" in out
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        "config.json",
        "events.jsonl",
        "summary.json",
        "timeline.csv",
    ]


@pytest.mark.parametrize("policy", ["oobleck", "bamboo", "varuna"])
@pytest.mark.parametrize("calibration,model", [("artifact", "BERT-large"), ("planner", "GPT-3-2_7b")])
def test_json_holds_the_summary_fields(capsys, policy, calibration, model):
    code, out, _ = run_cli(
        capsys,
        "--policy",
        policy,
        "--model",
        model,
        "--calibration",
        calibration,
        "--trace",
        "fixed:interval=30m,removals=6",
        "--no-write",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    for key in (
        "avg_samples_per_s",
        "committed_samples",
        "num_restarts",
        "num_reconfigurations",
        "num_iterations",
        "num_checkpoints",
        "failures_survived",
        "node_hours",
        "cost_usd",
    ):
        assert key in data, key
    assert set(data["breakdown"]) == {
        "useful_compute_s",
        "reconfiguration_s",
        "restart_s",
        "checkpoint_s",
        "lost_work_s",
        "redundant_compute_s",
        "waiting_s",
    }  # wall-clock seconds only; GPU-seconds apart
    assert data["idle_gpu_s"] >= 0
    b = data["breakdown"]
    assert data["effective_training_time"] == pytest.approx(b["useful_compute_s"] / sum(b.values()))
    assert data["committed_samples"] > 0 and data["policy"] == policy and data["calibration"] == calibration


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--model", "GPT-4"], "unknown artifact model 'GPT-4'"),
        (["--calibration", "planner", "--model", "gpt5"], "unknown model 'gpt5'"),
        (["--calibration", "planner", "--model", "gpt3-1.3b"], "global_batch is required"),
        (["--set", "colour=red"], "unknown config key(s) colour"),
        (["--gpu", "a100-80gb"], "gpu has no effect in the artifact calibration"),
        (["--policy", "oobleck", "--bamboo-depth", "4"], "bamboo_depth applies to bamboo"),
        (["--trace", "fixed:interval=1h,colour=red"], "unknown key 'colour'"),
        (["--trace", "no/such/file.csv"], "no such trace file"),
        (["--set", "node_startup_s=-3"], "node_startup_s must be a finite number >= 0"),
        (["--set", "timeline"], "is not KEY=VALUE"),
    ],
)
def test_bad_input_exits_2_naming_the_problem(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv, "--no-write")
    assert code == 2 and out == ""
    assert message in err and err.startswith("ooblab simulate: error:")


def test_a_malformed_trace_file_is_named(capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("0,add,a\n10,remove,b\n")
    code, _, err = run_cli(capsys, "--trace", str(bad), "--no-write")
    assert code == 2 and "bad.csv" in err and "'b'" in err


def test_same_config_same_bytes_and_rerun_from_the_record(tmp_path):
    config = SimConfig.of(policy="varuna", model="GPT-2-ours", trace="spot:nodes=30,hours=6", seed=3)
    first = simulate(config).write(tmp_path / "a")
    second = simulate(config).write(tmp_path / "b")
    for name in ("config.json", "summary.json", "timeline.csv", "events.jsonl"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    record = json.loads((first / "config.json").read_text())
    assert record["global_batch"] is None and record["effective_global_batch"] == 1024
    again = simulate(SimConfig.from_record(record))
    assert json.loads(json.dumps(again.summary.to_dict())) == json.loads((first / "summary.json").read_text())
    assert read_timeline(first) == list(again.timeline)
    other = simulate(config.with_(seed=4))
    assert other.summary != again.summary  # the seed drives the generated trace


def test_planner_calibration_records_its_effective_setting(tmp_path):
    result = simulate(
        SimConfig.of(policy="oobleck", model="GPT-3-2_7b", calibration="planner", trace="fixed:interval=1h,removals=3")
    )
    c = result.config
    assert c["planner_model"] == "gpt3-2.7b" and c["effective_gpu"] == "v100-16gb" and c["effective_gpus_per_node"] == 1
    assert c["effective_global_batch"] == 512 and c["effective_inter_node_gbps"] == pytest.approx(10.0)
    assert c["effective_checkpoint_every_s"] == 3600.0 and c["profile_source"] == "analytic:gpt3-2.7b@v100-16gb"


def test_config_rejects_unknown_keys_and_bad_values():
    with pytest.raises(SimError, match="unknown config key"):
        SimConfig.from_mapping({"policy": "oobleck", "speed": 3})
    with pytest.raises(SimError, match="unknown design .no-such-design.; known designs: oobleck"):
        SimConfig.of(policy="no-such-design")
    with pytest.raises(SimError, match="varuna_rollback applies to varuna, not oobleck"):
        SimConfig.of(calibration="planner", varuna_rollback=False)
    with pytest.raises(SimError, match="varuna option rollback has no effect in the planner calibration"):
        SimConfig.of(policy="varuna", calibration="planner", varuna_rollback=False)


def test_varuna_checkpoint_count_default_only_without_an_interval():
    base = SimConfig.of(
        policy="varuna", model="GPT-3-2_7b", calibration="planner", trace="fixed:interval=1h,removals=1"
    )
    assert simulate(base).config["effective_checkpoint_every_iterations"] == 10
    by_time = simulate(base.with_(checkpoint_every_s=600.0)).config
    assert by_time["effective_checkpoint_every_iterations"] is None and by_time["effective_checkpoint_every_s"] == 600.0
    both = simulate(base.with_(checkpoint_every_s=600.0, checkpoint_every_iterations=7)).config
    assert both["effective_checkpoint_every_iterations"] == 7


def test_a_trace_that_spans_no_time_runs_for_duration_s(tmp_path):
    path = tmp_path / "quiet.csv"
    path.write_text("time_s,kind,node\n" + "".join(f"0,add,n{i}\n" for i in range(12)))
    config = SimConfig.of(policy="oobleck", trace=str(path))
    with pytest.raises(SimError, match="spans no time.*duration_s"):
        simulate(config)
    result = simulate(config.with_(duration_s=3600.0))
    assert result.summary.duration_s == 3600.0 and result.summary.num_iterations > 0
