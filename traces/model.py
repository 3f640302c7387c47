"""The canonical trace: a time-sorted, validated sequence of node add / remove events.

Every loader, generator and transformation produces a `Trace`; the simulator and the real
backend consume only this form. Validity is checked on construction, so a `Trace` in hand is
always consistent: times are finite, non-negative and non-decreasing, kinds are "add" or
"remove", a node is only added while absent and only removed while present (a node may come
back after a removal under the same name). Events sharing a timestamp keep their order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypedDict

import pandas as pd

from .errors import TraceError
from .stats import TraceStats, compute_stats, step_counts


class _Where(TypedDict):
    """Where a `TraceError` points: the file and its 1-based line, when known."""

    source: str | None
    line: int | None


KINDS = ("add", "remove")
# a removal's cause (a failed component, as `datacenter:` traces name them) -> how it shows:
# a crash (the process exits), a network fault (the node lives on, unreachable), a hang
CAUSE_KIND = {"gpu": "crash", "host": "crash", "cable": "network", "switch": "network", "software": "hang"}


@dataclass(frozen=True)
class TraceEvent:
    """One membership change: at ``time_s`` seconds from trace start, ``node`` is added or
    removed; a removal may say its ``cause`` (a failure class such as ``gpu`` or ``switch``,
    which a cost profile prices detection by; None: not known, as for a preemption)."""

    time_s: float
    kind: str
    node: str
    cause: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise TraceError(f"unknown event kind {self.kind!r} (expected 'add' or 'remove')")
        if not isinstance(self.node, str) or not self.node:
            raise TraceError(f"node name must be a non-empty string, got {self.node!r}")
        if isinstance(self.time_s, bool) or not isinstance(self.time_s, (int, float)):
            raise TraceError(f"time_s must be a number, got {self.time_s!r}")
        if not math.isfinite(self.time_s) or self.time_s < 0:
            raise TraceError(f"time_s must be finite and >= 0, got {self.time_s!r}")
        object.__setattr__(self, "time_s", float(self.time_s))
        if self.cause is not None:
            if self.kind != "remove":
                raise TraceError(f"only a removal has a cause, got {self.cause!r} on an add of {self.node!r}")
            if (
                not isinstance(self.cause, str)
                or not self.cause
                or "," in self.cause
                or self.cause != self.cause.strip()
            ):
                raise TraceError(f"a cause must be a non-empty word without commas, got {self.cause!r}")
            if self.cause not in CAUSE_KIND:  # a misspelt one would be priced as no cause at all
                raise TraceError(
                    f"unknown cause {self.cause!r} of the removal of {self.node!r} at {self.time_s:g} s; "
                    f"known: {', '.join(CAUSE_KIND)} (or none, for a preemption)"
                )


def check_membership(events: Sequence[TraceEvent], *, source: str, lines: Sequence[int] | None = None) -> None:
    """Raise `TraceError` at the first event that breaks time order or membership.

    With ``lines`` (the file line of each event) messages name the file line; otherwise they
    name the event's index in the trace.
    """

    def where(i: int) -> _Where:
        return {"source": source, "line": lines[i] if lines is not None else None}

    def label(i: int) -> str:
        return f"line {lines[i]}" if lines is not None else f"event #{i}"

    present: dict[str, int] = {}  # node -> index of the event that added it
    gone: dict[str, int] = {}  # node -> index of the event that last removed it
    previous_time = -math.inf
    for i, event in enumerate(events):
        prefix = "" if lines is not None else f"event #{i} "
        if event.time_s < previous_time:
            raise TraceError(
                f"{prefix}time {event.time_s:g} s is earlier than the previous event's "
                f"{previous_time:g} s (events must be in time order)",
                **where(i),
            )
        previous_time = event.time_s
        if event.kind == "add":
            if event.node in present:
                raise TraceError(
                    f"{prefix}adds {event.node!r}, which is already present (added at {label(present[event.node])})",
                    **where(i),
                )
            present[event.node] = i
            gone.pop(event.node, None)
        else:
            if event.node not in present:
                why = f"it was removed at {label(gone[event.node])}" if event.node in gone else "it was never added"
                raise TraceError(f"{prefix}removes {event.node!r}, which is not present ({why})", **where(i))
            del present[event.node]
            gone[event.node] = i


@dataclass(frozen=True)
class Trace:
    """A validated, time-sorted sequence of `TraceEvent` s with a human-readable name."""

    events: tuple[TraceEvent, ...]
    name: str = "trace"
    # when the source says how long it observed (a generator asked for N hours, a window's
    # end, a file's ``# horizon_ms=`` line): the trace ends there, not at its last event
    horizon_s: float | None = None

    def __post_init__(self) -> None:
        events = tuple(self.events)
        for i, event in enumerate(events):
            if not isinstance(event, TraceEvent):
                raise TraceError(f"event #{i} is a {type(event).__name__}, not a TraceEvent", source=self.name)
        object.__setattr__(self, "events", events)
        check_membership(events, source=self.name)
        if self.horizon_s is not None:
            horizon = self.horizon_s
            last = events[-1].time_s if events else 0.0
            if isinstance(horizon, bool) or not isinstance(horizon, (int, float)) or not math.isfinite(horizon):
                raise TraceError(f"horizon must be a finite number of seconds, got {horizon!r}", source=self.name)
            if horizon < last:
                raise TraceError(f"horizon {horizon:g} s is before the last event at {last:g} s", source=self.name)
            object.__setattr__(self, "horizon_s", float(horizon))

    @classmethod
    def from_tuples(cls, rows: Iterable[tuple[float, str, str]], name: str = "trace") -> Trace:
        """Build from ``(time_s, kind, node)`` tuples that are already in time order."""
        return cls(tuple(TraceEvent(t, k, n) for t, k, n in rows), name)

    def renamed(self, name: str) -> Trace:
        return Trace(self.events, name, self.horizon_s)

    def __len__(self) -> int:
        return len(self.events)

    # -- time span ----------------------------------------------------------------------
    @property
    def start_s(self) -> float:
        """Time of the first event (0.0 for an empty trace)."""
        return self.events[0].time_s if self.events else 0.0

    @property
    def end_s(self) -> float:
        """Time of the last event (0.0 for an empty trace)."""
        return self.events[-1].time_s if self.events else 0.0

    @property
    def stop_s(self) -> float:
        """Where the trace ends: its horizon when known, else its last event."""
        return self.end_s if self.horizon_s is None else self.horizon_s

    @property
    def duration_s(self) -> float:
        """From the first event to where the trace ends (`stop_s`)."""
        return self.stop_s - self.start_s

    # -- membership ---------------------------------------------------------------------
    def nodes_at(self, time_s: float) -> tuple[str, ...]:
        """Nodes present after every event at or before ``time_s``, in order of arrival."""
        present: dict[str, None] = {}
        for event in self.events:
            if event.time_s > time_s:
                break
            if event.kind == "add":
                present[event.node] = None
            else:
                del present[event.node]
        return tuple(present)

    @property
    def initial_nodes(self) -> tuple[str, ...]:
        """Nodes present at the first timestamp, after all events of that timestamp."""
        return self.nodes_at(self.start_s) if self.events else ()

    @property
    def final_nodes(self) -> tuple[str, ...]:
        """Nodes present after the last event."""
        return self.nodes_at(self.end_s) if self.events else ()

    def live_counts(self) -> pd.DataFrame:
        """Step function of the live-node count: columns ``time_s``, ``live_nodes``.

        One row per distinct timestamp, holding the count after all events sharing it.
        """
        times, live = step_counts(self.events)
        return pd.DataFrame({"time_s": times, "live_nodes": live})

    def stats(self) -> TraceStats:
        """Summary statistics (see `traces.stats` for the definitions)."""
        return compute_stats(self.events, self.name, stop_s=self.horizon_s)
