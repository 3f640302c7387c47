"""Pipeline communication: the profile's `communication.json`, its checks, the switch and
the charge on a template's stages."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ooblab.cli import main
from planner.costmodel import CostTables
from planner.errors import ProfileError
from planner.hardware import DEFAULT_ACROSS_NODES_LATENCY_S, DEFAULT_IN_NODE_LATENCY_S, make_cluster
from planner.oobleck_format import (
    CommSample,
    communication_json,
    load_communication,
    load_oobleck_profile,
    read_communication,
    write_communication,
    write_oobleck_profile,
)
from planner.plan import JobSpec
from planner.planner import Planner
from planner.profile import CommProfile, LayerProfile, LinkProfile, ModelProfile
from planner.templates import build_template

from .strategies import MIB, cluster, comm_cluster

GOOD_COMM = {
    "source": "ooblab profile, gloo over loopback on test, 2026-12-01",
    "in_node": {"latency_s": 1.1e-4, "bytes_per_s": 2.5e9},
    "across_nodes": {"latency_s": 2.2e-4, "bytes_per_s": 1.25e9},
    "hop_overhead_s": 0.0012,
    "samples": [{"link": "in_node", "bytes": 65536, "seconds": 1.3e-4}],
}


def profile_dir(tmp_path, comm=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "mb1.json").write_text(json.dumps([{"forward": 1.0, "backward": 2.0, "mem_required": [100, 10]}] * 3))
    if comm is not None:
        (tmp_path / "communication.json").write_text(json.dumps(comm))
    return tmp_path


def test_communication_json_is_read_into_the_profile(tmp_path):
    profile = load_oobleck_profile(profile_dir(tmp_path, GOOD_COMM))
    comm = profile.communication
    assert comm == CommProfile(LinkProfile(1.1e-4, 2.5e9), LinkProfile(2.2e-4, 1.25e9), 0.0012, GOOD_COMM["source"])
    assert comm.in_node.transfer_s(2.5e6) == pytest.approx(1.1e-4 + 1e-3)


def test_no_communication_json_means_none(tmp_path):
    assert load_oobleck_profile(profile_dir(tmp_path)).communication is None


def test_write_then_read_round_trips(tmp_path):
    profile = load_oobleck_profile(profile_dir(tmp_path / "a", GOOD_COMM))
    again = load_oobleck_profile(write_oobleck_profile(profile, tmp_path / "b"))
    assert again.communication == profile.communication
    assert json.loads((tmp_path / "b" / "communication.json").read_text())["hop_overhead_s"] == 0.0012


def _with(**changes):
    body = json.loads(json.dumps(GOOD_COMM))
    for path, value in changes.items():
        *parents, key = path.split("__")
        target = body
        for parent in parents:
            target = target[int(parent)] if isinstance(target, list) else target[parent]
        if value is KeyError:
            del target[key]
        else:
            target[key] = value
    return body


links = st.builds(LinkProfile, st.floats(0.0, 1.0), st.floats(1e-3, 1e15))
comm_profiles = st.builds(CommProfile, links, links, st.floats(0.0, 1.0), st.text(min_size=1, max_size=40))
samples = st.lists(
    st.builds(CommSample, st.sampled_from(["in_node", "across_nodes"]), st.integers(0, 1 << 40), st.floats(1e-9, 1e3)),
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(comm=comm_profiles, points=samples)
def test_written_communication_reads_back_equal(tmp_path_factory, comm, points):
    directory = tmp_path_factory.mktemp("comm")
    path = write_communication(comm, directory, points)
    assert read_communication(path) == read_communication(directory) == (comm, tuple(points))
    assert load_communication(directory) == comm
    assert json.loads(path.read_text()) == communication_json(comm, points)


def test_a_zero_latency_and_no_samples_or_source_are_allowed(tmp_path):
    body = {k: v for k, v in _with(in_node__latency_s=0).items() if k not in ("samples", "source")}
    profile_dir(tmp_path, body)
    comm, points = read_communication(tmp_path)
    assert comm.in_node == LinkProfile(0.0, 2.5e9) and points == ()
    assert comm.source == str(tmp_path / "communication.json")  # no source: the file names itself


@pytest.mark.parametrize(
    "body, message",
    [
        (_with(in_node__latency_s=-1e-5), r"'in_node.latency_s' must be >= 0"),
        (_with(in_node__latency_s=KeyError), r"missing field 'in_node.latency_s'"),
        (_with(across_nodes__bytes_per_s=0), r"'across_nodes.bytes_per_s' must be > 0"),
        (_with(hop_overhead_s=float("inf")), r"'hop_overhead_s' must be a finite number"),
        (_with(hop_overhead_s=-1e-3), r"'hop_overhead_s' must be >= 0"),
        (_with(hop_overhead_s=KeyError), r"missing field 'hop_overhead_s'"),
        (_with(in_node__bytes_per_s="fast"), r"'in_node.bytes_per_s' must be a finite number"),
        (_with(across_nodes=KeyError), r"'across_nodes' must be an object"),
        (_with(source=3), r"'source' must be a string"),
        (_with(samples={}), r"'samples' must be a list"),
        (_with(hop_overhead=0.001), r"unknown field 'hop_overhead'"),
        (_with(in_node__latency=0.001), r"unknown field 'in_node.latency'"),
        (_with(samples__0__note="x"), r"unknown field 'samples\[0\].note'"),
        (_with(samples__0__link="nvlink"), r"'samples\[0\].link' must be 'in_node' or 'across_nodes'"),
        (_with(samples__0__bytes=-1), r"'samples\[0\].bytes' must be an integer >= 0"),
        (_with(samples__0__bytes=1.5), r"'samples\[0\].bytes' must be an integer >= 0"),
        (_with(samples__0__bytes=True), r"'samples\[0\].bytes' must be an integer >= 0"),
        (_with(samples__0__seconds=0), r"'samples\[0\].seconds' must be > 0"),
        (_with(samples__0__seconds=float("nan")), r"'samples\[0\].seconds' must be a finite number"),
        (_with(samples__0__seconds=KeyError), r"missing field 'samples\[0\].seconds'"),
        (_with(samples=[3]), r"'samples\[0\]' must be an object"),
        ([1, 2], r"expected an object"),
    ],
)
def test_bad_communication_json_is_one_line_naming_file_and_field(tmp_path, body, message):
    profile_dir(tmp_path, body)
    with pytest.raises(ProfileError, match=message) as info:
        load_communication(tmp_path)
    text = str(info.value)
    assert str(tmp_path / "communication.json") in text and "\n" not in text


def test_the_writer_refuses_what_the_reader_would_and_writes_nothing(tmp_path):
    comm = CommProfile(LinkProfile(1e-4, 1e9), LinkProfile(2e-4, 1e9), 1e-3, "test")
    with pytest.raises(ProfileError, match=r"'samples\[1\].seconds' must be > 0"):
        write_communication(comm, tmp_path, [CommSample("in_node", 1024, 1e-4), CommSample("in_node", 2048, 0.0)])
    with pytest.raises(ProfileError, match=r"'samples\[0\].link'"):
        write_communication(comm, tmp_path, [CommSample("nvlink", 1024, 1e-4)])
    assert not (tmp_path / "communication.json").exists()


@pytest.mark.parametrize("change", [dict(in_node__latency_s=-1.0), dict(hop_overhead=0.0)])
def test_bad_communication_json_exits_2_from_the_cli(tmp_path, capsys, change):
    profile_dir(tmp_path, _with(**change))
    assert main(["plan", "--model", str(tmp_path), "--nodes", "2", "--f", "0", "--global-batch", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert "communication.json" in err and "\n" not in err


def test_the_cli_switch_turns_the_term_off(capsys):
    args = ["plan", "--model", "gpt3-350m", "--nodes", "6", "--f", "0", "--global-batch", "32", "--json"]
    assert main(args) == 0
    on = json.loads(capsys.readouterr().out)
    assert main([*args, "--no-pipeline-comm"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert off["pipeline_comm"] is None and "NCCL-model" in on["pipeline_comm"]
    slowest = {
        name: max(p["iteration_time_s"] for p in run["plan"]["pipelines"]) for name, run in (("on", on), ("off", off))
    }
    assert slowest["on"] > slowest["off"]


@pytest.mark.parametrize(
    "links, message",
    [
        ((LinkProfile(float("nan"), 1.0), LinkProfile(0.0, 1.0), 0.0), "in_node.latency_s"),
        ((LinkProfile(0.0, 1.0), LinkProfile(0.0, -1.0), 0.0), "across_nodes.bytes_per_s"),
        ((LinkProfile(0.0, 1.0), LinkProfile(0.0, 1.0), -0.1), "hop_overhead_s"),
    ],
)
def test_comm_profile_rejects_bad_numbers(links, message):
    with pytest.raises(ProfileError, match=message):
        CommProfile(*links)


def _layer(output_mib: int) -> LayerProfile:
    return LayerProfile("l", 1.0, 2.0, MIB, MIB, 2 * MIB, 0, output_mib * MIB, allreduce_in_node_s=((2, 0.5),))


def test_stage_weights_carry_the_sends_of_their_links():
    """Two nodes of two GPUs, four one-GPU stages: boundaries 1 and 3 are in a node, 2 across."""
    comm = CommProfile(LinkProfile(0.01, 1 * MIB), LinkProfile(0.1, 0.5 * MIB), 0.2)
    model = ModelProfile("m", 1, tuple(_layer(i + 1) for i in range(4)), communication=comm)
    tables = CostTables(model, comm_cluster(100_000, 2, 2))
    template = build_template(tables, 2, [(0, 1, 1), (1, 2, 1), (2, 3, 1), (3, 4, 1)])
    fast = lambda mib: 0.2 + 0.01 + mib  # noqa: E731 - in node: 1 MiB/s
    slow = lambda mib: 0.2 + 0.1 + 2 * mib  # noqa: E731 - across: 0.5 MiB/s
    expected = [
        3.0 + fast(1),  # stage 0 sends layer 0's output (1 MiB) forward, in node; no backward send
        3.0 + slow(2) + fast(1),  # forward across (2 MiB), backward in node (1 MiB)
        3.0 + fast(3) + slow(2),
        3.0 + fast(3),  # the last stage: backward only (layer 2's output)
    ]
    for stage, weight in zip(template.stages, expected):
        assert stage.weight_s == pytest.approx(weight, rel=1e-12)
    assert template.stages[1].forward_s == pytest.approx(1.0 + slow(2))
    assert template.stages[1].backward_s == pytest.approx(2.0 + fast(1))


def test_the_switch_off_drops_the_term_bit_for_bit():
    comm = CommProfile(LinkProfile(0.01, 1 * MIB), LinkProfile(0.1, 0.5 * MIB), 0.2)
    model = ModelProfile("m", 1, tuple(_layer(i + 1) for i in range(4)), communication=comm)
    off = CostTables(model, cluster(100_000, 2, 2))
    plain = CostTables(replace(model, communication=None), cluster(100_000, 2, 2))
    assert off.comm is None
    for d in off.widths:
        for links in ((False, False), (True, True), (True, False)):
            assert (off.weight_matrix(d, *links) == plain.compute_weight_matrix(d)).all()
    assert off.forward_s(0, 2, 1, True) == plain.forward_s(0, 2, 1) == 2.0


def test_default_links_are_the_clusters_with_documented_latencies(gpt2_profile):
    cluster_on = make_cluster("v100-16gb", 8, 1)
    tables = CostTables(gpt2_profile, cluster_on)
    assert tables.comm.in_node == LinkProfile(DEFAULT_IN_NODE_LATENCY_S, cluster_on.intra_node_bw_bytes_per_s)
    assert tables.comm.across_nodes == LinkProfile(DEFAULT_ACROSS_NODES_LATENCY_S, cluster_on.inter_node_bw_bytes_per_s)
    assert tables.comm.hop_overhead_s == 0.0
    out = gpt2_profile.layers[9].output_bytes
    assert tables.send_s(10, False) == pytest.approx(DEFAULT_ACROSS_NODES_LATENCY_S + out / (10e9 / 8))
    assert tables.send_s(0, False) == tables.send_s(gpt2_profile.num_layers, True) == 0.0


def test_gpt2_plan_is_slower_with_the_term_and_unchanged_without(gpt2_profile):
    job = JobSpec(64, 1, 1)
    nodes = [f"n{i}" for i in range(12)]
    on = Planner(gpt2_profile, make_cluster("v100-16gb", 12, 1), job).instantiate(nodes)
    off = Planner(gpt2_profile, make_cluster("v100-16gb", 12, 1, pipeline_comm=False), job).instantiate(nodes)
    assert on.iteration_time_s > off.iteration_time_s
    assert math.isfinite(on.iteration_time_s)
