"""Hugging Face models trained on the real backend equal one process over the same batches.

`ooblab run --model hf:FAMILY:tiny` (gloo on CPU, float64) on 4 workers as a 1-node and a
3-node pipeline (different templates, unequal microbatches), failure-free (GPT-2, Qwen2) and
with workers crashing mid-backward and at a step boundary (Llama; live reconfiguration;
outside CI also a Llama crash and then a hang, and a GPT-2 survivor stalled in its
teardown and replaced by a fresh process), and under Varuna (restart from checkpoint
files), GEMINI (restart from peers' memory) and replica groups (a group out, the others
training on their samples): every pipeline's final layers and every step's loss equal a
plain single-process run of the same model over the same samples (`train_reference`).
"""

from __future__ import annotations

import importlib.util

import pytest

from real.config import RunConfig
from real.models.reference import gather_params, max_relative_difference, train_reference

from .conftest import ooblab

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="the [hf] extra is not installed"
)
TOLERANCE = 1e-9
FAST = ["--timeout", "30", "--heartbeat-timeout", "10", "--heartbeat-interval", "0.25"]  # workers import transformers


def run_and_compare(
    tmp_path, model: str, steps: int, inject: str | None = None, design: str = "oobleck", pipelines: str = "1,3"
) -> dict:
    params_dir = tmp_path / "params"
    args = ["run", "--design", design, "--model", model, "--nodes", "4", "--f", "1", "--steps", str(steps),
            "--global-batch", "8", "--dtype", "float64", *FAST, "--save-params", str(params_dir),
            "--out", str(tmp_path / "run"), "--json"]  # fmt: skip
    if design == "oobleck":  # a 1-node and a 3-node pipeline unless asked; the other designs choose their own
        args += ["--pipelines", pipelines]
    if inject:
        args += ["--inject", inject]
    result = ooblab(args, timeout_s=200)
    summary = result.json()
    assert result.returncode == 0 and summary["status"] == "finished", summary.get("reason") or result.stderr[-4000:]
    reference = train_reference(
        RunConfig(model=model, nodes=4, fault_tolerance=1, steps=steps, global_batch=8, dtype="float64")
    )
    replicas = gather_params(params_dir)
    worst = max(max_relative_difference(params, reference.params) for params in replicas.values())
    assert worst <= TOLERANCE, f"parameters differ from the reference by {worst:.3e}"
    assert summary["losses"] == pytest.approx(reference.losses, rel=1e-9)
    return summary


@pytest.mark.timeout(240)
@pytest.mark.parametrize("family", ["gpt2", "qwen2"])  # Llama's below, through a crash
def test_heterogeneous_pipelines_train_the_model_as_one_process(tmp_path, family):
    summary = run_and_compare(tmp_path, f"hf:{family}:tiny", steps=3)
    assert [p["num_nodes"] for p in summary["initial_plan"]["pipelines"]] == [1, 3]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "second",
    [
        "3:node1:crash:forward",  # a crash as step 3 begins: at a step boundary
        "3:node0:hang",  # the worker freezes (alive, silent), declared at the heartbeat timeout and fenced
    ],
    ids=["step-boundary", "hang"],
)
def test_a_crash_mid_backward_and_a_second_failure_are_survived_exactly(tmp_path, second):
    # node2 dies inside step 1's backward (a step half done, redone); both recoveries live
    summary = run_and_compare(tmp_path, "hf:llama:tiny", steps=5, inject=f"1:node2:crash:backward,{second}")
    assert summary["injections_fired"] == [0, 1] and summary["generations"] >= 3
    assert summary["num_restarts"] == 0 and len(summary["recovery_s"]) == 2


@pytest.mark.timeout(300)
def test_a_worker_stalled_in_its_teardown_is_replaced_from_a_replica_exactly(tmp_path):
    """node3 crashes mid-backward; node0's main thread then stalls in the teardown (its
    heartbeat goes on): it is fenced and a fresh process for node0 receives its
    transformers blocks from node2, the other pipeline's holder of the same stage."""
    inject = "1:node3:crash:backward,1:node0:stall:teardown"
    summary = run_and_compare(tmp_path, "hf:gpt2:tiny", steps=4, inject=inject, pipelines="2,2")
    assert summary["injections_fired"] == [0, 1] and summary["num_restarts"] == 0
    assert "node0" in [n for p in summary["plan"]["pipelines"] for n in p["nodes"]]  # replaced, training


