"""Pure transformations of a trace; each returns a new, validated `Trace`.

* `rescale`: map the live count min-max onto [lo, hi] on the same timestamps, the way the
  Oobleck artifact made its ``scaled/`` traces (15..30 nodes): the target at each timestamp is
  ``lo + floor((count - min) * (hi - lo) / (max - min))`` in exact integer arithmetic (the
  published files truncate; `tests/traces` checks both against this formula), then realised
  with fresh node names and seeded random victims, as for count series.
* `window`: the part between two times, starting from the nodes live at the start.
* `compress`: divide every time by a factor (the real backend replays faster than real time).
* `cap`: never more than ``max_nodes`` live; surplus arrivals wait (or are dropped).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .counts import counts_to_events
from .errors import TraceError
from .model import Trace, TraceEvent


def _check_count(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise TraceError(f"{what} must be a whole number >= 0, got {value!r}")
    return int(value)


def rescaled_counts(counts: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Min-max map of integer counts onto [lo, hi], truncating (a constant series maps to hi)."""
    low, high = int(counts.min()), int(counts.max())
    if high == low:
        return np.full(len(counts), hi, dtype=np.int64)
    return np.array([lo + (int(c) - low) * (hi - lo) // (high - low) for c in counts], dtype=np.int64)


def rescale(trace: Trace, lo: int, hi: int, *, rng: np.random.Generator | None = None) -> Trace:
    """The trace's live count mapped onto [lo, hi] on the same timestamps.

    ``rng`` chooses which nodes leave when the target falls (default: seed 0).
    """
    lo, hi = _check_count(lo, "lo"), _check_count(hi, "hi")
    if lo > hi:
        raise TraceError(f"rescale range is empty: lo={lo} > hi={hi}")
    if not trace.events:
        return Trace((), trace.name, trace.horizon_s)
    frame = trace.live_counts()
    targets = rescaled_counts(frame.live_nodes.to_numpy(), lo, hi)
    generator = rng if rng is not None else np.random.default_rng(0)
    samples = list(zip(frame.time_s.tolist(), targets.tolist()))
    return Trace(tuple(counts_to_events(samples, generator)), f"{trace.name}@{lo}-{hi}", trace.horizon_s)


def window(trace: Trace, start_s: float, end_s: float, *, rebase: bool = True) -> Trace:
    """Events in (start_s, end_s], after adds at ``start_s`` of the nodes live then.

    The nodes live at ``start_s`` (after all its events) are added at ``start_s``; with
    ``rebase`` (the default) times are shifted so that the window starts at 0.
    """
    if not (math.isfinite(start_s) and math.isfinite(end_s)) or start_s < 0 or end_s < start_s:
        raise TraceError(f"window needs 0 <= start_s <= end_s, got {start_s!r}, {end_s!r}")
    shift = start_s if rebase else 0.0
    events = [TraceEvent(start_s - shift, "add", node) for node in trace.nodes_at(start_s)]
    events += [replace(e, time_s=e.time_s - shift) for e in trace.events if start_s < e.time_s <= end_s]
    # the window observes up to its end, or to the trace's own end if that comes first
    horizon_s = max(min(end_s, trace.stop_s), start_s) - shift
    return Trace(tuple(events), f"{trace.name}[{start_s:g}-{end_s:g}s]", horizon_s)


def compress(trace: Trace, factor: float) -> Trace:
    """Every time divided by ``factor`` (> 0): factor 60 replays an hour in a minute."""
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not (math.isfinite(factor) and factor > 0):
        raise TraceError(f"compression factor must be a finite number > 0, got {factor!r}")
    events = tuple(replace(e, time_s=e.time_s / factor) for e in trace.events)
    horizon_s = None if trace.horizon_s is None else max(trace.horizon_s / factor, events[-1].time_s if events else 0.0)
    return Trace(events, f"{trace.name}/{factor:g}", horizon_s)


def cap(trace: Trace, max_nodes: int, *, backfill: bool = True) -> Trace:
    """At most ``max_nodes`` live at any time.

    Arrivals are admitted after all events of their timestamp, so removals at a timestamp
    make room for additions at it. With ``backfill`` (the default) an arrival that finds the
    cluster full waits, in FIFO order, for as long as it is live in the original trace, and
    joins when a slot frees: the live count is then exactly ``min(original, max_nodes)`` at
    every timestamp. Without ``backfill`` it is refused for good (its later removal too).
    """
    max_nodes = _check_count(max_nodes, "max_nodes")
    live: set[str] = set()
    waiting: dict[str, None] = {}  # an insertion-ordered set: the FIFO queue
    out: list[TraceEvent] = []
    events = trace.events
    i = 0
    while i < len(events):
        t = events[i].time_s
        arrivals: dict[str, None] = waiting if backfill else {}
        while i < len(events) and events[i].time_s == t:
            e = events[i]
            i += 1
            if e.kind == "add":
                arrivals[e.node] = None
            elif e.node in live:
                live.remove(e.node)
                out.append(e)
            else:  # it never got in: forget it
                arrivals.pop(e.node, None)
        while arrivals and len(live) < max_nodes:
            node = next(iter(arrivals))
            del arrivals[node]
            live.add(node)
            out.append(TraceEvent(t, "add", node))
    return Trace(tuple(out), f"{trace.name}<={max_nodes}", trace.horizon_s)
