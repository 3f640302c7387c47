"""The gradient ring's messages: 2 (K - 1) per stage synchronisation, each at the profile's
measured per-hop cost, charged where the exposure model puts the synchronisation.

Hand cases use the synthetic profile (8 layers of 10 + 20 ms) with a `communication.json`
whose hop overhead is 1 ms: single-stage pipelines sync after their whole pipeline, so
the ring's messages are exposed in full; a two-stage pipeline's first stage syncs after
its last backward, behind the last stage's, which may hide part of them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.validation.spec import synthetic_profile
from planner.allreduce import exposed_allreduce_s, layer_allreduce_s
from planner.oobleck_format import write_oobleck_profile
from planner.plan import JobSpec
from planner.planner import Planner
from planner.policies.grid import Grid, GridPlan
from sim.run import simulate
from sim.setup import build
from sim.sync_cost import SyncMessages, ring_messages

from .profile_runs import profile_run_config

HOP_S = 0.001


def _directory(tmp_path, hop_s: float | None = HOP_S):
    directory = tmp_path / "profile"
    write_oobleck_profile(synthetic_profile(), directory)
    if hop_s is not None:
        link = {"latency_s": 4e-5, "bytes_per_s": 4e9}
        data = {"source": "test", "in_node": link, "across_nodes": link, "hop_overhead_s": hop_s, "samples": []}
        (directory / "communication.json").write_text(json.dumps(data))
    return directory


_config = profile_run_config


@pytest.fixture(scope="module")
def timing(tmp_path_factory) -> SyncMessages:
    built = build(_config(_directory(tmp_path_factory.mktemp("sync")))).timing
    assert isinstance(built, SyncMessages)
    return built


def _planner(timing: SyncMessages) -> Planner:
    return Planner(timing.profile, timing.cluster.with_nodes(8), JobSpec(16, 1, 1))


def test_a_ring_has_two_messages_per_other_replica():
    assert [ring_messages(k) for k in (0, 1, 2, 3, 32)] == [0, 0, 2, 4, 62]


def test_single_stage_pipelines_pay_every_message(timing):
    planner = _planner(timing)
    for count in (2, 3, 4):
        plan = planner.build_plan([[f"n{i}"] for i in range(count)])
        assert all(p.template.num_stages == 1 for p in plan.pipelines)
        cost = timing.iteration(plan)
        expected = plan.iteration_time_s + 2 * (count - 1) * HOP_S
        assert cost.total_s == pytest.approx(expected, rel=1e-12)
        assert cost.useful_s == pytest.approx(expected, rel=1e-12)


def test_one_pipeline_has_nothing_to_synchronise(timing):
    plan = _planner(timing).build_plan([["a", "b"]])
    assert timing.iteration(plan).total_s == plan.iteration_time_s


def test_varuna_pays_the_messages_of_its_width(timing):
    config = Grid(2, 3, 1, 6, ((0, 4), (4, 8)), 6 * 0.12, 0.05)
    plan = GridPlan(config, ("a", "b", "c", "d", "e", "f"), None, 1)
    assert timing.iteration(plan).total_s == pytest.approx(plan.iteration_time_s + 4 * HOP_S, rel=1e-12)


def _brute_exposed(templates, times, layer_s, latency):
    """Every stage of every pipeline: its sync ends at its last backward + its layers' times
    + the latency; what ends after the slowest pipeline is exposed."""
    end = -np.inf
    for template in templates:
        for stage in template.stages:
            ready = max(
                max(f - t.backward_before_s[layer] for t, f in zip(templates, times))
                for layer in range(stage.first_layer, stage.end_layer)
            )
            end = max(end, ready + sum(layer_s[stage.first_layer : stage.end_layer]) + latency)
    return max(0.0, end - max(times))


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([1, 2, 3, 4]), min_size=2, max_size=4),
    latency=st.floats(0.0, 0.5),
)
def test_the_latency_term_matches_a_stage_by_stage_reading(timing, sizes, latency):
    groups, first = [], 0
    for size in sorted(sizes):
        groups.append([f"n{first + i}" for i in range(size)])
        first += size
    plan = Planner(timing.profile, timing.cluster.with_nodes(first), JobSpec(16, 1, 1)).build_plan(groups)
    templates = [p.template for p in plan.pipelines]
    times = [t.iteration_time(p.num_microbatches) for t, p in zip(templates, plan.pipelines)]
    layer_s = layer_allreduce_s(timing.profile, timing.cluster, len(templates))
    got = exposed_allreduce_s(templates, times, layer_s, latency)
    assert got == pytest.approx(_brute_exposed(templates, times, layer_s, latency), abs=1e-12)
    assert exposed_allreduce_s(templates, times, layer_s) == pytest.approx(plan.allreduce_exposed_s, abs=1e-12)
    # the term adds at most the latency, and never takes time away
    base = exposed_allreduce_s(templates, times, layer_s)
    assert base - 1e-12 <= got <= base + latency + 1e-12


def test_without_a_measured_hop_cost_nothing_changes(tmp_path):
    for hop in (None, 0.0):
        built = build(_config(_directory(tmp_path / str(hop), hop_s=hop)))
        assert not isinstance(built.timing, SyncMessages)
        assert "sync_message_s" not in built.resolved


def test_a_run_is_slower_by_the_messages_of_each_phase(tmp_path):
    def phases(directory):
        result = simulate(_config(directory, nodes=4, removals=2))
        return {row.live_nodes: row.throughput_samples_per_s for row in result.timeline if row.state == "running"}

    plain = phases(_directory(tmp_path / "plain", hop_s=None))
    charged = phases(_directory(tmp_path / "charged"))
    assert set(plain) == set(charged) == {4, 3, 2}
    for live in (4, 3, 2):  # single-stage pipelines here: every message exposed
        assert 16 / charged[live] == pytest.approx(16 / plain[live] + 2 * (live - 1) * HOP_S, rel=1e-9)
