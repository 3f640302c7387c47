"""Hypothesis strategies for valid traces (shared by the traces tests)."""

from __future__ import annotations

from hypothesis import strategies as st

from traces import Trace, TraceEvent


@st.composite
def valid_traces(draw, max_steps: int = 40, max_gap_s: int = 5000) -> Trace:
    """Random consistent traces: adds of fresh or returning nodes, removals of live ones,
    several events often sharing a timestamp, times in whole milliseconds."""
    time_ms = draw(st.integers(0, 10_000))
    live: list[str] = []
    gone: list[str] = []
    events = []
    for i in range(draw(st.integers(1, max_steps))):
        if draw(st.booleans()):
            time_ms += draw(st.integers(0, max_gap_s * 1000))
        if live and draw(st.integers(0, 2)) == 0:
            node = live.pop(draw(st.integers(0, len(live) - 1)))
            gone.append(node)
            events.append(TraceEvent(time_ms / 1000, "remove", node))
        else:
            if gone and draw(st.booleans()):
                node = gone.pop(draw(st.integers(0, len(gone) - 1)))
            else:
                node = f"n{i}"
            live.append(node)
            events.append(TraceEvent(time_ms / 1000, "add", node))
    return Trace(tuple(events), "random")
