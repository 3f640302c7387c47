"""The namespace campaign's scenarios (`benchmarks/netns_campaign.py`): valid schedules,
every kind in every block of seven, each kind means what it says (no namespaces)."""

from __future__ import annotations

import pytest

from real.protocol.failures import parse_injections

from ..conftest import benchmark_module


@pytest.fixture(scope="module")
def nc():
    return benchmark_module("netns_campaign")


@pytest.mark.parametrize("seed", [5, 11])
def test_scenarios_parse_cover_every_kind_and_mean_their_kind(nc, seed):
    scenarios = nc.campaign(seed, 42)
    assert [s.index for s in scenarios] == list(range(42))
    for block in range(6):
        assert sorted(s.kind for s in scenarios[7 * block : 7 * block + 7]) == sorted(nc.KINDS)
    for s in scenarios:
        assert 5 <= s.nodes + 1 <= 6, "4-6 hosts, the coordinator's included"
        groups = nc.pipelines_of(s.pipelines)
        assert sum(len(g) for g in groups) == s.nodes
        items = parse_injections(s.inject, [f"node{i}" for i in range(s.nodes)], steps=nc.STEPS)
        assert all(i.step is not None and 1 <= i.step < nc.STEPS for i in items)
        kinds = [i.kind for i in items]
        if s.kind == "cut":
            assert kinds == ["netdown"]
        elif s.kind == "cut_restore":
            assert kinds == ["netdown", "netup"] and items[0].node == items[1].node
            assert (items[1].step or 0) > (items[0].step or 0)
        elif s.kind == "slow":
            assert kinds == ["slow", "netup"] and items[0].rate_kbit is not None and items[0].rate_kbit >= 1000
        elif s.kind == "cut_in_recovery":
            assert kinds == ["crash", "netdown"] and items[1].point == "recovery"
            pipeline = {n: p for p, group in enumerate(groups) for n in group}
            assert pipeline[items[0].node] != pipeline[items[1].node], "one victim per pipeline"
        elif s.kind in ("crash", "hang"):
            assert kinds == [s.kind] and items[0].by_worker
        else:
            assert s.kind == "coordinator_cut" and items == () and 1.0 <= s.coordinator_cut_s <= 6.0
    assert nc.campaign(seed, 10) == scenarios[:10], "a shorter campaign is a prefix"


def test_a_hugging_face_model_is_passed_to_the_job_and_a_bad_name_refused(nc, tmp_path):
    scenario = nc.campaign(5, 1)[0]
    tiny = scenario.job_args(tmp_path)
    hf = scenario.job_args(tmp_path, "hf:gpt2:tiny")
    assert tiny[tiny.index("--model") + 1] == "tiny-gpt" and tiny[tiny.index("--heartbeat-timeout") + 1] == "3"
    assert hf[hf.index("--model") + 1] == "hf:gpt2:tiny" and hf[hf.index("--heartbeat-timeout") + 1] == "10"
    from real.models.family import model_problem

    assert model_problem("tiny-gpt") is None and model_problem("hf:llama:small") is None
    assert "trains tiny-gpt or hf:FAMILY" in (model_problem("gpt2") or "")
    assert "'huge' is neither a preset" in (model_problem("hf:gpt2:huge") or "")
