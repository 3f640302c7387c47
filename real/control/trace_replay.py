"""Traces on the real backend: the simulator's trace files, time-compressed, onto workers.

`ooblab run --trace FILE --time-scale X` reads the trace with `traces.from_spec` (a file
in any supported format, or a generator spec) and divides its times by X
(`traces.compress`). The trace's node names become the job's node names: the nodes live
at time 0 are the job's first nodes; later, a `remove` kills that node's workers
(SIGKILL) and an `add` starts a fresh worker set under the trace's name. Times count from
the moment training starts (start-up is not part of the trace). A machine holds
`--nodes` worker sets, so a trace with more live nodes at once is refused up front.
"""

from __future__ import annotations

from dataclasses import dataclass

from traces import TraceError, compress, from_spec
from traces.model import Trace, TraceEvent


class TraceScheduleError(ValueError):
    """A trace the job cannot replay; the message says why."""


@dataclass(frozen=True)
class TraceSchedule:
    """`initial`: nodes live at time 0, in trace order; `events`: later add/remove events,
    times already compressed, seconds after training starts."""

    name: str
    initial: tuple[str, ...]
    events: tuple[TraceEvent, ...]
    max_live: int


def schedule_from_trace(trace: Trace, time_scale: float, capacity: int) -> TraceSchedule:
    """Compress `trace` and check that at most `capacity` nodes are ever live at once."""
    if not trace.events:
        raise TraceScheduleError(f"trace {trace.name!r} has no events")
    try:
        trace = compress(trace, time_scale)
    except TraceError as exc:
        raise TraceScheduleError(f"--time-scale: {exc}") from None
    live: dict[str, None] = {}
    max_live = 0
    initial: tuple[str, ...] | None = None
    later: list[TraceEvent] = []
    for event in trace.events:
        if event.time_s > 0 and initial is None:
            initial = tuple(live)
        if event.kind == "add":
            live[event.node] = None
        else:
            live.pop(event.node, None)
        max_live = max(max_live, len(live))
        if initial is not None:
            later.append(event)
    if initial is None:
        initial = tuple(live)
    if max_live > capacity:
        raise TraceScheduleError(
            f"trace {trace.name!r} has up to {max_live} live nodes at once, more than the job's {capacity} "
            f"(--nodes): pass --nodes {max_live} or shrink the trace (`ooblab traces convert --cap N` or `--rescale LO HI`)"
        )
    if not initial:
        raise TraceScheduleError(f"trace {trace.name!r} has no node at time 0: the job would have nothing to start on")
    return TraceSchedule(trace.name, initial, tuple(later), max_live)


def load_trace_schedule(spec: str, time_scale: float, capacity: int) -> TraceSchedule:
    """`spec`: a trace file or generator spec (as `ooblab simulate --trace` takes)."""
    try:
        trace = from_spec(spec)
    except TraceError as exc:
        raise TraceScheduleError(f"--trace: {exc}") from None
    return schedule_from_trace(trace, time_scale, capacity)
