"""The one error type of the traces package.

Bad input must fail loudly and point at the culprit: every message names the source (a file
path, or a generator spec) and, where there is one, the 1-based line number, then says what
is wrong and, where a fix exists, how to get it (e.g. ``repair=True``).
"""

from __future__ import annotations


class TraceError(ValueError):
    """A trace, trace file, generator spec or transformation argument is invalid.

    ``source`` and ``line`` are kept as attributes so that callers (the CLI, the simulator)
    can report them in their own way; ``str(error)`` already contains both.
    """

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None):
        self.source = source
        self.line = line
        self.reason = message
        where = ""
        if source is not None:
            shown = source if source.isprintable() else repr(source)  # a \r or \n in it stays on one line
            where = f"{shown}:{line}: " if line is not None else f"{shown}: "
        super().__init__(where + message)


# Size bounds that keep a trace within this machine's memory and minutes: a million nodes (eight
# million GPUs at eight a node, beyond any cluster built) and a year of generated trace.
MAX_NODES = 1_000_000
MAX_HOURS = 366 * 24
# and at most this many events, expected before a generator draws any (sizes each within its
# bound can still multiply past it: a million nodes for a year of spot bursts); a month of
# 100,000 GPUs is about 15,000
MAX_EVENTS = 5_000_000


def check_size(what: str, value: float, bound: float) -> None:
    """Refuse a size past its bound, naming both."""
    if value > bound:
        raise TraceError(
            f"{what} {value:g} is past the bound of {bound:g}, which keeps traces within memory and minutes"
        )


def check_events(what: str, expected: float, way_out: str) -> None:
    """Refuse a trace expected to hold more than `MAX_EVENTS` events, before it is made."""
    if not expected <= MAX_EVENTS:
        raise TraceError(
            f"{what}: about {expected:,.0f} events expected, past the bound of {MAX_EVENTS:,} that keeps a trace "
            f"within memory and minutes; {way_out}"
        )
