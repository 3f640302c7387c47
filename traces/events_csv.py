"""Event CSV: ``time_ms,add|remove,node``, the canonical on-disk form of a trace.

This is the format of the Oobleck artifact's and Bamboo's traces (no header; LF or CRLF).
Reading also accepts a header row (any first row whose time and event fields are not a
number and an event word); a header whose first column names a unit (``time_s``,
``seconds``, ``hours``) switches the time unit from milliseconds to it. Writing produces the headerless form, which the original
simulators read too, with times in milliseconds written exactly: ``601.2`` s becomes
``601200`` and reads back as the same float, so convert -> load round-trips bit for bit.
A removal may carry a fourth field, its cause (a failure class: `datacenter:` traces write
the component that failed), which the simulator's cost profiles price detection by; files
without it are the plain three-field form. A trace that knows how long it was observed (a generated one, a window) ends with the
comment ``# horizon_ms=N``, which readers of the plain format skip and this one reads back.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import TextIO

from .errors import MAX_HOURS, TraceError
from .model import Trace, TraceEvent, check_membership
from .rows import Row, is_number, order_rows, parse_time, split_fields, unit_from_header

LAYOUT = "time_ms,add|remove,node[,cause]"
# a comment line that says how long the trace was observed (older readers skip it)
HORIZON_PREFIX = "# horizon_ms="
_EVENT_WORDS = {"add", "remove"}


def _header_unit(fields: list[str]) -> str | None:
    """The time unit a header row names, or None when the row is data."""
    if is_number(fields[0]) or fields[1].lower() in _EVENT_WORDS:
        return None
    return unit_from_header(fields[0]) or "ms"


def parse_event_rows(lines: list[tuple[int, str]], *, source: str) -> tuple[list[Row], list[str]]:
    """Rows with value (kind, node); also notes about a header, if any."""
    notes: list[str] = []
    unit = "ms"
    first_line, first_text = lines[0]
    columns = 4 if first_text.count(",") == 3 else 3
    header = _header_unit(split_fields(first_text, columns, LAYOUT, source=source, line=first_line))
    if header is not None:
        unit = header
        lines = lines[1:]
        notes.append(f"header row at line {first_line}; times in {unit}")
        if not lines:
            raise TraceError(f"no data rows after the header at line {first_line}", source=source)
    rows = []
    for line, text in lines:
        fields = split_fields(text, 4 if text.count(",") == 3 else 3, LAYOUT, source=source, line=line)
        time_text, kind, node = fields[:3]
        cause = fields[3] if len(fields) == 4 else None
        time_s = parse_time(time_text, unit, source=source, line=line)
        kind = kind.lower()
        if kind not in _EVENT_WORDS:
            raise TraceError(f"unknown event {kind!r} (expected 'add' or 'remove')", source=source, line=line)
        if not node:
            raise TraceError("empty node name", source=source, line=line)
        if cause is not None and (kind != "remove" or not cause):
            why = "an empty cause" if kind == "remove" else f"a cause ({cause!r}) on an add: only removals have one"
            raise TraceError(why, source=source, line=line)
        rows.append(Row(line, time_s, (kind, node, cause) if cause else (kind, node)))
    return rows, notes


def rows_to_trace(rows: list[Row], *, source: str, name: str) -> Trace:
    """Validate membership with file lines in the messages, then build the trace."""
    events = [TraceEvent(row.time_s, *row.value) for row in rows]  # type: ignore[misc]
    check_membership(events, source=source, lines=[row.line for row in rows])
    return Trace(tuple(events), name)


def load_events_csv(
    lines: list[tuple[int, str]], *, source: str, name: str, repair: bool
) -> tuple[Trace, list[str], tuple[int, ...], tuple[int, ...]]:
    """Parse, order (or repair) and validate an event CSV already split into lines."""
    rows, notes = parse_event_rows(lines, source=source)
    rows, late, dropped = order_rows(
        rows,
        source=source,
        repair=repair,
        group=lambda row: row.value[1],  # type: ignore[index]
    )
    return rows_to_trace(rows, source=source, name=name), notes, late, dropped


def format_time_ms(time_s: float) -> str:
    """Milliseconds as the shortest decimal that reads back to exactly ``time_s``.

    ``repr`` gives the shortest decimal string of the float; moving its point three places
    is exact, and `traces.rows.parse_time` undoes it exactly before rounding once.
    """
    ms = Decimal(repr(float(time_s))).scaleb(3)
    if ms == ms.to_integral_value():
        return str(int(ms))
    return format(ms.normalize(), "f")


def write_events_csv(trace: Trace, out: TextIO) -> None:
    """Write the canonical headerless ``time_ms,kind,node`` CSV (LF line endings)."""
    for event in trace.events:
        if "," in event.node or "\n" in event.node or event.node != event.node.strip():
            raise TraceError(f"node name {event.node!r} cannot be written to CSV", source=trace.name)
        cause = f",{event.cause}" if event.cause is not None else ""
        out.write(f"{format_time_ms(event.time_s)},{event.kind},{event.node}{cause}\n")
    if trace.horizon_s is not None:
        out.write(f"{HORIZON_PREFIX}{format_time_ms(trace.horizon_s)}\n")


def parse_horizon(comments: list[tuple[int, str]], *, source: str) -> float | None:
    """The horizon a ``# horizon_ms=N`` comment gives, or None; at most one such line, and
    within the year that bounds every trace."""
    horizon_s = None
    given_on = None
    for line, text in comments:
        if text.startswith(HORIZON_PREFIX):
            if given_on is not None:
                raise TraceError(f"a second horizon line (the first is line {given_on})", source=source, line=line)
            horizon_s = parse_time(text[len(HORIZON_PREFIX) :].strip(), "ms", source=source, line=line, what="horizon")
            if horizon_s > MAX_HOURS * 3600.0:
                raise TraceError(
                    f"horizon {horizon_s:g} s is past the bound of {MAX_HOURS:g} hours (a year)",
                    source=source,
                    line=line,
                )
            given_on = line
    return horizon_s


def save_events_csv(trace: Trace, path: Path) -> None:
    """Write the canonical CSV to ``path``."""
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        write_events_csv(trace, out)
