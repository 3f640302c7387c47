"""Profiles: the Oobleck format loader (with its errors) and the analytic models."""

from __future__ import annotations

import json
import math

import pytest

from planner.analytic import MODEL_SHAPES, analytic_profile, get_shape
from planner.errors import PlannerError, ProfileError
from planner.hardware import GPUS, make_cluster
from planner.oobleck_format import load_oobleck_profile, write_oobleck_profile


def test_real_gpt2_xl_profile_loads(shared_dir, gpt2_profile):
    raw = json.loads((shared_dir / "traces/profiles/gpt2-xl-h-oobleck/mb1.json").read_text())
    assert gpt2_profile.num_layers == len(raw) == 50
    for layer, entry in zip(gpt2_profile.layers, raw):
        assert layer.forward_s == pytest.approx(entry["forward"] / 1000)
        assert layer.backward_s == pytest.approx(entry["backward"] / 1000)
        assert layer.param_bytes == int(entry["mem_required"][0])
        assert layer.state_bytes == 4 * int(entry["mem_required"][0])  # 16 bytes / fp32 param
        assert layer.in_node_allreduce_s(1) == 0.0
        assert layer.in_node_allreduce_s(2) is None
    assert gpt2_profile.stage_gpu_counts(8) == (1,)  # only one-GPU stages are timed


def write_profile(tmp_path, entries, name="mb1.json"):
    (tmp_path / name).write_text(json.dumps(entries))
    return tmp_path


GOOD = {"forward": 1.0, "backward": 2.0, "mem_required": [100, 10]}


@pytest.mark.parametrize(
    "entries, message",
    [
        ([], "has no layers"),
        ([GOOD, {"forward": 1.0, "mem_required": [1, 1]}], r"layer 1: missing field 'backward'"),
        ([{"forward": -1.0, "backward": 2.0, "mem_required": [1, 1]}], r"layer 0: field 'forward' is negative"),
        (
            [GOOD, {"forward": float("nan"), "backward": 2.0, "mem_required": [1, 1]}],
            r"layer 1: field 'forward' is not finite",
        ),
        ([{"forward": "fast", "backward": 2.0, "mem_required": [1, 1]}], r"must be a number"),
        ([{"forward": 1.0, "backward": 2.0, "mem_required": [1]}], r"mem_required"),
        ({"forward": 1.0}, "expected a list"),
    ],
)
def test_malformed_profiles_name_file_and_layer(tmp_path, entries, message):
    write_profile(tmp_path, entries)
    with pytest.raises(ProfileError, match=message) as info:
        load_oobleck_profile(tmp_path)
    assert str(tmp_path / "mb1.json") in str(info.value)


def test_missing_microbatch_size_lists_what_exists(tmp_path):
    write_profile(tmp_path, [GOOD], "mb4.json")
    with pytest.raises(ProfileError, match=r"no profile for microbatch size 1 \(available: 4\)"):
        load_oobleck_profile(tmp_path, 1)
    assert load_oobleck_profile(tmp_path, 4).microbatch_size == 4


def test_broken_allreduce_table(tmp_path):
    write_profile(tmp_path, [GOOD, GOOD])
    (tmp_path / "allreduce_in_node.json").write_text(json.dumps([{"2": 1.0}]))
    with pytest.raises(ProfileError, match="expected a list of 2 layers, got 1"):
        load_oobleck_profile(tmp_path)


def test_round_trip_through_the_format(tmp_path, gpt2_profile):
    again = load_oobleck_profile(write_oobleck_profile(gpt2_profile, tmp_path / "p"))
    for a, b in zip(gpt2_profile.layers, again.layers):
        assert a.forward_s == pytest.approx(b.forward_s)
        assert a.param_bytes == b.param_bytes and a.activation_bytes == b.activation_bytes


@pytest.mark.parametrize(
    "name, published_params",
    [
        ("gpt3-350m", 350e6),
        ("gpt3-1.3b", 1.3e9),
        ("gpt3-2.7b", 2.7e9),
        ("gpt3-6.7b", 6.7e9),
        ("gpt3-13b", 13e9),
        ("gpt3-175b", 175e9),
        ("bert-large", 340e6),
        ("gpt2-xl", 1.5e9),
    ],
)
def test_analytic_parameter_counts_match_published_sizes(name, published_params):
    shape = get_shape(name)
    # Untied output projections add V h (about 0.1 B for GPT vocabularies), so allow 10 %
    # plus that.
    tied = shape.num_params - shape.vocab * shape.hidden
    assert abs(tied - published_params) / published_params < 0.1


def test_analytic_profile_formulas():
    """One block of GPT-3 2.7B on an A100: FLOPs, bytes and the recompute factor by hand."""
    profile = analytic_profile("gpt3-2.7b", "a100-40gb", 2)
    block = profile.layers[1]
    b, s, h = 2, 2048, 2560
    flops = 24 * b * s * h * h + 4 * b * s * s * h
    gpu = GPUS["a100-40gb"]
    assert block.forward_s == pytest.approx(flops / (gpu.peak_flops * gpu.efficiency))
    assert block.backward_s == pytest.approx(3 * block.forward_s)
    params = 12 * h * h + 13 * h
    assert block.state_bytes == 16 * params
    assert block.activation_bytes == 2 * b * s * h
    assert block.in_node_allreduce_s(4) == pytest.approx(
        2 * 2 * 3 / 4 * (2 * b * s * h) / gpu.intra_node_bw_bytes_per_s
    )
    assert profile.num_layers == 32 + 2
    no_recompute = analytic_profile("gpt3-2.7b", "a100-40gb", 2, recompute=False)
    assert no_recompute.layers[1].backward_s == pytest.approx(2 * block.forward_s)
    assert no_recompute.layers[1].activation_bytes > 10 * block.activation_bytes


def test_every_builtin_model_on_every_gpu_builds():
    for name in MODEL_SHAPES:
        for gpu in GPUS:
            profile = analytic_profile(name, gpu)
            assert all(math.isfinite(l.forward_s) and l.forward_s > 0 for l in profile.layers)


def test_unknown_names_are_clear_errors():
    with pytest.raises(PlannerError, match="unknown model 'gpt5'"):
        analytic_profile("gpt5", "a100-40gb")
    with pytest.raises(PlannerError, match="unknown GPU type 'tpu'"):
        make_cluster("tpu", 1, 1)
