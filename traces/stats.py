"""Summary statistics of a trace: what `ooblab traces info` prints and the spot fit compares.

Definitions (one place, so the CLI, the fit and the docs agree):

* The live-node count is a step function from the first event to the trace's end (its
  horizon when the source gives one, else its last event), sampled once per distinct
  timestamp *after all events sharing that timestamp*.
* ``duration_s`` = end - first event time.
* ``min_nodes`` / ``max_nodes`` are the extremes of that step function (every sample,
  including the value after the last timestamp). ``mean_nodes`` is its time-weighted mean
  over [first, end]; a trace whose events all share one timestamp has mean = that count.
* A *burst* is the set of removals that share one timestamp (real traces are logged at
  minute or poll resolution, so "at the same time" means "within one sample").
  ``bursts_per_day`` = bursts / duration in days: for a failure trace, where one
  interruption is one burst, interruptions per day.
* A node's *lifetime* runs from its add to its remove; nodes still live at the end are
  censored and left out, so ``median_lifetime_s`` is the median of completed lifetimes.

The functions take any sequence of objects with ``time_s``, ``kind`` and ``node`` attributes
(in time order, already validated), so they do not depend on `traces.model`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Protocol

import numpy as np


class EventLike(Protocol):
    """Read-only, so frozen dataclasses such as `TraceEvent` satisfy it."""

    @property
    def time_s(self) -> float: ...
    @property
    def kind(self) -> str: ...
    @property
    def node(self) -> str: ...


@dataclass(frozen=True)
class TraceStats:
    """Summary of one trace (see the module docstring for the exact definitions)."""

    name: str
    start_s: float
    end_s: float
    duration_s: float
    num_events: int
    num_adds: int
    num_removes: int
    num_nodes: int  # distinct node names
    initial_nodes: int
    final_nodes: int
    min_nodes: int
    max_nodes: int
    mean_nodes: float
    removals_per_hour: float  # NaN when the duration is 0 and there are removals
    num_bursts: int
    largest_burst: int
    median_lifetime_s: float  # NaN when no node was removed
    bursts_per_day: float  # NaN when the duration is 0 and there are removals

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready dict (NaN becomes None)."""
        out: dict[str, object] = {}
        for key, value in asdict(self).items():
            if isinstance(value, float) and math.isnan(value):
                value = None
            out[key] = value
        return out


def step_counts(events: Sequence[EventLike]) -> tuple[np.ndarray, np.ndarray]:
    """(times_s, live_nodes): one sample per distinct timestamp, after all its events."""
    times: list[float] = []
    live_counts: list[int] = []
    live = 0
    for event in events:
        live += 1 if event.kind == "add" else -1
        if times and times[-1] == event.time_s:
            live_counts[-1] = live
        else:
            times.append(event.time_s)
            live_counts.append(live)
    return np.asarray(times, dtype=float), np.asarray(live_counts, dtype=np.int64)


def burst_sizes(events: Sequence[EventLike]) -> list[int]:
    """Number of removals at each timestamp that has at least one, in time order."""
    sizes: list[int] = []
    last_time: float | None = None
    for event in events:
        if event.kind != "remove":
            continue
        if sizes and event.time_s == last_time:
            sizes[-1] += 1
        else:
            sizes.append(1)
            last_time = event.time_s
    return sizes


def lifetimes_s(events: Sequence[EventLike]) -> list[float]:
    """Completed lifetimes (remove time - add time), in removal order."""
    added_at: dict[str, float] = {}
    out: list[float] = []
    for event in events:
        if event.kind == "add":
            added_at[event.node] = event.time_s
        else:
            out.append(event.time_s - added_at.pop(event.node))
    return out


def time_weighted_mean(times_s: np.ndarray, values: np.ndarray) -> float:
    """Mean of a right-continuous step function over [times[0], times[-1]]."""
    if len(times_s) == 0:
        return 0.0
    span = float(times_s[-1] - times_s[0])
    if span <= 0:
        return float(values[-1])
    return float(np.sum(np.diff(times_s) * values[:-1]) / span)


def compute_stats(events: Sequence[EventLike], name: str, *, stop_s: float | None = None) -> TraceStats:
    """All summary figures of a validated, time-sorted event sequence ending at ``stop_s``
    (default: its last event)."""
    times, live = step_counts(events)
    if len(times) and stop_s is not None and stop_s > times[-1]:
        times, live = np.append(times, stop_s), np.append(live, live[-1])
    num_adds = sum(1 for e in events if e.kind == "add")
    num_removes = len(events) - num_adds
    bursts = burst_sizes(events)
    lifetimes = lifetimes_s(events)
    if len(times) == 0:
        start = end = 0.0
    else:
        start, end = float(times[0]), float(times[-1])
    duration = end - start
    if duration > 0:
        per_hour = num_removes / (duration / 3600.0)
        per_day = len(bursts) / (duration / 86400.0)
    else:
        per_hour = per_day = 0.0 if num_removes == 0 else math.nan
    return TraceStats(
        name=name,
        start_s=start,
        end_s=end,
        duration_s=duration,
        num_events=len(events),
        num_adds=num_adds,
        num_removes=num_removes,
        num_nodes=len({e.node for e in events}),
        initial_nodes=int(live[0]) if len(live) else 0,
        final_nodes=int(live[-1]) if len(live) else 0,
        min_nodes=int(live.min()) if len(live) else 0,
        max_nodes=int(live.max()) if len(live) else 0,
        mean_nodes=time_weighted_mean(times, live),
        removals_per_hour=per_hour,
        num_bursts=len(bursts),
        largest_burst=max(bursts, default=0),
        median_lifetime_s=float(np.median(lifetimes)) if lifetimes else math.nan,
        bursts_per_day=per_day,
    )
