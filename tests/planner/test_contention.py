"""contention.json: parse, validate, write and read back, attached by `resolve_profile`."""

from __future__ import annotations

import json

import pytest

from planner.catalog import resolve_profile
from planner.contention import (
    FILE_NAME,
    ContentionProfile,
    load_contention,
    parse_contention,
    write_contention,
)
from planner.errors import ProfileError
from planner.oobleck_format import write_oobleck_profile
from planner.profile import LayerProfile, ModelProfile

GOOD = {
    "source": "test",
    "reference_neighbours": 1,
    "compute_factor": {"0": 0.6, "1": 1.0, "2": 1.4},
    "measured_s": {"0": [[0.001, 0.002], [0.003, 0.004]], "1": [[0.002, 0.003], [0.004, 0.006]]},
    "cpu_share": {"0": [0.98, 0.98], "1": [0.97, 0.95]},
}


def _profile(layers: int = 2) -> ModelProfile:
    return ModelProfile(
        "m", 1, tuple(LayerProfile(f"l{i}", 0.01, 0.02, 1 << 10, 1 << 10, 2 << 10, 64, 64) for i in range(layers))
    )


def test_parse_reads_every_field_and_round_trips(tmp_path):
    profile = parse_contention(GOOD)
    assert profile.reference_neighbours == 1
    assert profile.compute_factor == ((0, 0.6), (1, 1.0), (2, 1.4))
    assert [profile.factor(k) for k in (0, 1, 2)] == [0.6, 1.0, 1.4]
    assert profile.measured_s[0] == (0, ((0.001, 0.002), (0.003, 0.004)))
    assert profile.cpu_share == ((0, (0.98, 0.98)), (1, (0.97, 0.95)))
    assert profile.summary() == (
        "compute factor by busy neighbours (vs 1): 0: 0.600 (core share 0.98, busy mean 0.98), "
        "1: 1.000 (core share 0.97, busy mean 0.95), 2: 1.400"
    )
    write_contention(profile, tmp_path)
    assert load_contention(tmp_path) == profile
    assert json.loads((tmp_path / FILE_NAME).read_text())["compute_factor"] == GOOD["compute_factor"]


def test_an_unmeasured_count_is_an_error_not_an_extrapolation():
    profile = parse_contention(GOOD)
    with pytest.raises(ProfileError, match="no compute factor for 3 busy neighbours"):
        profile.factor(3)
    assert profile.missing(5) == (3, 4)
    assert profile.missing(3) == ()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"reference_neighbours": 3}, "no compute_factor for the reference count 3"),
        ({"reference_neighbours": True}, "reference_neighbours must be a whole number"),
        ({"reference_neighbours": -1}, "reference_neighbours must be a whole number"),
        ({"compute_factor": {"0": 0.5, "1": 1.2}}, r"compute_factor\[1\] \(the reference\) must be 1"),
        ({"compute_factor": {"0": 0.0, "1": 1.0}}, r"compute_factor\[0\] = 0.0 is not a positive number"),
        ({"compute_factor": {"0": float("nan"), "1": 1.0}}, "is not a positive number"),
        ({"compute_factor": {"x": 0.5, "1": 1.0}}, "neighbour count 'x' is not a whole number"),
        ({"compute_factor": {"01": 0.5, "1": 1.0}}, "lists a neighbour count twice"),
        ({"compute_factor": {"0": "fast", "1": 1.0}}, r"compute_factor\[0\] must be a number"),
        ({"compute_factor": {}}, "holds no neighbour count"),
        ({"compute_factor": [1.0]}, "must be an object"),
        ({"measured_s": {"0": [[0.1, 0.2]], "1": [[0.1, 0.2], [0.1, 0.2]]}}, "different layer counts"),
        ({"measured_s": {"0": [[0.1, -0.2]]}}, "not a finite number >= 0"),
        ({"measured_s": {"0": [0.1]}}, "must be a list of"),
        ({"cpu_share": {"0": [0.5]}}, r"cpu_share\[0\] must be \[own, mean\]"),
        ({"cpu_share": {"0": [0.5, 1.5]}}, r"cpu_share\[0\] must be \[own, mean\] shares in \(0, 1\]"),
        ({"cpu_share": {"0": [0.0, 0.5]}}, "shares in"),
        ({"cpu_share": {"0": [0.5, "x"]}}, r"cpu_share\[0\] must be a number"),
        ({"cpu_share": {"0": [0.5, 0.5], "00": [0.5, 0.5]}}, "cpu_share lists a neighbour count twice"),
        ({"cpu_share": [[0.5, 0.5]]}, "'cpu_share' must be an object"),
        ({"hop_overhead_s": {"0": 0.001}}, "hop_overhead_s must hold the counts compute_factor holds"),
        ({"hop_overhead_s": {"1": 0.001, "2": 0.002}}, "0 among them; got 1, 2"),
        ({"hop_overhead_s": {"0": 0.001, "1": -0.001, "2": 0.0}}, r"hop_overhead_s\[1\] = -0.001 is not a number >= 0"),
        ({"hop_overhead_s": {"0": "x", "1": 0.0, "2": 0.0}}, r"hop_overhead_s\[0\] must be a number"),
        ({"hop_overhead_s": [0.001]}, "'hop_overhead_s' must be an object"),
        ({"source": 3}, "'source' must be a string"),
        ({"factor": 1}, "unknown field 'factor'"),
    ],
)
def test_bad_fields_are_named_in_one_line(change, message):
    data = {**GOOD, **change}
    with pytest.raises(ProfileError, match=message) as info:
        parse_contention(data, "dir/contention.json")
    assert "\n" not in str(info.value) and str(info.value).startswith("dir/contention.json: ")


