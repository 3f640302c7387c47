"""Trace references: one string names each trace an experiment uses.

A run's parameters name its trace by a reference that does not depend on where the
reference data lives, so result keys are the same on every machine; `resolve` turns it
into a `traces.Trace` when the run starts (cached per process):

    fixed:... | spot:...      a generator spec of `traces.from_spec`
    shared:REL/PATH           a file under shared/traces (loaded with repair; victims of
                              count-log decreases from seed 0)
    gen:profile=P,nodes=N,hours=H,rate=R[,burst=B],seed=S
                              the spot-market generator (`traces.spot_market`) with profile
                              P's burst rate times R and, with B, mean burst size B at the
                              same removal rate (burst size - 1 stays negative binomial
                              with the profile's n)
    REF|rescale=LO-HI         live count mapped min-max onto [LO, HI] (how the artifact made
                              its scaled spot traces)
    REF|peak=N                live count scaled in proportion so that its peak is N nodes
                              (relative drops kept; used to put every real trace on the
                              paper's 30-node cluster)

The paper's traces: `paper_frequency` (6h ... 10m, exactly the artifact's files) and
`artifact_spot` (the two scaled spot traces, or a labelled generated look-alike when
../shared is absent).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

import traces
from traces.counts import counts_to_events
from traces.errors import TraceError
from traces.spot import get_profile

from .paths import shared_dir

FREQUENCIES = ("6h", "3h", "1h", "30m", "10m")


@dataclass(frozen=True)
class TraceChoice:
    """A trace for an experiment: its reference, a label for figures, and whether it is a
    generated stand-in for a real trace that is not available here."""

    ref: str
    label: str
    generated: bool = False
    key: str = ""  # a short name for tick labels


@dataclass(frozen=True)
class RealTrace:
    key: str
    path: str  # relative to shared/traces
    label: str
    lookalike: str | None  # spot profile standing in when the file is absent (None: skipped)


ARTIFACT_SPOT = {
    # the file named "gcp" is the artifact's rescaled g4dn trace (see traces/README)
    "gcp": RealTrace("gcp", "oobleck-artifact/scaled/scale_gcp-trace.csv", "GCP trace (scaled 15-30)", "g4dn"),
    "p3": RealTrace("p3", "oobleck-artifact/scaled/scale_p3-trace.csv", "EC2 P3 trace (scaled 15-30)", "p3"),
}

REAL_TRACES = (
    RealTrace("aws-p3", "oobleck-artifact/p3-trace.csv", "AWS p3, 11 h", "p3"),
    RealTrace("aws-g4dn", "oobleck-artifact/g4dn-trace.csv", "AWS g4dn, 11 h", "g4dn"),
    RealTrace("gcp-a100", "bamboo/traces/gcloud/a100x1-east1b.txt", "GCP A100, 27 h", "gcp-a100"),
    RealTrace(
        "g4dn-1c",
        "bamboo/doc/data/aws-spot-instances-g4dn-xlarge-us-east-1c-2020-11-20-1930-to-2020-11-21-2200.csv",
        "AWS g4dn 1c, 19 h",
        None,
    ),
    RealTrace(
        "g4dn-1d",
        "bamboo/doc/data/aws-spot-instances-g4dn-xlarge-us-east-1d-2020-11-23-1730-to-2020-11-24-1530.csv",
        "AWS g4dn 1d, 6 h",
        None,
    ),
    RealTrace(
        "p2-1e",
        "bamboo/doc/data/aws-spot-instances-p2-xlarge-us-east-1e-2020-11-23-1700-to-2020-11-24-0700.csv",
        "AWS p2 1e, 19 h",
        None,
    ),
    RealTrace(
        "p2-3day", "bamboo/doc/data/aws-spot-instances-p2-xlarge-2020-11-20-to-2020-11-23.csv", "AWS p2, 3 days", None
    ),
)


def paper_frequency(interval: str) -> TraceChoice:
    """The paper's fixed-frequency trace: 30 nodes, one removal per interval, 15 times."""
    return TraceChoice(f"fixed:interval={interval},hour_decimals=3", interval)


def artifact_spot(name: str, shared: Path | None) -> TraceChoice:
    """One of the paper's two scaled spot traces, or its generated look-alike."""
    if name not in ARTIFACT_SPOT:
        raise KeyError(f"unknown artifact spot trace {name!r}; known: {', '.join(ARTIFACT_SPOT)}")
    entry = ARTIFACT_SPOT[name]
    if shared is not None and (shared / "traces" / entry.path).exists():
        return TraceChoice(f"shared:{entry.path}", entry.label)
    return TraceChoice(
        f"spot:profile={entry.lookalike},seed=0|rescale=15-30",
        f"{entry.label.split(' (')[0]} (generated look-alike: {entry.lookalike})",
        True,
    )


def real_traces(shared: Path | None, *, peak: int = 30) -> list[TraceChoice]:
    """Every real trace of `REAL_TRACES` scaled to `peak` nodes; without ../shared, the
    generated look-alikes of those that have one."""
    out = []
    for entry in REAL_TRACES:
        if shared is not None and (shared / "traces" / entry.path).exists():
            out.append(TraceChoice(f"shared:{entry.path}|peak={peak}", entry.label, key=entry.key))
        elif entry.lookalike is not None:
            out.append(
                TraceChoice(
                    f"spot:profile={entry.lookalike},seed=0|peak={peak}",
                    f"{entry.label} (generated look-alike)",
                    True,
                    key=f"{entry.key} (gen.)",
                )
            )
    return out


