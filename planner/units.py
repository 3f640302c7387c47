"""Byte counts as people read them: the unit that keeps the figure readable.

A fixed GiB with one decimal turns a tiny model's state and a tiny GPU's memory alike into
"0.0 GiB", so an error comparing them says nothing; `size_text` picks B, KiB, MiB, GiB or
TiB and three significant figures.
"""

from __future__ import annotations

UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def size_text(num_bytes: float) -> str:
    """``num_bytes`` in the largest binary unit that leaves at least 1: '512 B', '6.1 GiB'."""
    value, unit = float(num_bytes), UNITS[0]
    for unit in UNITS:
        if abs(value) < 1023.5 or unit == UNITS[-1]:  # 1023.5 would print as 1024
            break
        value /= 1024
    if unit == "B":
        return f"{value:.0f} B"
    return f"{value:.3g} {unit}" if abs(value) < 100 else f"{value:.0f} {unit}"
