"""Independent reference computations for the traces tests.

Plain csv / json / datetime code, written without looking at the package's parsers, so that
a bug in the package cannot also be in the expected values. Everything returns either raw
events ``(time_s, kind, node)`` or count samples ``(time_s, count)`` in file order.
"""

from __future__ import annotations

import csv
import json
import math
from datetime import datetime
from fractions import Fraction
from pathlib import Path


def read_event_csv(path: Path) -> list[tuple[float, str, str]]:
    """time_ms,kind,node rows, no header (the artifact files)."""
    with open(path, newline="") as handle:
        return [(int(t) / 1000, k, n) for t, k, n in csv.reader(handle)]


def read_x_counts(path: Path, seconds_per_unit: float) -> list[tuple[float, int]]:
    with open(path, newline="") as handle:
        return [(float(Fraction(x) * Fraction(seconds_per_unit)), int(c)) for x, c in csv.reader(handle)]


def read_gcp_counts(path: Path) -> list[tuple[float, int]]:
    stamped = []
    for raw in path.read_text().splitlines():
        day, clock, count = (part.strip() for part in raw.split(","))
        stamped.append((datetime.fromisoformat(f"{day}T{clock}"), int(count)))
    origin = stamped[0][0]
    return [((s - origin).total_seconds(), c) for s, c in stamped]


def read_windows(path: Path) -> list[tuple[float, str, str]]:
    out: list[tuple[float, str, str]] = []
    for raw in path.read_text().splitlines():
        t_ms, action, body = json.loads(raw)
        if action in ("add", "remove"):
            out.extend((t_ms / 1000, action, node) for node in body["nodes"])
    return out


def drop_repeated_rows(samples: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """Remove a sample equal to the one right before it (what repair mode must drop)."""
    return [s for i, s in enumerate(samples) if i == 0 or s != samples[i - 1]]


def events_from_counts(samples: list[tuple[float, int]]) -> list[tuple[float, str]]:
    """(time, kind) of the events a count series implies, row by row (victims aside)."""
    out: list[tuple[float, str]] = []
    live = 0
    for t, c in samples:
        kind = "add" if c > live else "remove"
        out.extend((t, kind) for _ in range(abs(c - live)))
        live = c
    return out


def count_steps(kinds: list[tuple[float, str]]) -> list[tuple[float, int]]:
    """Live count after all events of each distinct timestamp."""
    steps: list[tuple[float, int]] = []
    live = 0
    for t, kind in kinds:
        live += 1 if kind == "add" else -1
        if steps and steps[-1][0] == t:
            steps[-1] = (t, live)
        else:
            steps.append((t, live))
    return steps


def summary(kinds: list[tuple[float, str]]) -> dict[str, float]:
    """The info figures, computed the slow obvious way with exact fractions."""
    steps = count_steps(kinds)
    times = [Fraction(t) for t, _ in steps]
    lives = [c for _, c in steps]
    span = times[-1] - times[0]
    if span:
        area = sum((times[i + 1] - times[i]) * lives[i] for i in range(len(steps) - 1))
        mean = float(area / span)
    else:
        mean = float(lives[-1])
    removes = sum(1 for _, k in kinds if k == "remove")
    bursts: dict[float, int] = {}
    for t, k in kinds:
        if k == "remove":
            bursts[t] = bursts.get(t, 0) + 1
    return {
        "duration_s": float(span),
        "num_adds": len(kinds) - removes,
        "num_removes": removes,
        "min_nodes": min(lives),
        "max_nodes": max(lives),
        "mean_nodes": mean,
        "final_nodes": lives[-1],
        "initial_nodes": lives[0],
        "largest_burst": max(bursts.values(), default=0),
        # undefined (NaN) when removals happen in a trace of zero length
        "removals_per_hour": removes / (float(span) / 3600) if span else (math.nan if removes else 0.0),
    }


def lifetimes(events: list[tuple[float, str, str]]) -> list[float]:
    born: dict[str, float] = {}
    out = []
    for t, k, n in events:
        if k == "add":
            born[n] = t
        else:
            out.append(t - born.pop(n))
    return out