def generated(
    profile: str, *, nodes: int, hours: float, rate: float = 1.0, burst: float | None = None, seed: int = 0
) -> TraceChoice:
    parts = [f"profile={profile}", f"nodes={nodes}", f"hours={hours:g}", f"rate={rate:g}"]
    if burst is not None:
        parts.append(f"burst={burst:g}")
    parts.append(f"seed={seed}")
    return TraceChoice(
        "gen:" + ",".join(parts), f"{profile} x{rate:g}" + (f", burst {burst:g}" if burst is not None else ""), True
    )


def on_demand(nodes: int, hours: float) -> TraceChoice:
    """`nodes` nodes for `hours` hours, no preemption: the run ends at the only removal."""
    return TraceChoice(f"fixed:interval={hours:g}h,nodes={nodes},removals=1", f"on-demand {nodes} nodes")


# -- resolution ----------------------------------------------------------------------------
def _keys(text: str, what: str) -> dict[str, str]:
    keys = {}
    for item in filter(None, text.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise TraceError(f"{item!r} is not key=value in {what}")
        keys[key.strip()] = value.strip()
    return keys


def _generated(body: str) -> traces.Trace:
    keys = _keys(body, "gen:")
    unknown = set(keys) - {"profile", "nodes", "hours", "rate", "burst", "seed"}
    if unknown:
        raise TraceError(f"unknown key(s) {', '.join(sorted(unknown))} in gen:{body}")
    profile = get_profile(keys.get("profile", "p3"))
    rate = float(keys.get("rate", 1.0))
    mean_burst = 1.0 + profile.burst_size_n * (1.0 - profile.burst_size_p) / profile.burst_size_p
    if "burst" in keys:
        burst = float(keys["burst"])
        if not burst >= 1.0:
            raise TraceError(f"burst must be >= 1 (a burst removes at least one node), got {burst}")
        # same removals per hour, bursts of mean size `burst`
        p = min(profile.burst_size_n / (profile.burst_size_n + burst - 1.0), 1.0 - 1e-12)  # numpy wants p < 1
        profile = replace(profile, burst_size_p=p, burst_rate_per_h=profile.burst_rate_per_h * mean_burst / burst)
    profile = replace(profile, burst_rate_per_h=profile.burst_rate_per_h * rate)
    nodes, hours = int(keys.get("nodes", profile.capacity_nodes)), float(keys.get("hours", profile.duration_h))
    rng = np.random.default_rng(int(keys.get("seed", 0)))
    return traces.spot_market(nodes, hours, rng=rng, profile=profile, name=f"gen-{body}")


def _peak(trace: traces.Trace, peak: int) -> traces.Trace:
    frame = trace.live_counts()
    top = int(frame.live_nodes.max())
    if top <= 0:
        raise TraceError(f"trace {trace.name!r} never has a live node")
    counts = [int(math.floor(c * peak / top + 0.5)) for c in frame.live_nodes.tolist()]
    events = counts_to_events(list(zip(frame.time_s.tolist(), counts)), np.random.default_rng(0))
    return traces.Trace(tuple(events), f"{trace.name}@peak{peak}", trace.horizon_s)


@lru_cache(maxsize=128)
def resolve(ref: str) -> traces.Trace:
    """The trace a reference names (see the module docstring)."""
    base, *modifiers = [part.strip() for part in ref.split("|")]
    if base.startswith("shared:"):
        shared = shared_dir()
        if shared is None:
            raise TraceError(f"{ref}: ../shared is not available here (set OOBLAB_SHARED)")
        trace = traces.load(shared / "traces" / base[len("shared:") :], repair=True, rng=np.random.default_rng(0))
    elif base.startswith("gen:"):
        trace = _generated(base[len("gen:") :])
    else:
        trace = traces.from_spec(base, rng=np.random.default_rng(0))
    for modifier in modifiers:
        key, _, value = modifier.partition("=")
        if key == "rescale":
            lo, _, hi = value.partition("-")
            trace = traces.rescale(trace, int(lo), int(hi), rng=np.random.default_rng(0))
        elif key == "peak":
            trace = _peak(trace, int(value))
        else:
            raise TraceError(f"unknown trace modifier {modifier!r} in {ref!r} (known: rescale=LO-HI, peak=N)")
    return trace


def stats(trace: traces.Trace) -> dict[str, float]:
    """The trace facts experiments plot against, prefixed `trace_`."""
    s = trace.stats()
    return {
        "trace_duration_h": s.duration_s / 3600.0,
        "trace_removals_per_hour": s.removals_per_hour,
        "trace_mean_nodes": s.mean_nodes,
        "trace_min_nodes": s.min_nodes,
        "trace_max_nodes": s.max_nodes,
        "trace_mean_burst": s.num_removes / s.num_bursts if s.num_bursts else 0.0,
        "trace_largest_burst": s.largest_burst,
    }
