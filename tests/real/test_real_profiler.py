"""`ooblab profile`: measured layers in the planner's format, and the planner plans from it."""

from __future__ import annotations

import json

import pytest

from planner.oobleck_format import load_oobleck_profile
from real.config import TINY_GPT, TinyGptSpec
from real.control.planning import tiny_gpt_layer_params
from real.launch.profiler import ProfilerSettings, measure_layer
from real.models.family import named

from .conftest import ooblab

SPEC = TinyGptSpec(vocab=64, seq_len=16, hidden=32, heads=2, blocks=2)
SIZE_ARGS = ["--vocab", "64", "--seq-len", "16", "--hidden", "32", "--heads", "2", "--blocks", "2"]


def test_layer_measurement_sizes_are_exact():
    torch = pytest.importorskip("torch")
    settings = ProfilerSettings(microbatch_size=2, repeats=2, warmup=1)
    params = tiny_gpt_layer_params(SPEC)
    for index in range(SPEC.num_layers):
        m = measure_layer(named(TINY_GPT, SPEC), index, settings, torch.device("cpu"))
        assert m.param_bytes == 4 * params[index]
        tensors = {0: 2, 1: 12, 2: 12, 3: 3}[index]  # parameter tensors of the layer
        # AdamW: exp_avg and exp_avg_sq like every parameter, plus one step counter each
        assert 2 * m.param_bytes <= m.optimizer_bytes <= 2 * m.param_bytes + 8 * tensors
        assert m.forward_s > 0 and m.backward_s > 0
        hidden_bytes = 2 * SPEC.seq_len * SPEC.hidden * 4
        if index < SPEC.num_layers - 1:
            assert m.output_bytes == hidden_bytes
        else:
            assert m.output_bytes == 4  # the head's loss
        if 0 < index < SPEC.num_layers - 1:
            # a block keeps much more than its input: LayerNorm, QKV, attention, MLP
            assert m.activation_bytes > 4 * hidden_bytes


@pytest.mark.timeout(180)
def test_profile_command_writes_a_profile_the_planner_uses(tmp_path):
    out = tmp_path / "profile"
    result = ooblab(
        [
            "profile",
            *SIZE_ARGS,
            "--repeats",
            "2",
            "--warmup",
            "1",
            "--max-participants",
            "3",
            "--skip-comm",  # measured by tests/real/test_real_comm_profile.py (its processes take ~20 s here)
            "--out",
            str(out),
            "--json",
        ],
        150,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    printed = result.json()
    assert len(printed["layers"]) == SPEC.num_layers
    assert all(set(layer["allreduce_across_nodes_s"]) == {"2", "3"} for layer in printed["layers"])
    assert "communication" not in printed and not (out / "communication.json").exists()
    profile = load_oobleck_profile(out, 1)
    assert profile.num_layers == SPEC.num_layers
    assert [l.param_bytes for l in profile.layers] == [4 * p for p in tiny_gpt_layer_params(SPEC)]
    assert profile.stage_gpu_counts(8) == (1,)  # no in-node tables: one-GPU stages only
    assert all(l.across_nodes_allreduce_s(2) > 0 for l in profile.layers)
    plan = ooblab(["plan", "--model", str(out), "--nodes", "4", "--f", "1", "--global-batch", "16", "--json"], 60)
    assert plan.returncode == 0 and plan.json()["plan"]["iteration_time_s"] > 0
    run = ooblab(
        [
            "run",
            "--profile",
            str(out),
            *SIZE_ARGS,
            "--nodes",
            "2",
            "--f",
            "1",
            "--steps",
            "2",
            "--out",
            str(tmp_path / "run"),
            "--json",
        ],
        90,
    )
    summary = run.json()
    assert run.returncode == 0 and summary["status"] == "finished", summary["reason"]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["profile_dir"] == str(out)
    assert summary["predicted_iteration_s"] == pytest.approx(summary["plan"]["iteration_time_s"])


def test_profile_rejects_models_it_cannot_build(tmp_path):
    result = ooblab(["profile", "--model", "gpt3-1.3b", "--out", str(tmp_path / "p")], 60)
    assert result.returncode == 2 and "measures 'tiny-gpt' or a Hugging Face model" in result.stderr