@pytest.mark.timeout(240)
def test_a_measured_profile_plans_the_model_and_must_match_its_layers(tmp_path):
    """`ooblab profile --model hf:...` measures the model's layers here; `run --profile` plans
    from them; a profile of another shape is refused in one line before any worker starts."""
    profile = tmp_path / "profile"
    measured = ooblab(["profile", "--model", "hf:gpt2:tiny", "--out", str(profile), "--skip-comm", "--repeats", "2",
                       "--warmup", "1", "--max-participants", "2"], timeout_s=120)  # fmt: skip
    assert measured.returncode == 0, measured.stderr[-3000:]
    assert "profiled 4 layers of hf:gpt2:tiny" in measured.stdout
    base = ["run", "--nodes", "2", "--f", "1", "--steps", "2", "--global-batch", "4", *FAST, "--profile", str(profile)]
    ran = ooblab([*base, "--model", "hf:gpt2:tiny", "--out", str(tmp_path / "run"), "--json"], timeout_s=150)
    assert ran.returncode == 0 and ran.json()["status"] == "finished", ran.stderr[-3000:]
    events = (tmp_path / "run" / "events.jsonl").read_text()
    assert str(profile) in events  # the coordinator planned from the measured profile
    wrong = ooblab([*base, "--model", "hf:gpt2:small", "--out", str(tmp_path / "wrong")], timeout_s=60)
    assert wrong.returncode == 2 and "profiles 4 layers, hf:gpt2:small has 6" in wrong.stderr
    assert len([line for line in wrong.stderr.splitlines() if line.strip()]) == 1


@pytest.mark.timeout(300)
@pytest.mark.parametrize("design", ["varuna", "gemini"])
def test_restarts_from_a_checkpoint_or_peers_memory_are_exact(tmp_path, design):
    """Varuna restarts every worker from its checkpoint files, GEMINI from the copies in its
    peers' memory: both hold the transformers blocks' state as they hold tiny-gpt's."""
    summary = run_and_compare(tmp_path, "hf:gpt2:tiny", steps=5, inject="2:node1:crash:backward", design=design)
    assert summary["injections_fired"] == [0] and summary["generations"] >= 2


@pytest.mark.timeout(300)
def test_replica_groups_train_the_live_groups_samples_exactly(tmp_path):
    """2 replica groups of 2 nodes; node3 crashes in step 2's backward and its group stays out:
    from step 2 on every step trains on group 0's samples only, and the parameters and losses
    equal one process trained on exactly those samples."""
    params_dir = tmp_path / "params"
    args = ["run", "--design", "replica_groups", "--set", "group_nodes=2", "--model", "hf:llama:tiny", "--nodes", "4",
            "--steps", "5", "--checkpoint-every", "0", "--global-batch", "8", "--dtype", "float64", *FAST,
            "--inject", "2:node3:crash:backward", "--save-params", str(params_dir), "--out", str(tmp_path / "run"),
            "--json"]  # fmt: skip
    result = ooblab(args, timeout_s=240)
    summary = result.json()
    assert result.returncode == 0 and summary["status"] == "finished", summary.get("reason") or result.stderr[-4000:]
    partial = {int(k): [tuple(r) for r in v] for k, v in summary.get("partial_steps", {}).items()}
    assert sorted(partial) == [2, 3, 4] and all(ranges == [(0, 4)] for ranges in partial.values())
    config = RunConfig(model="hf:llama:tiny", nodes=4, steps=5, global_batch=8, dtype="float64")
    reference = train_reference(config, partial)
    worst = max(max_relative_difference(p, reference.params) for p in gather_params(params_dir).values())
    assert worst <= TOLERANCE and summary["losses"] == pytest.approx(reference.losses, rel=1e-9)
    assert train_reference(config).losses != pytest.approx(reference.losses, rel=1e-6)
