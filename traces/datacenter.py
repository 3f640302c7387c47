"""A seeded generator of datacenter hardware failures for large training clusters.

A trace node is a host (``gpus_per_host`` GPUs). The process, with parameters from a
`DatacenterProfile` (calibrated to Llama 3, see `traces.datacenter_profiles`):

1. ``gpus / gpus_per_host`` job hosts ``node1`` ... are live at time 0; ``spares`` more
   hosts (the following names) wait idle. Host ``i`` (0-based, job hosts first) sits in
   rack ``i // hosts_per_rack`` under that rack's ToR switch.
2. Each component fails as a Poisson process per unit of its scope (every GPU, host or
   rack, spares included) at rate 1 / ``mtbf_d``. A failure takes out the live job hosts it
   reaches: the GPU's host, the host, or every host of the rack (a correlated burst).
   Failures that reach no live job host (a host already down, an idle spare, an empty
   rack) leave no trace: that thinning is what makes the rate per live unit exact. All
   candidate failures are drawn at once with numpy; only their effects are applied in order.
3. A failed host goes to repair for a log-normal time (median ``repair_median_h`` of its
   component, sigma ``repair_sigma``; a rack's hosts share one draw: one switch is
   replaced) and comes back *as the same node* (same name: a repaired machine is the same
   machine). If an idle spare is available, it joins the job ``spare_delay_s`` after the
   failure; otherwise the slot waits for the next host to leave repair, which joins at once.
   A repaired host that no slot is waiting for becomes an idle spare. So the live count
   never exceeds the job's hosts, and with ``spares=0`` every failed host returns itself.
4. Times are whole seconds (failure times rounded up); a burst that would share the
   previous burst's second moves to the next one, so one interruption = one burst = the
   removals at one timestamp. Nothing after ``days`` is emitted.

All randomness comes from the generator passed in; a given seed gives the same trace.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from .datacenter_profiles import (
    DATACENTER_PROFILES,
    DEFAULT_DATACENTER_PROFILE,
    SCOPES,
    DatacenterProfile,
)
from .errors import MAX_HOURS, MAX_NODES, TraceError, check_events, check_size
from .model import Trace, TraceEvent

DAY_S = 86_400.0
_JOIN, _REPAIRED = 0, 1


def get_datacenter_profile(profile: str | DatacenterProfile) -> DatacenterProfile:
    """A profile by name (see `DATACENTER_PROFILES`), or the profile itself."""
    if isinstance(profile, DatacenterProfile):
        return profile
    if profile not in DATACENTER_PROFILES:
        raise TraceError(f"unknown datacenter profile {profile!r} (known: {', '.join(DATACENTER_PROFILES)})")
    return DATACENTER_PROFILES[profile]


@dataclass(frozen=True)
class DatacenterRun:
    """A generated trace and what caused each of its bursts (for tests and analysis).

    Interruption ``k`` happened at ``interruption_time_s[k]``, was a failure of component
    ``components[interruption_component[k]]`` and removed ``interruption_size[k]`` hosts.
    """

    trace: Trace
    components: tuple[str, ...]
    interruption_time_s: np.ndarray
    interruption_component: np.ndarray
    interruption_size: np.ndarray
    hosts: int  # job hosts (the live count's ceiling)
    spares: int


def job_hosts(gpus: int, profile: DatacenterProfile) -> int:
    """Hosts of a job on ``gpus`` GPUs (the GPU count must fill whole hosts)."""
    if isinstance(gpus, bool) or not isinstance(gpus, (int, np.integer)) or gpus < 1:
        raise TraceError(f"gpus must be a whole number >= 1, got {gpus!r}")
    check_size("hosts", gpus // max(profile.gpus_per_host, 1), MAX_NODES)
    if gpus % profile.gpus_per_host:
        raise TraceError(f"gpus={gpus} is not a multiple of gpus_per_host={profile.gpus_per_host}")
    return int(gpus) // profile.gpus_per_host


def expected_interruptions_per_day(gpus: int, profile: str | DatacenterProfile = DEFAULT_DATACENTER_PROFILE) -> float:
    """Interruptions per day of a job on ``gpus`` GPUs with every host up (the calibration rate)."""
    prof = get_datacenter_profile(profile)
    hosts = job_hosts(gpus, prof)
    return sum(_units(comp.scope, hosts, prof) / comp.mtbf_d for comp in prof.components)


def _units(scope: str, hosts: int, profile: DatacenterProfile) -> int:
    if scope == "gpu":
        return hosts * profile.gpus_per_host
    if scope == "host":
        return hosts
    return math.ceil(hosts / profile.hosts_per_rack)


def _check(profile: DatacenterProfile, days: float, spares: int, spare_delay_s: float) -> None:
    if not (isinstance(days, (int, float)) and math.isfinite(days) and days > 0):
        raise TraceError(f"days must be > 0, got {days!r}")
    check_size("days", days, MAX_HOURS / 24)
    if isinstance(spares, bool) or not isinstance(spares, (int, np.integer)) or spares < 0:
        raise TraceError(f"spares must be a whole number >= 0, got {spares!r}")
    if not (math.isfinite(spare_delay_s) and spare_delay_s >= 0):
        raise TraceError(f"spare_delay must be >= 0 seconds, got {spare_delay_s!r}")
    if profile.gpus_per_host < 1 or profile.hosts_per_rack < 1:
        raise TraceError("gpus_per_host and hosts_per_rack must be >= 1")
    if not (math.isfinite(profile.repair_sigma) and profile.repair_sigma >= 0):
        raise TraceError(f"repair_sigma must be >= 0, got {profile.repair_sigma!r}")
    for comp in profile.components:
        if comp.scope not in SCOPES:
            raise TraceError(f"component {comp.name}: scope {comp.scope!r} is not one of {', '.join(SCOPES)}")
        if not comp.mtbf_d > 0 or not (math.isfinite(comp.repair_median_h) and comp.repair_median_h > 0):
            raise TraceError(f"component {comp.name}: mtbf and repair must be > 0")


def _candidates(profile: DatacenterProfile, hosts_total: int, horizon_s: float, rng: np.random.Generator):
    """Every candidate failure, time-sorted: (ceil time s, component, first host, host count, repair s)."""
    racks = math.ceil(hosts_total / profile.hosts_per_rack)
    empty = np.zeros(0, dtype=np.int64)
    parts = [(np.zeros(0), empty, empty, empty, np.zeros(0))]  # so that no component means no failure
    for index, comp in enumerate(profile.components):
        units = (
            hosts_total * profile.gpus_per_host
            if comp.scope == "gpu"
            else (hosts_total if comp.scope == "host" else racks)
        )
        n = int(rng.poisson(units * horizon_s / (comp.mtbf_d * DAY_S)))
        times = rng.uniform(0.0, horizon_s, n)
        unit = rng.integers(0, units, n)
        repair = comp.repair_median_h * 3600.0 * np.exp(profile.repair_sigma * rng.standard_normal(n))
        if comp.scope == "gpu":
            first, width = unit // profile.gpus_per_host, np.ones(n, dtype=np.int64)
        elif comp.scope == "host":
            first, width = unit, np.ones(n, dtype=np.int64)
        else:
            first = unit * profile.hosts_per_rack
            width = np.minimum(profile.hosts_per_rack, hosts_total - first)
        parts.append((times, np.full(n, index), first, width, repair))
    times, comp_index, first, width, repair = (np.concatenate(column) for column in zip(*parts))
    order = np.argsort(times, kind="stable")
    return (
        np.ceil(times[order]),
        comp_index[order],
        first[order],
        width[order],
        np.maximum(np.ceil(repair[order]), 1.0),
    )


def datacenter_failures(
    gpus: int,
    days: float,
    *,
    rng: np.random.Generator,
    profile: str | DatacenterProfile = DEFAULT_DATACENTER_PROFILE,
    spares: int = 0,
    spare_delay_s: float = 600.0,
    name: str | None = None,
) -> DatacenterRun:
    """A failure trace of a ``gpus``-GPU job over ``days`` days, with causes (see module doc)."""
    prof = get_datacenter_profile(profile)
    hosts = job_hosts(gpus, prof)
    _check(prof, days, spares, spare_delay_s)
    if not isinstance(rng, np.random.Generator):
        raise TraceError("datacenter_failures needs a seeded numpy.random.Generator as rng")
    total = hosts + int(spares)
    check_size("hosts with spares", total, MAX_NODES)
    horizon_s = float(days) * DAY_S
    candidates = sum(_units(comp.scope, total, prof) * horizon_s / (comp.mtbf_d * DAY_S) for comp in prof.components)
    check_events(
        f"{gpus} GPUs for {days:g} days", total + 2 * candidates, "give fewer GPUs or days, or longer MTBFs (or rate=)"
    )
    delay_s = float(math.ceil(spare_delay_s))
    cand_t, cand_comp, cand_first, cand_width, cand_repair = _candidates(prof, total, horizon_s, rng)

    names = [f"node{i}" for i in range(1, total + 1)]
    live = np.zeros(total, dtype=bool)
    live[:hosts] = True
    idle: deque[int] = deque(range(hosts, total))  # spares ready to join
    waiting = 0  # job slots with no host assigned
    pending: list[tuple[float, int, int, int]] = []  # heap of (time, seq, kind, host)
    seq = 0
    events = [TraceEvent(0.0, "add", names[i]) for i in range(hosts)]
    out_t: list[float] = []
    out_comp: list[int] = []
    out_size: list[int] = []

    def settle(until_s: float, inclusive: bool) -> None:
        nonlocal waiting
        while pending and (pending[0][0] < until_s or (inclusive and pending[0][0] == until_s)):
            at, _, kind, host = heapq.heappop(pending)
            if kind == _REPAIRED and not waiting:
                idle.append(host)
                continue
            if kind == _REPAIRED:
                waiting -= 1
            live[host] = True
            events.append(TraceEvent(at, "add", names[host]))

    last_burst_s = 0.0
    for t, comp, first, width, repair in zip(
        cand_t.tolist(), cand_comp.tolist(), cand_first.tolist(), cand_width.tolist(), cand_repair.tolist()
    ):
        t = max(t, last_burst_s + 1.0)
        if t > horizon_s:
            break
        settle(t, inclusive=False)  # hosts due at t join after the burst
        victims = [h for h in range(first, first + width) if live[h]]
        if not victims:
            continue
        last_burst_s = t
        out_t.append(t)
        out_comp.append(comp)
        out_size.append(len(victims))
        for host in victims:
            live[host] = False
            events.append(TraceEvent(t, "remove", names[host], prof.components[comp].name))
            seq += 1
            heapq.heappush(pending, (t + repair, seq, _REPAIRED, host))
            if idle:
                seq += 1
                heapq.heappush(pending, (t + delay_s, seq, _JOIN, idle.popleft()))
            else:
                waiting += 1
    settle(horizon_s, inclusive=True)
    label = name or f"datacenter-{prof.name}-{gpus}gpus-{days:g}d"
    return DatacenterRun(
        trace=Trace(tuple(events), label, horizon_s),
        components=tuple(c.name for c in prof.components),
        interruption_time_s=np.asarray(out_t, dtype=float),
        interruption_component=np.asarray(out_comp, dtype=np.int64),
        interruption_size=np.asarray(out_size, dtype=np.int64),
        hosts=hosts,
        spares=int(spares),
    )


def datacenter(
    gpus: int,
    days: float,
    *,
    rng: np.random.Generator,
    profile: str | DatacenterProfile = DEFAULT_DATACENTER_PROFILE,
    spares: int = 0,
    spare_delay_s: float = 600.0,
    name: str | None = None,
) -> Trace:
    """The trace alone of `datacenter_failures`."""
    return datacenter_failures(
        gpus, days, rng=rng, profile=profile, spares=spares, spare_delay_s=spare_delay_s, name=name
    ).trace
