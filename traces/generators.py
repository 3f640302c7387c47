"""The fixed-interval generator and the duration syntax that generator specs use.

`fixed_interval` makes the paper's failure-frequency traces: n nodes at time 0, then one
removal every interval, k times. The Oobleck artifact's files (``6h`` ... ``5m``) used
intervals given in hours rounded to three decimals, so its "10m" trace removes a node every
0.167 h = 601.2 s and its "5m" one every 0.083 h = 298.8 s. `round_interval_to_hours`
reproduces that rounding (spec key ``hour_decimals=3``); an interval written in
milliseconds (``601200ms``) gives the same trace. Times are multiples computed exactly in
decimal, so removal k happens at the float nearest k * interval.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

from .errors import MAX_NODES, TraceError, check_size
from .model import Trace, TraceEvent

DURATION_UNITS_S = {
    "ms": Decimal("0.001"),
    "s": Decimal(1),
    "m": Decimal(60),
    "min": Decimal(60),
    "h": Decimal(3600),
    "d": Decimal(86400),
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]+)\s*$")


def parse_duration_s(text: str) -> float:
    """``90s``, ``10m``, ``1.5h``, ``601200ms``, ``2d`` -> seconds (a unit is required)."""
    match = _DURATION.match(str(text).lower())
    if not match or match.group(2) not in DURATION_UNITS_S:
        units = ", ".join(DURATION_UNITS_S)
        raise TraceError(f"duration {text!r} must be a number and a unit ({units}), e.g. 30m")
    return float(Decimal(match.group(1)) * DURATION_UNITS_S[match.group(2)])


MAX_HOUR_DECIMALS = 12  # past a nanosecond of an hour nothing rounds


def round_interval_to_hours(interval_s: float, decimals: int) -> float:
    """``interval_s`` rounded to ``decimals`` decimals of an hour (half up), in seconds."""
    if not 0 <= decimals <= MAX_HOUR_DECIMALS:
        raise TraceError(f"hour_decimals must be a whole number in [0, {MAX_HOUR_DECIMALS}], got {decimals}")
    hours = (Decimal(repr(float(interval_s))) / 3600).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)
    return float(hours * 3600)


def fixed_interval(
    nodes: int,
    removals: int,
    interval_s: float,
    *,
    rng: np.random.Generator | None = None,
    start_s: float = 0.0,
    name: str | None = None,
) -> Trace:
    """``nodes`` nodes (``node1`` ...) added at ``start_s``, then one removed every interval.

    Removal k (1-based) happens at ``start_s + k * interval_s``. ``rng`` picks each victim
    uniformly among the live nodes; without one, the oldest live node goes first.
    """
    if isinstance(nodes, bool) or not isinstance(nodes, (int, np.integer)) or nodes < 1:
        raise TraceError(f"nodes must be a whole number >= 1, got {nodes!r}")
    check_size("nodes", nodes, MAX_NODES)
    if isinstance(removals, bool) or not isinstance(removals, (int, np.integer)) or not 0 <= removals <= nodes:
        raise TraceError(f"removals must be a whole number in [0, nodes={nodes}], got {removals!r}")
    if not (math.isfinite(interval_s) and interval_s > 0):
        raise TraceError(f"interval must be > 0 seconds, got {interval_s!r}")
    live = [f"node{i}" for i in range(1, int(nodes) + 1)]
    events = [TraceEvent(start_s, "add", node) for node in live]
    step = Decimal(repr(float(interval_s)))
    origin = Decimal(repr(float(start_s)))
    for k in range(1, int(removals) + 1):
        index = int(rng.integers(len(live))) if rng is not None else 0
        events.append(TraceEvent(float(origin + step * k), "remove", live.pop(index)))
    label = name or f"fixed-{nodes}n-{removals}x{interval_s:g}s"
    return Trace(tuple(events), label)
