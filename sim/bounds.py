"""The bound on what one run may hold in memory, shared by both engines.

A run's timeline holds one row per state change, which stays small; `--timeline
iterations` adds one per iteration, which a year of sub-second iterations turns into
tens of millions of rows (about 300 bytes each in memory, more while written). Past
`MAX_TIMELINE_ROWS` the run stops with an error that says so, rather than taking the
machine's memory.
"""

from __future__ import annotations

from .errors import SimError

MAX_TIMELINE_ROWS = 1_000_000  # about 0.3 GB in memory


def check_timeline_rows(rows: int, now_s: float, end_s: float) -> None:
    """Raise `SimError` once a per-iteration timeline passes `MAX_TIMELINE_ROWS`."""
    if rows >= MAX_TIMELINE_ROWS:
        raise SimError(
            f"--timeline iterations passed {MAX_TIMELINE_ROWS:,} rows at {now_s / 3600:,.1f} h of the "
            f"{end_s / 3600:,.1f} h run (about 0.3 GB): use --timeline changes or a shorter --duration-s"
        )
