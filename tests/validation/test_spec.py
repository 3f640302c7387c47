"""Validation settings: bad ones are refused by name; traces are rescaled and timed."""

from __future__ import annotations

import pytest

from experiments.validation.cli import QUICK
from experiments.validation.spec import ValidationError, ValidationSpec, prepare_trace
from ooblab.cli import main


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(compute="gpu"), "compute must be"),
        (dict(compute="real", model="synthetic"), "real compute runs 'tiny-gpt' or a Hugging Face model"),
        (dict(nodes=1), "nodes must be >= 2"),
        (dict(policies=("oobleck", "bamboo")), "policies must be among"),
        (dict(policies=()), "policies must be among"),
        (dict(target_duration_s=0.0), "target_duration_s"),
        (dict(global_batch=0), "global_batch"),
    ],
)
def test_bad_settings_name_the_setting(changes, message):
    with pytest.raises(ValidationError, match=message):
        ValidationSpec(**changes)


def test_trace_is_rescaled_onto_the_node_count_and_compressed_to_the_target():
    prepared = prepare_trace(
        ValidationSpec(trace="fixed:interval=1h,nodes=10,removals=4", nodes=5, target_duration_s=60.0)
    )
    counts = prepared.trace.live_counts()["live_nodes"]
    assert counts.max() == 5 and counts.min() == 3  # 6-10 nodes onto 3-5
    assert prepared.time_scale == pytest.approx(4 * 3600 / 60.0)
    assert "rescaled onto 3-5 nodes" in prepared.note


def test_a_trace_at_the_node_count_is_kept_and_an_explicit_scale_wins():
    prepared = prepare_trace(ValidationSpec(trace=QUICK["trace"], nodes=4, time_scale=100.0))
    assert "rescaled" not in prepared.note and prepared.time_scale == 100.0
    assert [e.time_s for e in prepared.trace.events if e.kind == "remove"] == [3600.0, 7200.0]


def test_an_unreadable_trace_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("0,add,a\n5,explode,a\n")
    with pytest.raises(ValidationError, match="bad.csv"):
        prepare_trace(ValidationSpec(trace=str(bad)))


def test_cli_refuses_a_bad_setting_with_status_2(capsys):
    assert main(["validate", "--compute", "real", "--model", "synthetic"]) == 2
    assert "tiny-gpt" in capsys.readouterr().err


def test_a_window_slices_the_trace_and_a_bad_one_is_named():
    spec = ValidationSpec(trace="fixed:interval=1h,nodes=8,removals=4", nodes=8, window="1.5h:3.5h")
    prepared = prepare_trace(spec)
    removals = [e.time_s for e in prepared.trace.events if e.kind == "remove"]
    assert removals == [1800.0, 5400.0]  # the removals at 2 h and 3 h, rebased to the slice
    with pytest.raises(ValidationError, match="START:END"):
        prepare_trace(ValidationSpec(trace="fixed:interval=1h,nodes=8,removals=4", window="2h"))


def _communication(hop_overhead_s: float = 1.2e-3):
    from planner.profile import CommProfile, LinkProfile

    link = LinkProfile(1e-4, 4e9)
    return CommProfile(link, link, hop_overhead_s, "a measured file")


def test_the_synthetic_profile_carries_a_given_communication_file(tmp_path):
    import json

    from experiments.validation.spec import prepare_model
    from planner.oobleck_format import CommSample, communication_json, write_communication

    given = write_communication(_communication(), tmp_path, [CommSample("in_node", 1024, 1e-4)])
    model = prepare_model(ValidationSpec(communication=str(given)), tmp_path / "out", progress=lambda _: None)
    assert json.loads((model.profile_dir / "communication.json").read_text()) == communication_json(
        _communication(), [CommSample("in_node", 1024, 1e-4)]
    )
    from planner.oobleck_format import load_oobleck_profile

    profile = load_oobleck_profile(model.profile_dir, 1)
    assert profile.num_layers == 8 and profile.communication == _communication()  # the profile still reads as before


def test_kept_communication_is_reused_and_bad_files_are_named(tmp_path):
    import json

    from experiments.validation.spec import measured_communication
    from planner.oobleck_format import communication_json, write_communication

    write_communication(_communication(2e-3), tmp_path)  # as a first validation in this directory left it
    said: list[str] = []
    assert measured_communication(tmp_path, progress=said.append)[0].hop_overhead_s == 2e-3
    assert not said  # nothing measured
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**communication_json(_communication()), "hop_overhead_s": -1.0}))
    with pytest.raises(ValidationError, match="bad.json.*hop_overhead_s"):
        measured_communication(tmp_path, bad)
    with pytest.raises(ValidationError, match="missing.json"):
        measured_communication(tmp_path, tmp_path / "missing.json")
    (tmp_path / "communication.json").write_text(json.dumps({**communication_json(_communication()), "extra": 1}))
    with pytest.raises(ValidationError, match="unknown field 'extra'.*delete it to measure again"):
        measured_communication(tmp_path)


@pytest.mark.parametrize("model", ["synthetic", "tiny-gpt"])
def test_cli_refuses_a_bad_communication_file_with_one_line_and_status_2(tmp_path, capsys, model):
    """Before any profiling or measuring: the given file is read first."""
    import json

    from planner.oobleck_format import communication_json

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**communication_json(_communication()), "in_node": {"latency_s": 1e-4}}))
    args = ["validate", "--quick", "--model", model, "--communication", str(bad), "--out", str(tmp_path / "out")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "bad.json" in err and "in_node.bytes_per_s" in err and "\n" not in err
