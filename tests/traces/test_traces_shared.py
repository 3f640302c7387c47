"""Every loader on every real trace in ../shared/traces, checked against independent parsing."""

from __future__ import annotations

import fnmatch
import math

import numpy as np
import pytest

import traces
from traces.load import FORMATS

import _traces_oracle as oracle

# (glob relative to shared/traces, format to name, x unit in seconds for count CSVs);
# the first matching row describes a file.
CATALOG = [
    ("oobleck-artifact/*.csv", "events", None),
    ("oobleck-artifact/scaled/*.csv", "events", None),
    ("bamboo/traces/*.csv", "events", None),
    ("bamboo/traces/gcloud/*.txt", "gcp-counts", None),
    ("bamboo/doc/data/*_scaled.csv", "counts-h", 3600.0),
    ("bamboo/doc/data/aws-spot-instances-p2-xlarge-2020-11-20-to-2020-11-23.csv", "counts-h", 3600.0),
    ("bamboo/doc/data/*.csv", "counts-s", 1.0),
    ("parcae/p3.csv", "counts-ms", 0.001),
    ("parcae/*/*.txt", "windows", None),
]
NOT_TRACES = ("*PROVENANCE.txt", "README.md", "profiles/*")
INFERRED_UNIT = {"counts-h": "hours", "counts-s": "seconds", "counts-ms": "milliseconds"}


def shared_files(shared_dir):
    root = shared_dir / "traces"
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if not any(fnmatch.fnmatch(rel, pattern) for pattern in NOT_TRACES):
            yield rel, path


def describe(rel):
    for pattern, fmt, unit_s in CATALOG:
        if fnmatch.fnmatch(rel, pattern) and rel.count("/") == pattern.count("/"):
            return fmt, unit_s
    return None


def expected_kinds(path, fmt, unit_s):
    """(events as (time, kind, node) or None, (time, kind) list, rows repair must drop)."""
    if fmt == "events":
        events = oracle.read_event_csv(path)
        return events, [(t, k) for t, k, _ in events], 0
    if fmt == "windows":
        events = oracle.read_windows(path)
        return events, [(t, k) for t, k, _ in events], 0
    samples = oracle.read_gcp_counts(path) if fmt == "gcp-counts" else oracle.read_x_counts(path, unit_s)
    kept = oracle.drop_repeated_rows(samples)
    return None, oracle.events_from_counts(kept), len(samples) - len(kept)


def test_every_shared_file_is_described(shared_dir):
    files = list(shared_files(shared_dir))
    assert len(files) >= 30
    unknown = [rel for rel, _ in files if describe(rel) is None]
    assert not unknown, f"add these to CATALOG: {unknown}"


def test_each_shared_file_loads_and_matches_independent_figures(shared_dir):
    for rel, path in shared_files(shared_dir):
        fmt, unit_s = describe(rel)
        events, kinds, repeated = expected_kinds(path, fmt, unit_s)
        if repeated:  # strict mode names the first repeated row, repair drops them all
            with pytest.raises(traces.TraceError, match=r":\d+: exact duplicate"):
                traces.load(path, fmt)
        trace, report = traces.load_with_report(path, fmt, repair=bool(repeated))
        assert len(report.dropped_lines) == repeated, rel
        assert [(e.time_s, e.kind) for e in trace.events] == kinds, rel
        if events is not None:
            assert [(e.time_s, e.kind, e.node) for e in trace.events] == events, rel
        want = oracle.summary(kinds)
        got = trace.stats()
        for key, value in want.items():
            assert getattr(got, key) == pytest.approx(value, rel=1e-12, abs=1e-9), (rel, key)
        frame = trace.live_counts()
        assert list(zip(frame.time_s, frame.live_nodes)) == oracle.count_steps(kinds), rel


def test_auto_detection_agrees_with_the_named_format(shared_dir):
    for rel, path in shared_files(shared_dir):
        fmt, _ = describe(rel)
        named = traces.load(path, fmt, repair=True)
        auto, report = traces.load_with_report(path, repair=True)
        assert report.detected
        if fmt.startswith("counts-"):
            assert report.fmt == "counts", rel
            if len(named) and named.duration_s > 0:  # one-row files carry no unit evidence
                assert any(INFERRED_UNIT[fmt] in note for note in report.notes), (rel, report.notes)
        else:
            assert report.fmt == fmt, rel
        assert auto.events == named.events, rel


def test_every_loader_on_every_file_loads_or_fails_cleanly(shared_dir):
    """Naming the wrong format must give a TraceError, never another exception."""
    outcomes = {}
    for rel, path in shared_files(shared_dir):
        for fmt in FORMATS:
            try:
                traces.load(path, fmt, repair=True)
                outcomes[rel, fmt] = "ok"
            except traces.TraceError as exc:
                assert str(path) in str(exc)
                outcomes[rel, fmt] = "error"
    for rel, _ in shared_files(shared_dir):
        fmt, _ = describe(rel)
        assert outcomes[rel, fmt] == "ok"
        wrong = "windows" if fmt != "windows" else "events"
        assert outcomes[rel, wrong] == "error"


def test_count_series_victims_follow_the_seed(shared_dir):
    path = shared_dir / "traces/bamboo/traces/gcloud/a100x1-east1b.txt"
    first = traces.load(path, rng=np.random.default_rng(7))
    again = traces.load(path, rng=np.random.default_rng(7))
    other = traces.load(path, rng=np.random.default_rng(8))
    assert first == again
    assert first != other
    assert first.live_counts().equals(other.live_counts())
    assert traces.load(path) == traces.load(path)  # the default seed is fixed


def test_parcae_counts_are_the_p3_event_trace(shared_dir):
    """Provenance says parcae/p3.csv is the live count after each p3 event: check it."""
    counts = traces.load(shared_dir / "traces/parcae/p3.csv")
    events = traces.load(shared_dir / "traces/oobleck-artifact/p3-trace.csv")
    assert counts.live_counts().equals(events.live_counts())
    assert math.isclose(counts.stats().mean_nodes, events.stats().mean_nodes)
