"""One-minute window JSON lines, the form of Parcae's per-window traces.

Each line is ``[t_ms, action, {"nodes": [...], ...}]``: at ``t_ms`` the listed nodes are
added (``"add"``) or removed (``"remove"``); ``"no-op"`` and ``"migration"`` rows record
Parcae's decisions for the window and change no membership, so they must list no nodes.
Other keys of the object (``duration``, strategies) are Parcae's and are ignored.
"""

from __future__ import annotations

import json
from typing import cast

from .errors import TraceError
from .rows import Row, parse_time

MEMBERSHIP = {"add", "remove"}
NO_CHANGE = {"no-op", "migration"}


def parse_window_rows(lines: list[tuple[int, str]], *, source: str) -> tuple[list[Row], list[str]]:
    """Rows with value (action, nodes tuple); no-change rows are kept until ordering."""
    rows = []
    for line, text in lines:
        try:
            item = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(f"not valid JSON ({exc.msg})", source=source, line=line) from None
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[2], dict)):
            raise TraceError(
                'expected [t_ms, "add"|"remove"|"no-op"|"migration", {"nodes": [...]}]',
                source=source,
                line=line,
            )
        t_ms, action, body = item
        if isinstance(t_ms, bool) or not isinstance(t_ms, (int, float)):
            raise TraceError(f"time {t_ms!r} is not a number", source=source, line=line)
        time_s = parse_time(repr(t_ms), "ms", source=source, line=line)
        if action not in MEMBERSHIP | NO_CHANGE:
            raise TraceError(
                f"unknown action {action!r} (expected add, remove, no-op or migration)",
                source=source,
                line=line,
            )
        nodes = body.get("nodes")
        if not isinstance(nodes, list) or not all(isinstance(n, str) and n for n in nodes):
            raise TraceError('"nodes" must be a list of node names', source=source, line=line)
        if action in NO_CHANGE and nodes:
            raise TraceError(f"a {action!r} row must list no nodes", source=source, line=line)
        rows.append(Row(line, time_s, (action, tuple(nodes))))
    return rows, []


def expand_window_rows(rows: list[Row]) -> tuple[list[Row], int]:
    """One event row (value (kind, node)) per listed node; also the number of no-change rows."""
    out: list[Row] = []
    skipped = 0
    for row in rows:
        action, nodes = cast("tuple[str, tuple[str, ...]]", row.value)  # what parse_window_rows stores
        if action in NO_CHANGE:
            skipped += 1
            continue
        out.extend(Row(row.line, row.time_s, (action, node)) for node in nodes)
    return out, skipped
