"""Trace references resolve to the traces they describe."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import traces
from experiments import tracesrc
from traces.errors import TraceError
from traces.stats import burst_sizes

SHARED = Path(__file__).resolve().parents[3] / "shared"
needs_shared = pytest.mark.skipif(not (SHARED / "traces").is_dir(), reason="../shared is absent")


@pytest.fixture
def shared(monkeypatch):
    monkeypatch.setenv("OOBLAB_SHARED", str(SHARED))
    tracesrc.resolve.cache_clear()
    yield SHARED
    tracesrc.resolve.cache_clear()


@needs_shared
@pytest.mark.parametrize("interval", tracesrc.FREQUENCIES)
def test_paper_frequency_is_the_artifact_file(interval, shared):
    mine = tracesrc.resolve(tracesrc.paper_frequency(interval).ref)
    theirs = traces.load(shared / "traces" / "oobleck-artifact" / f"{interval}.csv")
    assert [(e.time_s, e.kind) for e in mine.events] == [(e.time_s, e.kind) for e in theirs.events]


@needs_shared
def test_artifact_spot_reads_the_scaled_file(shared):
    choice = tracesrc.artifact_spot("p3", shared)
    assert not choice.generated and choice.ref == "shared:oobleck-artifact/scaled/scale_p3-trace.csv"
    trace = tracesrc.resolve(choice.ref)
    assert (trace.stats().min_nodes, trace.stats().max_nodes) == (15, 30)


def test_lookalike_is_rescaled_to_the_paper_range():
    choice = tracesrc.artifact_spot("gcp", None)
    assert choice.generated and "look-alike" in choice.label
    stats = tracesrc.resolve(choice.ref).stats()
    assert (stats.min_nodes, stats.max_nodes) == (15, 30)


def test_peak_scaling_keeps_relative_drops():
    rows = [(0.0, "add", f"n{i}") for i in range(10)] + [
        (100.0, "remove", "n0"),
        (200.0, "remove", "n1"),
        (300.0, "add", "m"),
    ]
    base = traces.Trace.from_tuples(rows, "ten")
    scaled = tracesrc._peak(base, 30)
    counts = scaled.live_counts()
    assert counts["live_nodes"].tolist() == [30, 27, 24, 27]
    assert counts["time_s"].tolist() == [0.0, 100.0, 200.0, 300.0]


def test_generated_bursts_hit_their_mean_at_a_constant_removal_rate():
    rates, means = {}, {}
    for burst in (1.0, 4.0):
        runs = [
            tracesrc.resolve(tracesrc.generated("p3", nodes=30, hours=12, rate=0.5, burst=burst, seed=s).ref)
            for s in range(6)
        ]
        means[burst] = np.mean([np.mean(burst_sizes(t.events)) for t in runs])
        rates[burst] = np.mean([t.stats().removals_per_hour for t in runs])
    assert means[1.0] == 1.0
    assert means[4.0] == pytest.approx(4.0, rel=0.3)  # bursts are capped by the live nodes
    assert rates[4.0] == pytest.approx(rates[1.0], rel=0.3)


def test_generated_rate_scales_removals():
    def removals(rate):
        return np.mean(
            [
                tracesrc.resolve(tracesrc.generated("p3", nodes=30, hours=12, rate=rate, seed=s).ref)
                .stats()
                .removals_per_hour
                for s in range(4)
            ]
        )

    assert removals(0.25) < 0.5 * removals(1.0)


def test_on_demand_has_no_preemption_before_its_end():
    trace = tracesrc.resolve(tracesrc.on_demand(30, 12).ref)
    removes = [e for e in trace.events if e.kind == "remove"]
    assert len(removes) == 1 and removes[0].time_s == trace.end_s == 12 * 3600.0
    assert trace.stats().max_nodes == 30


def test_bad_references_are_named():
    with pytest.raises(TraceError, match="unknown trace modifier 'zoom=2'"):
        tracesrc.resolve("fixed:interval=1h|zoom=2")
    with pytest.raises(TraceError, match="unknown key"):
        tracesrc.resolve("gen:profile=p3,speed=2")
    with pytest.raises(TraceError, match="burst must be >= 1"):
        tracesrc.resolve("gen:profile=p3,burst=0.5")


def test_shared_reference_without_shared(monkeypatch):
    monkeypatch.setenv("OOBLAB_SHARED", "")
    tracesrc.resolve.cache_clear()
    with pytest.raises(TraceError, match="not available here"):
        tracesrc.resolve("shared:oobleck-artifact/1h.csv")
    tracesrc.resolve.cache_clear()
