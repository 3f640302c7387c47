"""Reading trace files into numbered rows, parsing their fields, and putting rows in order.

Every text loader goes through here, so that all of them report errors the same way
(``file:line: problem``) and share one definition of what repair mode may change:

* rows out of time order: an error, or with ``repair`` a stable sort by time;
* exact duplicates (a row equal to the previous row of the same timestamp and, for event
  rows, the same node): an error, or with ``repair`` dropped.

Nothing else is ever changed or dropped; what repair did is recorded in a `LoadReport`.
Blank lines and lines starting with ``#`` carry no data and are skipped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from planner.input_files import MIB, InputFileError, read_text

from .errors import MAX_NODES, TraceError

# Seconds per unit of the time columns that trace files use.
MAX_TRACE_BYTES = 256 * MIB  # a month of 100,000 GPUs is under a megabyte; millions of events fit
UNIT_S = {"ms": Decimal("0.001"), "s": Decimal(1), "h": Decimal(3600)}
_HEADER_UNITS = {
    "ms": {"ms", "msec", "millis", "milliseconds"},
    "h": {"h", "hr", "hrs", "hour", "hours"},
    "s": {"s", "sec", "secs", "second", "seconds"},
}


@dataclass(frozen=True)
class Row:
    """One data row: its 1-based file line, its time in seconds, and a format-specific value."""

    line: int
    time_s: float
    value: Hashable


@dataclass(frozen=True)
class LoadReport:
    """What a load did beyond plain parsing: the format used, inferences, and repairs."""

    source: str
    fmt: str
    detected: bool  # True when the format was auto-detected, False when named
    repair: bool
    notes: tuple[str, ...] = ()
    reordered_lines: tuple[int, ...] = ()  # rows that were earlier than a row above them
    dropped_lines: tuple[int, ...] = ()  # exact duplicates removed

    @property
    def changed(self) -> bool:
        """True when repair changed anything."""
        return bool(self.reordered_lines or self.dropped_lines)

    def describe(self) -> list[str]:
        """Human-readable lines (for the CLI's stderr)."""
        how = "detected" if self.detected else "given"
        out = [f"{self.source}: format {self.fmt} ({how})"]
        out += [f"{self.source}: {note}" for note in self.notes]
        if self.reordered_lines:
            out.append(
                f"{self.source}: repair: sorted by time; {len(self.reordered_lines)} row(s) were "
                f"out of order (lines {_line_list(self.reordered_lines)})"
            )
        if self.dropped_lines:
            out.append(
                f"{self.source}: repair: dropped {len(self.dropped_lines)} exact duplicate "
                f"row(s) (lines {_line_list(self.dropped_lines)})"
            )
        return out


def _line_list(lines: Sequence[int], limit: int = 12) -> str:
    shown = ", ".join(str(n) for n in lines[:limit])
    return shown + (f", ... ({len(lines) - limit} more)" if len(lines) > limit else "")


def read_data_lines(path: Path, comments: list[tuple[int, str]] | None = None) -> list[tuple[int, str]]:
    """(line number, text) of every non-blank, non-comment line; CRLF or LF; UTF-8 (BOM ok).

    With ``comments``, the ``#`` lines are appended to it (for directives such as a horizon).
    """
    source = str(path)
    try:
        text = read_text(path, what="a trace file", cap_bytes=MAX_TRACE_BYTES)
    except InputFileError as exc:
        raise TraceError(exc.reason, source=source, line=exc.line) from None
    out = []
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r").strip()
        if line and not line.startswith("#"):
            out.append((number, line))
        elif line and comments is not None:
            comments.append((number, line))
    if not out:
        raise TraceError("empty: no data rows", source=source)
    return out


def split_fields(text: str, expected: int, layout: str, *, source: str, line: int) -> list[str]:
    """Split a CSV line on commas into exactly ``expected`` stripped fields."""
    fields = [f.strip() for f in text.split(",")]
    if len(fields) != expected:
        raise TraceError(
            f"expected {expected} comma-separated fields ({layout}), found {len(fields)}: {text!r}",
            source=source,
            line=line,
        )
    return fields


def parse_decimal(text: str, what: str, *, source: str, line: int) -> Decimal:
    """A finite decimal number, or a `TraceError` naming the field."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise TraceError(f"{what} {text!r} is not a number", source=source, line=line) from None
    if not value.is_finite():
        raise TraceError(f"{what} {text!r} is not a finite number", source=source, line=line)
    return value


def parse_time(text: str, unit: str, *, source: str, line: int, what: str = "time") -> float:
    """A non-negative time in ``unit`` ("ms", "s" or "h"), returned in seconds.

    Converted exactly in decimal, then rounded once to float, so ``601200`` ms is exactly
    the float nearest 601.2 s and the canonical writer's output reads back bit for bit.
    """
    value = parse_decimal(text, what, source=source, line=line)
    if value < 0:
        raise TraceError(f"{what} {text!r} is negative", source=source, line=line)
    seconds = float(value * UNIT_S[unit])
    if not math.isfinite(seconds):
        raise TraceError(f"{what} {text!r} is too large", source=source, line=line)
    return seconds


def parse_count(text: str, *, source: str, line: int) -> int:
    """A non-negative whole node count."""
    value = parse_decimal(text, "node count", source=source, line=line)
    if value < 0 or value != value.to_integral_value():
        raise TraceError(f"node count {text!r} is not a whole number >= 0", source=source, line=line)
    if value > MAX_NODES:
        raise TraceError(f"node count {text!r} is past the bound of {MAX_NODES:,} nodes", source=source, line=line)
    return int(value)


def unit_from_header(name: str) -> str | None:
    """The time unit a header cell names (``time_ms``, ``hours``, ``t_s`` ...), or None."""
    tokens = set(re.split(r"[^a-z]+", name.strip().lower()))
    for unit, words in _HEADER_UNITS.items():
        if tokens & words:
            return unit
    return None


def is_number(text: str) -> bool:
    try:
        return Decimal(text.strip()).is_finite()
    except InvalidOperation:
        return False


def order_rows(
    rows: list[Row],
    *,
    source: str,
    repair: bool,
    group: Callable[[Row], Hashable] = lambda row: None,
) -> tuple[list[Row], tuple[int, ...], tuple[int, ...]]:
    """Check (or with ``repair`` restore) time order and drop exact duplicates.

    A duplicate is a row whose time and value equal those of the latest earlier row with
    the same time and the same ``group`` (events group by node; count rows do not group).
    Returns (rows, lines of rows that were out of order, lines of dropped duplicates).
    """
    late: list[int] = []
    latest = -math.inf
    latest_line = 0
    for row in rows:
        if row.time_s < latest:
            if not repair:
                raise TraceError(
                    f"time {row.time_s:g} s is earlier than {latest:g} s at line {latest_line}; "
                    "rows must be in time order (`ooblab traces convert FILE --repair -o OUT` writes them sorted)",
                    source=source,
                    line=row.line,
                )
            late.append(row.line)
        else:
            latest, latest_line = row.time_s, row.line
    if late:
        rows = sorted(rows, key=lambda row: row.time_s)  # stable: ties keep file order
    kept: list[Row] = []
    dropped: list[int] = []
    previous: dict[tuple[float, Hashable], Row] = {}
    for row in rows:
        key = (row.time_s, group(row))
        before = previous.get(key)
        if before is not None and before.value == row.value:
            if not repair:
                raise TraceError(
                    f"exact duplicate of line {before.line} (`ooblab traces convert FILE --repair -o OUT` drops exact duplicates)",
                    source=source,
                    line=row.line,
                )
            dropped.append(row.line)
            continue
        previous[key] = row
        kept.append(row)
    return kept, tuple(late), tuple(dropped)
