"""The failure campaign's scenarios (`benchmarks/failure_campaign.py`): valid schedules,
every kind in every block of seven, each kind means what it says (no processes)."""

from __future__ import annotations

import pytest

from real.protocol.failures import parse_injections

from ..conftest import benchmark_module


@pytest.fixture(scope="module")
def fc():
    return benchmark_module("failure_campaign")


def _pipeline(node: str) -> int:
    return int(node[4:]) // 2


@pytest.mark.parametrize("seed", [17, 3])
def test_scenarios_parse_cover_every_kind_and_mean_their_kind(fc, seed):
    scenarios = fc.campaign(seed, 56)
    assert [s.index for s in scenarios] == list(range(56))
    for block in range(8):
        assert sorted(s.kind for s in scenarios[7 * block : 7 * block + 7]) == sorted(fc.KINDS)
    for s in scenarios:
        items = parse_injections(s.inject, [f"node{i}" for i in range(s.nodes)])
        assert s.f == s.nodes // 2 - 1
        failures = [i for i in items if i.kind != "join"]
        assert all(i.step is not None and 1 <= i.step < fc.STEPS for i in items)
        if s.kind in ("crash", "hang"):
            assert all(i.kind == s.kind for i in items) and 1 <= len(items) <= s.f
            assert len({_pipeline(i.node) for i in items}) == len(items), "at most one victim per pipeline: live"
            assert len({i.step for i in items}) == 1
        elif s.kind == "stall":
            assert [i.kind for i in items] == ["crash", "stall"] and items[1].point == "teardown"
        elif s.kind == "join":
            assert [i.kind for i in items] == ["crash", "join"] and items[0].node == items[1].node
        elif s.kind == "beyond_f":
            assert len(failures) == s.f + 1 and len({i.point for i in items}) == 1 and len({i.step for i in items}) == 1
        elif s.kind == "during_recovery":
            assert items[-1].point == "reconfigure" and 2 <= len(items) <= s.f + 1
        elif s.kind == "varuna":
            assert s.policy == "varuna" and s.pipelines is None and len(items) == 1
        if s.kind != "varuna":
            assert s.pipelines == ",".join(["2"] * (s.f + 1))


def test_a_campaign_is_a_function_of_its_seed_and_a_prefix_of_a_longer_one(fc):
    assert fc.campaign(17, 10) == fc.campaign(17, 50)[:10]
    assert fc.campaign(17, 20) != fc.campaign(18, 20)


def test_bad_arguments_exit_2(fc, capsys):
    assert fc.main(["--runs", "0"]) == 2
    assert "--runs must be >= 1" in capsys.readouterr().err
