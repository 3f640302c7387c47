"""A seeded spot-market generator: bursts of preemptions, replacements after a delay.

The process, with parameters from a `SpotProfile` (fitted to a real trace, see
`traces.spot_profiles`):

1. ``nodes`` nodes (the target capacity) are live at time 0.
2. Preemption bursts arrive as a renewal process with Weibull gaps (shape
   ``burst_gap_shape``; shape < 1 clusters bursts) at ``burst_rate_per_h`` scaled by
   ``nodes / capacity_nodes``, so the per-node preemption hazard stays that of the profile.
3. A burst removes ``1 + NegativeBinomial(burst_size_n, burst_size_p)`` nodes (at most all
   live ones), chosen uniformly at random.
4. Each removed node is replaced by a fresh one after a delay drawn from the profile's
   return distribution (log-normal or Weibull), so the live count never exceeds ``nodes``.
5. Times are rounded up to ``resolution_s`` (60 s: the real traces are minute logs), and
   a burst that would share the previous burst's timestamp moves to the next one: in the
   real traces a burst *is* the set of removals at one timestamp, and the fitted rate
   counts those. Events after ``hours`` are not emitted.

All randomness comes from the generator passed in; a given seed gives the same trace.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from .errors import MAX_HOURS, MAX_NODES, TraceError, check_events, check_size
from .model import Trace, TraceEvent
from .spot_profiles import SPOT_PROFILES, SpotProfile


def get_profile(profile: str | SpotProfile) -> SpotProfile:
    """A profile by name (see `SPOT_PROFILES`), or the profile itself."""
    if isinstance(profile, SpotProfile):
        return profile
    if profile not in SPOT_PROFILES:
        raise TraceError(f"unknown spot profile {profile!r} (known: {', '.join(SPOT_PROFILES)})")
    return SPOT_PROFILES[profile]


def draw_return_delay_s(profile: SpotProfile, rng: np.random.Generator) -> float:
    """One replacement delay in seconds."""
    scale_s = profile.return_scale_h * 3600.0
    if profile.return_family == "lognorm":
        return scale_s * math.exp(profile.return_shape * rng.standard_normal())
    return scale_s * rng.weibull(profile.return_shape)


def spot_market(
    nodes: int,
    hours: float,
    *,
    rng: np.random.Generator,
    profile: str | SpotProfile = "p3",
    name: str | None = None,
) -> Trace:
    """A spot-market trace of ``hours`` hours with target capacity ``nodes`` (see module doc)."""
    prof = get_profile(profile)
    if isinstance(nodes, bool) or not isinstance(nodes, (int, np.integer)) or nodes < 1:
        raise TraceError(f"nodes must be a whole number >= 1, got {nodes!r}")
    if not (isinstance(hours, (int, float)) and math.isfinite(hours) and hours > 0):
        raise TraceError(f"hours must be > 0, got {hours!r}")
    check_size("hours", hours, MAX_HOURS)
    check_size("nodes", nodes, MAX_NODES)
    if not isinstance(rng, np.random.Generator):
        raise TraceError("spot_market needs a seeded numpy.random.Generator as rng")
    res = prof.resolution_s
    horizon_s = hours * 3600.0
    rate_per_s = prof.burst_rate_per_h * nodes / prof.capacity_nodes / 3600.0
    gap_scale_s = 1.0 / (rate_per_s * math.gamma(1.0 + 1.0 / prof.burst_gap_shape))
    burst_nodes = 1 + prof.burst_size_n * (1 - prof.burst_size_p) / prof.burst_size_p  # the mean burst
    check_events(
        f"{nodes} nodes for {hours:g} hours",
        nodes + 2 * rate_per_s * horizon_s * burst_nodes,
        "give fewer nodes or hours",
    )

    def on_grid(t: float) -> float:
        return math.ceil(t / res - 1e-9) * res

    live = [f"node{i}" for i in range(1, int(nodes) + 1)]
    issued = int(nodes)
    events = [TraceEvent(0.0, "add", node) for node in live]
    returns: list[float] = []  # heap of replacement times

    def admit(before_s: float, inclusive: bool) -> None:
        nonlocal issued
        while returns and (returns[0] < before_s or (inclusive and returns[0] == before_s)):
            at = heapq.heappop(returns)
            issued += 1
            live.append(f"node{issued}")
            events.append(TraceEvent(at, "add", live[-1]))

    clock = 0.0
    last_burst_s = 0.0
    while True:
        clock += gap_scale_s * rng.weibull(prof.burst_gap_shape)
        t = max(on_grid(clock), last_burst_s + res)  # one burst per timestamp, as observed
        last_burst_s = t
        if t > horizon_s:
            break
        admit(t, inclusive=False)  # replacements due at t arrive after the burst
        size = min(1 + int(rng.negative_binomial(prof.burst_size_n, prof.burst_size_p)), len(live))
        if size == 0:
            continue
        victims = np.sort(rng.choice(len(live), size=size, replace=False))
        for index in victims:
            events.append(TraceEvent(t, "remove", live[index]))
            back = on_grid(t + draw_return_delay_s(prof, rng))
            heapq.heappush(returns, max(back, t + res))
        chosen = set(victims.tolist())
        live = [node for i, node in enumerate(live) if i not in chosen]
    admit(horizon_s, inclusive=True)
    label = name or f"spot-{prof.name}-{nodes}n-{hours:g}h"
    return Trace(tuple(events), label, horizon_s)
