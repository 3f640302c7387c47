"""Run configurations and the planner's inputs for the real backend (no processes)."""

from __future__ import annotations

import pytest

from planner.analytic import analytic_profile
from planner.errors import PlannerError
from planner.oobleck_format import write_oobleck_profile
from real.config import ConfigError, RunConfig, TinyGptSpec
from real.control.planning import (
    estimate_tiny_gpt,
    make_plan,
    make_planner,
    one_gpu_stages,
    resolve_run_profile,
    tiny_gpt_layer_params,
)


def test_config_round_trips():
    config = RunConfig(nodes=7, pipelines=(3, 4), tiny=TinyGptSpec(blocks=6, hidden=32), dtype="float64")
    assert RunConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(compute="real", model="gpt3-1.3b"), "real compute runs the built-in 'tiny-gpt' or a Hugging Face model"),
        (dict(compute="quantum"), "compute must be one of"),
        (dict(global_batch=10, microbatch_size=3), "not a multiple of the microbatch"),
        (dict(nodes=7, pipelines=(3, 3)), "use 6 nodes, the job has 7"),
        (dict(nodes=0), "nodes must be a positive integer"),
        (dict(dtype="float16"), "dtype must be one of"),
        (dict(heartbeat_interval_s=2.0, heartbeat_timeout_s=1.0), "heartbeat_timeout_s must exceed"),
        (dict(tiny=None), None),
    ],
)
def test_bad_configs_name_the_problem(changes, message):
    if message is None:  # tiny-gpt sizes are validated by TinyGptSpec itself
        with pytest.raises(ConfigError, match="not a multiple of heads"):
            TinyGptSpec(hidden=30, heads=4)
        return
    with pytest.raises(ConfigError, match=message):
        RunConfig(**changes)


def test_unknown_settings_are_not_dropped():
    with pytest.raises(ConfigError, match="unknown run settings"):
        RunConfig.from_dict({**RunConfig().to_dict(), "learning_rate": 1.0})


def test_estimate_counts_tiny_gpt_parameters_exactly():
    torch = pytest.importorskip("torch")
    from real.models.tinygpt import build_layer

    spec = TinyGptSpec(vocab=50, seq_len=12, hidden=24, heads=3, blocks=3)
    counts = [sum(p.numel() for p in build_layer(spec, i, 0).parameters()) for i in range(spec.num_layers)]
    assert counts == tiny_gpt_layer_params(spec)
    profile = estimate_tiny_gpt(spec, 2, "float64")
    assert [l.param_bytes for l in profile.layers] == [8 * c for c in counts]
    assert all(l.optimizer_bytes == 2 * l.param_bytes for l in profile.layers)
    assert all(l.backward_s == pytest.approx(2 * l.forward_s) for l in profile.layers)
    del torch


def test_backend_plans_only_one_gpu_stages():
    analytic = analytic_profile("gpt3-350m", "v100-16gb")
    assert analytic.stage_gpu_counts(8) == (1, 2, 4, 8)
    stripped = one_gpu_stages(analytic)
    assert stripped.stage_gpu_counts(8) == (1,)
    assert [l.forward_s for l in stripped.layers] == [l.forward_s for l in analytic.layers]
    config = RunConfig(
        model="gpt3-350m", compute="emulated", nodes=2, gpus_per_node=4, fault_tolerance=1, global_batch=64
    )
    plan = make_plan(make_planner(config), config, ["a", "b"])
    assert all(s.num_gpus == 1 for p in plan.pipelines for s in p.template.stages)


def test_measured_profile_must_match_the_model(tmp_path):
    profile = estimate_tiny_gpt(TinyGptSpec(blocks=2), 1)
    write_oobleck_profile(profile, tmp_path)
    config = RunConfig(profile_dir=str(tmp_path), tiny=TinyGptSpec(blocks=2))
    assert resolve_run_profile(config).num_layers == 4
    with pytest.raises(PlannerError, match="profiles 4 layers, tiny-gpt with 4 blocks has 6"):
        resolve_run_profile(RunConfig(profile_dir=str(tmp_path)))


def test_forced_grouping_needs_f_plus_one_pipelines():
    config = RunConfig(nodes=4, fault_tolerance=2, pipelines=(2, 2))
    with pytest.raises(PlannerError, match="cannot tolerate f = 2"):
        make_plan(make_planner(config), config, ["a", "b", "c", "d"])


def test_the_real_backend_builds_its_policies_where_the_simulator_does():
    from designs.oobleck.policy import OobleckPolicy
    from designs.varuna.policy import VarunaPolicy
    from real.control.policies import make_policy

    for policy, kind in (("oobleck", OobleckPolicy), ("varuna", VarunaPolicy)):
        config = RunConfig(nodes=4, policy=policy, checkpoint_every=3, join_horizon_s=42.0)
        profile = resolve_run_profile(config)
        built = make_policy(config, make_planner(config, profile), profile)
        assert isinstance(built, kind) and built.checkpoints.every_iterations == 3
        if policy == "oobleck":
            assert built.join_horizon_s == 42.0
        else:
            assert built.gpus_per_node == config.gpus_per_node and built.infeasible_reason() is None
