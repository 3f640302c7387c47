"""Node-count series: logs of "how many nodes are live", turned into add / remove events.

Formats (the time column differs, the count column is a whole number >= 0):

* ``gcp-counts``: ``YYYY-MM-DD, HH:MM:SS, count`` (Bamboo's GCP A100 log);
* ``counts-s`` / ``counts-h`` / ``counts-ms``: ``x,count`` with x in seconds, hours or
  milliseconds since trace start (Bamboo's 2020 AWS step functions, Parcae's ``p3.csv``);
  ``counts`` reads the unit from a header (``time_ms``, ``hours``, ...) or infers it and
  says so in the load report;
* ``iso-counts``: ``2021-07-26T18:42:00Z,count`` (ISO-8601, with or without a header).

Absolute timestamps become seconds since the earliest row. Rows sharing a timestamp are a
vertical step: each row's change is applied in file order, so ``16 -> 15 -> 16`` at one
instant is a removal and an addition (a node replaced), and the live count after the
timestamp is that of its last row. The first row's count becomes that many additions.
Increases add fresh nodes (``node1``, ``node2``, ... in order of arrival, never reused);
decreases remove nodes chosen uniformly at random among the live ones with the given
seeded generator, so a load is reproducible for a given seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal

import numpy as np

from .errors import TraceError
from .model import TraceEvent
from .rows import (
    Row,
    is_number,
    parse_count,
    parse_decimal,
    parse_time,
    split_fields,
    unit_from_header,
)

HOURS_MAX_FOR_INFERENCE = Decimal(24 * 30)  # decimal x up to 30 days reads as hours
SECONDS_MAX_FOR_INFERENCE = Decimal(30 * 86400)  # whole x beyond 30 days reads as ms


def infer_unit(texts: Sequence[str], values: Sequence[Decimal]) -> tuple[str, str]:
    """Guess the unit of an ``x`` column; returns (unit, the reason, for the report).

    Decimal x no larger than 720 reads as hours (the ``_scaled`` files write hours with
    three decimals); whole x beyond 30 days of seconds reads as milliseconds; the rest
    reads as seconds.
    """
    largest = max(values)
    has_point = any("." in t or "e" in t.lower() for t in texts)
    if has_point and largest <= HOURS_MAX_FOR_INFERENCE:
        return "h", f"x has decimals and its largest value is {largest}, so hours"
    if not has_point and largest > SECONDS_MAX_FOR_INFERENCE:
        return "ms", f"x is whole and reaches {largest}, beyond 30 days of seconds, so milliseconds"
    return "s", f"x largest value is {largest}, so seconds"


def parse_x_counts(lines: list[tuple[int, str]], unit: str | None, *, source: str) -> tuple[list[Row], list[str]]:
    """``x,count`` rows; ``unit`` None means: from the header, else inferred."""
    layout = "x,count"
    notes: list[str] = []
    first_line, first_text = lines[0]
    first = split_fields(first_text, 2, layout, source=source, line=first_line)
    if not is_number(first[0]) and not is_number(first[1]):
        lines = lines[1:]
        header_unit = unit_from_header(first[0])
        notes.append(f"header row at line {first_line}")
        if not lines:
            raise TraceError(f"no data rows after the header at line {first_line}", source=source)
        if unit is None and header_unit is not None:
            unit = header_unit
            notes.append(f"x unit {unit}, from the header {first[0]!r}")
    fields = [(line, split_fields(text, 2, layout, source=source, line=line)) for line, text in lines]
    if unit is None:
        values = [parse_decimal(f[0], "x", source=source, line=line) for line, f in fields]
        unit, why = infer_unit([f[0] for _, f in fields], values)
        notes.append(f"x unit inferred: {why} (name counts-s, counts-h or counts-ms to override)")
    rows = [
        Row(
            line,
            parse_time(f[0], unit, source=source, line=line, what="x"),
            parse_count(f[1], source=source, line=line),
        )
        for line, f in fields
    ]
    return rows, notes


def _relative_rows(stamped: list[tuple[int, datetime, int]], *, source: str) -> tuple[list[Row], list[str]]:
    aware = stamped[0][1].tzinfo is not None
    for line, stamp, _ in stamped:
        if (stamp.tzinfo is not None) != aware:
            raise TraceError("mixes timestamps with and without a time zone", source=source, line=line)
    origin = min(stamp for _, stamp, _ in stamped)
    rows = [Row(line, (stamp - origin).total_seconds(), count) for line, stamp, count in stamped]
    return rows, [f"times are seconds since the earliest row, {origin.isoformat()}"]


def parse_gcp_counts(lines: list[tuple[int, str]], *, source: str) -> tuple[list[Row], list[str]]:
    """``YYYY-MM-DD, HH:MM:SS, count`` rows."""
    layout = "YYYY-MM-DD, HH:MM:SS, count"
    stamped = []
    for line, text in lines:
        day, clock, count = split_fields(text, 3, layout, source=source, line=line)
        try:
            stamp = datetime.strptime(f"{day} {clock}", "%Y-%m-%d %H:%M:%S")
        except ValueError:
            raise TraceError(
                f"{day!r}, {clock!r} is not a YYYY-MM-DD, HH:MM:SS date and time",
                source=source,
                line=line,
            ) from None
        stamped.append((line, stamp, parse_count(count, source=source, line=line)))
    return _relative_rows(stamped, source=source)


def _parse_iso(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.strip())
    except ValueError:
        return None


def parse_iso_counts(lines: list[tuple[int, str]], *, source: str) -> tuple[list[Row], list[str]]:
    """``timestamp,count`` rows with ISO-8601 timestamps; an optional header row."""
    layout = "ISO-8601 timestamp,count"
    notes = []
    first_line, first_text = lines[0]
    first = split_fields(first_text, 2, layout, source=source, line=first_line)
    if _parse_iso(first[0]) is None and not is_number(first[1]):
        notes.append(f"header row at line {first_line}")
        lines = lines[1:]
        if not lines:
            raise TraceError(f"no data rows after the header at line {first_line}", source=source)
    stamped = []
    for line, text in lines:
        stamp_text, count = split_fields(text, 2, layout, source=source, line=line)
        stamp = _parse_iso(stamp_text)
        if stamp is None:
            raise TraceError(f"{stamp_text!r} is not an ISO-8601 timestamp", source=source, line=line)
        stamped.append((line, stamp, parse_count(count, source=source, line=line)))
    rows, more = _relative_rows(stamped, source=source)
    return rows, notes + more


def counts_to_events(
    samples: Sequence[tuple[float, int]], rng: np.random.Generator, *, prefix: str = "node"
) -> list[TraceEvent]:
    """Events realising a count series (time-sorted ``(time_s, count)`` samples).

    See the module docstring: fresh names for increases, uniform random victims for
    decreases, every sample's change applied in order.
    """
    live: list[str] = []
    events: list[TraceEvent] = []
    issued = 0
    for time_s, count in samples:
        change = count - len(live)
        if change > 0:
            for _ in range(change):
                issued += 1
                node = f"{prefix}{issued}"
                live.append(node)
                events.append(TraceEvent(time_s, "add", node))
        elif change < 0:
            victims = np.sort(rng.choice(len(live), size=-change, replace=False))
            for index in victims:
                events.append(TraceEvent(time_s, "remove", live[index]))
            keep = np.ones(len(live), dtype=bool)
            keep[victims] = False
            live = [node for node, k in zip(live, keep) if k]
    return events
