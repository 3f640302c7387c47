"""Parcae: the predictor and the liveput choice by hand, never peeking ahead, the sim end to end."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import traces
from designs import DesignError, registry
from designs.parcae.migrate import arrange, copies, node_layers
from designs.parcae.policy import ParcaePolicy, ParcaeSettings
from designs.parcae.predict import ar1_coefficient, forecast
from ooblab.cli import main
from planner.policies import CheckpointSchedule
from planner.policies.grid import Grid, place
from planner.profile import LayerProfile
from planner.reconfigure import Reconfiguration
from sim.config import SimConfig
from sim.run import simulate

# -- the predictor ---------------------------------------------------------------------------


def test_ar1_fit_by_hand():
    # differences 1, 2, 1: phi = (1*2 + 2*1) / (1 + 4)
    assert ar1_coefficient([0, 1, 3, 4]) == pytest.approx(0.8)
    assert ar1_coefficient([5, 5, 5]) == 0.0


def test_forecast_by_hand():
    assert forecast([7, 7, 7], 3, upper=30) == (7, 7, 7)
    # a steady fall of one per interval: phi = 1, it goes on, kept within 3 of the first step
    assert forecast([30, 30, 30, 29, 28, 27], 5, upper=30) == (26, 25, 24, 23, 23)
    # differences -2, +2: phi = -1, the forecast alternates around the last value
    assert forecast([10, 8, 10], 3, upper=30) == (8, 10, 8)
    assert forecast([2, 1], 3, upper=30) == (1, 1, 1)  # one difference fits no phi: 0, flat
    assert forecast([1, 5, 9], 2, upper=10) == (10, 10)  # bounded above by the cluster


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=12), st.integers(1, 6), st.data())
def test_forecast_depends_on_the_past_only(history, steps, data):
    later = data.draw(st.lists(st.integers(0, 40), max_size=6))
    assert forecast(history, steps, upper=40) == forecast(list(history), steps, upper=40)
    for k in range(1, len(history) + 1):  # a prefix never sees what follows it
        assert forecast(history[:k], steps, upper=40) == forecast((history + later)[:k], steps, upper=40)


# -- migration costs -------------------------------------------------------------------------
def _layer(bytes_: int) -> LayerProfile:
    return LayerProfile(
        name="l", forward_s=1.0, backward_s=2.0, param_bytes=bytes_, grad_bytes=0, optimizer_bytes=0,
        activation_bytes=0, output_bytes=0,
    )  # fmt: skip


LAYERS = [_layer(100), _layer(200), _layer(300), _layer(400)]


def _config(depth: int, width: int, iteration_s: float = 1.0) -> Grid:
    per = 4 // depth
    return Grid(depth, width, 1, 8, tuple((i * per, (i + 1) * per) for i in range(depth)), iteration_s, 0.0)


def test_intra_stage_migration_copies_one_stage_per_new_replica():
    old = place(_config(2, 2), ["a", "b", "c", "d"], 1)  # a: 0-1, b: 2-3, c: 0-1, d: 2-3
    new = arrange(_config(2, 3), ["a", "b", "c", "d", "e", "f"], node_layers(old), 1)
    moved = copies(old, new, LAYERS, set("abcdef"))
    assert new.nodes[:4] == ("a", "b", "c", "d")  # the holders keep their places
    received: dict[str, list[int]] = {}
    for c in moved:  # each layer from the least-loaded live holder: the two replicas share
        received.setdefault(c.dst_node, []).extend(c.layers)
    assert {n: sorted(v) for n, v in received.items()} == {"e": [0, 1], "f": [2, 3]}
    assert Reconfiguration(None, moved).copy_time_s(100.0) == 7.0  # busiest: f gets 300 + 400 bytes


def test_inter_stage_migration_recuts_every_node():
    old = place(_config(2, 2), ["a", "b", "c", "d"], 1)
    new = arrange(_config(4, 1), ["a", "b", "c", "d"], node_layers(old), 1)
    moved = copies(old, new, LAYERS, set("abcd"))
    # every node now holds one layer; a node keeps what it already had when it can
    assert all(len(node_layers(new)[n]) == 1 for n in new.nodes)
    assert sum(c.total_bytes for c in moved) <= 300 + 400  # at most the two layers no node held alone
    shrink = arrange(_config(2, 1), ["a", "b", "c", "d"], node_layers(old), 1)
    assert copies(old, shrink, LAYERS, set("abcd")) == ()  # dropping replicas moves nothing


def _copies_by_scan(old, new, layers, alive):
    """The transfers as first written: each missing layer from the live holder with the
    least bytes sent so far (then the first name), found by scanning every holder."""
    held = node_layers(old)
    holders: dict[int, list[str]] = {}
    for node, got in held.items():
        if node in alive:
            for layer in got:
                holders.setdefault(layer, []).append(node)
    load: dict[str, int] = {}
    out = []
    for node, need in node_layers(new).items():
        by_src: dict[str, list[int]] = {}
        for layer in sorted(need - held.get(node, frozenset())):
            if not holders.get(layer):
                return None
            src = min(holders[layer], key=lambda n: (load.get(n, 0), n))
            load[src] = load.get(src, 0) + layers[layer].copy_bytes
            by_src.setdefault(src, []).append(layer)
        out.extend((node, src, tuple(group)) for src, group in by_src.items())
    return tuple(out)


@settings(max_examples=150, deadline=None)
@given(
    old_shape=st.sampled_from([(1, 4), (2, 2), (4, 1), (2, 3), (4, 2), (1, 6)]),
    new_shape=st.sampled_from([(1, 4), (2, 2), (4, 1), (2, 3), (4, 2), (1, 6), (2, 4)]),
    sizes=st.lists(st.integers(1, 500), min_size=4, max_size=4),
    gpus=st.sampled_from([1, 2]),
    data=st.data(),
)
def test_copies_take_the_least_loaded_holder_as_a_scan_of_every_holder_does(old_shape, new_shape, sizes, gpus, data):
    layers = [_layer(b) for b in sizes]
    pool = [f"n{i}" for i in range(12)]
    old_nodes = data.draw(st.permutations(pool))[:12]
    old = place(_config(*old_shape), old_nodes, gpus)
    alive = set(data.draw(st.lists(st.sampled_from(pool), unique=True, min_size=1)))
    new = arrange(_config(*new_shape), data.draw(st.permutations(pool)), node_layers(old), gpus)
    assert new is not None
    moved = copies(old, new, layers, alive)
    expected = _copies_by_scan(old, new, layers, alive)
    assert (None if moved is None else tuple((c.dst_node, c.src_node, c.layers) for c in moved)) == expected


def test_a_lost_layer_cannot_be_migrated():
    old = place(_config(2, 1), ["a", "b"], 1)
    new = arrange(_config(2, 1), ["a", "c"], node_layers(old), 1)
    assert copies(old, new, LAYERS, {"a", "c"}) is None


# -- the liveput choice ----------------------------------------------------------------------
class _Search:
    """A one-stage grid search: width w runs an iteration in 12 / w s."""

    depths = (1,)

    def config(self, depth, width):
        return Grid(1, width, 1, 8, ((0, 4),), 12.0 / width, 0.0)

    def min_gpus(self, up_to):
        return 1


def _policy(stage_copy_s: float) -> ParcaePolicy:
    layers = [_layer(10)] * 4  # a stage (the whole model here) is 40 bytes
    return ParcaePolicy(
        _Search(),  # type: ignore[arg-type]
        layers,
        bandwidth_bytes_per_s=40.0 / stage_copy_s, gpus_per_node=1, checkpoints=CheckpointSchedule(),
        reconfigure_pause_s=1.0, max_nodes=4, settings=ParcaeSettings(interval_s=60.0, horizon=1, shapes_per_count=1),
    )  # fmt: skip


def test_liveput_keeps_the_shape_when_hits_are_cheap():
    # now 4 nodes, forecast 2. A hit costs half an iteration + 1 s + the stage (4 x 2.5 = 10 s).
    # Keep W4: 60 - 2 hits x 12.5 = 35 s at 1/3 it/s, then W4 -> W2 (1 s) 59 s at 1/6: 21.5.
    # Shrink now: 60 - 1 - 1 hit x 14 = 45 s at 1/6, then 60 s at 1/6: 17.5.
    policy = _policy(stage_copy_s=10.0)
    assert policy.liveput(_Search().config(1, 4), (4, 2)) == _Search().config(1, 4)


def test_liveput_migrates_ahead_of_a_forecast_shrink_when_hits_are_dear():
    # stage 25 s: keep W4: (60 - 2 x 27.5) / 3 + 59 / 6 = 11.5; shrink now: (60 - 1 - 29) / 6 + 10 = 15.
    policy = _policy(stage_copy_s=25.0)
    assert policy.liveput(_Search().config(1, 4), (4, 2)) == _Search().config(1, 2)


# -- the design in the simulator -------------------------------------------------------------
def _trace(events: list[tuple[float, str, str]], name: str = "inline") -> traces.Trace:
    return traces.Trace.from_tuples(sorted(events, key=lambda e: e[0]), name)


def _falling(nodes: int = 8, every_s: float = 300.0, removals: int = 4, end_s: float = 3 * 3600.0):
    events = [(0.0, "add", f"n{i}") for i in range(nodes)]
    events += [(600.0 + k * every_s, "remove", f"n{nodes - 1 - k}") for k in range(removals)]
    return events + [(end_s, "add", "last")]


def _run(trace: traces.Trace, **options):
    config = SimConfig.of(
        policy="parcae", model="GPT-2-ours", trace=trace.name, calibration="planner", design_options=options or None
    )
    return simulate(config, trace=trace)


def _decisions(result, before_s: float = float("inf")):
    return [(e.time_s, dict(e.detail)) for e in result.events if e.kind == "decision" and e.time_s < before_s]


def test_parcae_end_to_end_migrates_from_replicas_and_rolls_back_only_without_one():
    result = _run(_trace(_falling()))
    summary = result.summary
    assert summary.num_reconfigurations >= 1 and summary.avg_samples_per_s > 0
    decisions = _decisions(result)
    first_hit = next(d for _, d in decisions if d["event"] == "NodesRemoved")
    assert first_hit["actions"][0]["action"] == "Reinstantiate"  # 2 x 4 lost a replica: migrate live
    previous = None
    for _, d in decisions:
        if any(a["action"] == "RestartFromCheckpoint" for a in d["actions"]) and previous is not None:
            assert previous["width"] == 1  # only a grid with one replica of a stage loses it
        previous = d["plan"]
    assert summary.extra["rollbacks"] <= sum(1 for _, d in decisions if d["event"] == "NodesRemoved")
    ticks = [d for _, d in decisions if d["event"] == "IterationEnd"]
    assert ticks, "the interval clock woke the policy"
    assert len(ticks) <= 3 * 3600 / 60 + 1  # one wake per interval at most, never one per iteration


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.floats(700.0, 2400.0), st.lists(st.tuples(st.floats(0, 1), st.booleans()), min_size=1, max_size=4))
def test_no_decision_before_t_changes_with_the_trace_after_t(cut_s, changes):
    base = _falling(removals=5, every_s=250.0, end_s=3000.0)
    kept = [e for e in base if e[0] <= cut_s and e[2] != "last"]
    gone = {e[2] for e in kept if e[1] == "remove"}
    live = [e[2] for e in kept if e[1] == "add" and e[2] not in gone]
    later: list[tuple[float, str, str]] = []
    for k, (at, add) in enumerate(changes):  # anything at all after the cut
        t = cut_s + 1.0 + at * 500.0
        if add or not live:
            later.append((t, "add", f"new{k}"))
        else:
            later.append((t, "remove", live.pop(k % len(live))))
    a = _run(_trace(base, "a"))
    b = _run(_trace(kept + later + [(3000.0, "add", "last")], "b"))
    assert _decisions(a, cut_s) == _decisions(b, cut_s)


def test_parcae_is_simulator_only_and_listed_so(capsys):
    with pytest.raises(DesignError, match="does not run on the real backend"):
        registry.resolve("parcae", {}, "real")
    assert main(["designs", "--json"]) == 0
    listed = {d["name"]: d for d in json.loads(capsys.readouterr().out)}
    assert listed["parcae"]["runs_on"] == ["simulator"]
    assert {o["name"] for o in listed["parcae"]["options"]} >= {"interval_s", "horizon_intervals", "window_intervals"}