@pytest.mark.parametrize("missing", ["reference_neighbours", "compute_factor"])
def test_required_fields(missing):
    data = {k: v for k, v in GOOD.items() if k != missing}
    with pytest.raises(ProfileError, match=f"missing field '{missing}'"):
        parse_contention(data)


def test_not_json_is_named(tmp_path):
    (tmp_path / FILE_NAME).write_text("{")
    with pytest.raises(ProfileError, match="contention.json: not a readable JSON file"):
        load_contention(tmp_path)


def test_the_dataclass_checks_too():
    with pytest.raises(ProfileError, match="the reference"):
        ContentionProfile(0, ((0, 0.9),))


def test_resolve_profile_attaches_the_file_and_only_then(tmp_path):
    write_oobleck_profile(_profile(), tmp_path)
    assert resolve_profile(str(tmp_path), "v100-16gb", 1).contention is None
    write_contention(parse_contention(GOOD), tmp_path)
    profile = resolve_profile(str(tmp_path), "v100-16gb", 1)
    assert profile.contention is not None and profile.contention.factor(2) == 1.4
    assert [l.forward_s for l in profile.layers] == pytest.approx([0.01, 0.01])  # layer times untouched


def test_measured_layers_must_match_the_model(tmp_path):
    write_oobleck_profile(_profile(3), tmp_path)
    write_contention(parse_contention(GOOD), tmp_path)
    with pytest.raises(ProfileError, match="contention measured_s lists 2 layers, the model has 3"):
        resolve_profile(str(tmp_path), "v100-16gb", 1)


def test_hop_readings_give_each_count_its_extra_over_the_unloaded_one(tmp_path):
    data = {**GOOD, "hop_overhead_s": {"0": 0.001, "1": 0.0025, "2": 0.004}}
    profile = parse_contention(data)
    assert [profile.hop_extra_s(k) for k in (0, 1, 2)] == pytest.approx([0.0, 0.0015, 0.003])
    assert profile.summary().endswith("; pipeline hop 0: 1.00 ms, 1: 2.50 ms, 2: 4.00 ms")
    write_contention(profile, tmp_path)
    assert load_contention(tmp_path) == profile
    assert parse_contention(GOOD).hop_extra_s(7) == 0.0  # no readings: nothing added, at any count
    partial = ContentionProfile(1, ((0, 0.5), (1, 1.0)), "p", hop_overhead_s=((0, 0.001), (1, 0.002)))
    with pytest.raises(ProfileError, match="no hop reading for 2 busy neighbours; measured: 0, 1"):
        partial.hop_extra_s(2)
