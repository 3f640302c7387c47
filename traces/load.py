"""Loading a trace file of any supported format into the canonical `Trace`.

`load` auto-detects the format from the first data rows, or takes one by name (see
`FORMATS`); an unknown name or an undetectable file is a `TraceError` that lists the
known formats. `load_with_report` also returns the `LoadReport`: the format used, what was
inferred (units, headers, time origin) and what repair mode changed.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from .counts import counts_to_events, parse_gcp_counts, parse_iso_counts, parse_x_counts
from .errors import TraceError
from .events_csv import load_events_csv, parse_horizon, rows_to_trace
from .model import Trace
from .rows import LoadReport, is_number, order_rows, read_data_lines
from .windows import expand_window_rows, parse_window_rows

DEFAULT_SEED = 0  # victims of count-series decreases, when no generator is passed

FORMATS: dict[str, str] = {
    "events": "time_ms,add|remove,node event CSV, header optional (Oobleck, Bamboo)",
    "counts": "x,count CSV; x unit from the header, else inferred and reported",
    "counts-s": "x,count CSV with x in seconds since start",
    "counts-h": "x,count CSV with x in hours since start",
    "counts-ms": "x,count CSV with x in milliseconds since start (delta_ms,count)",
    "gcp-counts": "YYYY-MM-DD, HH:MM:SS, count text (Bamboo's GCP log)",
    "iso-counts": "ISO-8601 timestamp,count CSV, header optional",
    "windows": '[t_ms, "add"|"remove"|"no-op"|"migration", {"nodes": [...]}] JSON lines (Parcae)',
}
ALIASES = {
    "csv": "events",
    "event-csv": "events",
    "gcp": "gcp-counts",
    "iso": "iso-counts",
    "delta-ms": "counts-ms",
    "delta_ms": "counts-ms",
    "time-ms": "counts-ms",
    "parcae": "windows",
    "jsonl": "windows",
}

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_CLOCK = re.compile(r"^\d{1,2}:\d{2}:\d{2}$")
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{1,2}:\d{2}")


def canonical_format(fmt: str) -> str:
    """The registered name for ``fmt`` (aliases accepted), or a `TraceError`."""
    name = fmt.strip().lower()
    name = ALIASES.get(name, name)
    if name not in FORMATS:
        known = ", ".join(FORMATS)
        raise TraceError(f"unknown trace format {fmt!r} (known: {known})")
    return name


def _classify(text: str) -> str | None:
    """The format one data line looks like; "header" for a row of names; None if unknown."""
    if text.startswith("["):
        return "windows"
    fields = [f.strip() for f in text.split(",")]
    if len(fields) == 3:
        if _DATE.match(fields[0]) and _CLOCK.match(fields[1]):
            return "gcp-counts"
    if len(fields) in (3, 4) and fields[1].lower() in {"add", "remove"}:
        return "events"
    if len(fields) == 2:
        if _ISO.match(fields[0]):
            return "iso-counts"
        if is_number(fields[0]):
            return "counts"
    if len(fields) in (2, 3, 4) and not any(is_number(f) or _ISO.match(f) for f in fields):
        return "header"
    return None


def detect_format(lines: list[tuple[int, str]], *, source: str) -> str:
    """Auto-detect from the first data row (or the second, after a header row)."""
    for _, text in lines[:2]:
        kind = _classify(text)
        if kind == "header":
            continue
        if kind is not None:
            return kind
        break
    line, text = lines[0]
    raise TraceError(
        f"cannot tell the trace format from {text[:60]!r}; name one with fmt= / --format ({', '.join(FORMATS)})",
        source=source,
        line=line,
    )


def load_with_report(
    path: str | Path,
    fmt: str | None = None,
    *,
    repair: bool = False,
    rng: np.random.Generator | None = None,
    name: str | None = None,
) -> tuple[Trace, LoadReport]:
    """Load ``path`` into a `Trace` and say how (format, inferences, repairs).

    ``rng`` picks the victims of count-series decreases (default: seed `DEFAULT_SEED`).
    With ``repair`` rows out of time order are sorted and exact duplicates dropped;
    otherwise both are errors naming the line.
    """
    path = Path(path)
    source = str(path)
    name = name or path.stem
    named = fmt is not None
    fmt = canonical_format(fmt) if fmt is not None else None
    comments: list[tuple[int, str]] = []
    lines = read_data_lines(path, comments)
    if fmt is None:
        fmt = detect_format(lines, source=source)

    if fmt == "events":
        trace, notes, late, dropped = load_events_csv(lines, source=source, name=name, repair=repair)
    elif fmt == "windows":
        rows, notes = parse_window_rows(lines, source=source)
        rows, late, dropped = order_rows(rows, source=source, repair=repair)
        rows, skipped = expand_window_rows(rows)
        if skipped:
            notes.append(f"{skipped} no-op/migration row(s) change no membership")
        trace = rows_to_trace(rows, source=source, name=name)
    else:
        if fmt == "gcp-counts":
            rows, notes = parse_gcp_counts(lines, source=source)
        elif fmt == "iso-counts":
            rows, notes = parse_iso_counts(lines, source=source)
        else:
            unit = {"counts": None, "counts-s": "s", "counts-h": "h", "counts-ms": "ms"}[fmt]
            rows, notes = parse_x_counts(lines, unit, source=source)
        rows, late, dropped = order_rows(rows, source=source, repair=repair)
        generator = rng if rng is not None else np.random.default_rng(DEFAULT_SEED)
        samples = [(row.time_s, int(row.value)) for row in rows]  # type: ignore[call-overload]
        trace = Trace(tuple(counts_to_events(samples, generator)), name)
        notes.append("count decreases remove nodes chosen at random (seeded: rng / --seed, default 0)")
        if samples and samples[0][1] == 0 and trace.events:
            notes.append(f"count is 0 until {trace.start_s:g} s; the trace starts there")
        if not trace.events:
            raise TraceError("every row has a node count of 0: no events", source=source)
    horizon_s = parse_horizon(comments, source=source)
    if horizon_s is not None:
        if trace.events and horizon_s < trace.end_s:
            raise TraceError(f"horizon {horizon_s:g} s is before the last event at {trace.end_s:g} s", source=source)
        trace = Trace(trace.events, trace.name, horizon_s)
        notes.append(f"observed until {horizon_s:g} s (horizon line)")
    report = LoadReport(
        source=source,
        fmt=fmt,
        detected=not named,
        repair=repair,
        notes=tuple(notes),
        reordered_lines=late,
        dropped_lines=dropped,
    )
    return trace, report


def load(
    path: str | Path,
    fmt: str | None = None,
    *,
    repair: bool = False,
    rng: np.random.Generator | None = None,
    name: str | None = None,
) -> Trace:
    """Load a trace file of any supported format (see `load_with_report`)."""
    return load_with_report(path, fmt, repair=repair, rng=rng, name=name)[0]
