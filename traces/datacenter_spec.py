"""The ``datacenter:`` trace spec: keys, their units and defaults, and what `info` adds.

::

    datacenter[:gpus=16384][,days=54][,profile=llama3|llama3-hardware][,seed=S]
              [,spares=0][,spare_delay=10m][,gpus_per_host=8][,hosts_per_rack=2]
              [,repair_sigma=1.0][,COMPONENT_mtbf=DURATION|off][,COMPONENT_repair=DURATION]
              [,rate=PER_DAY]

COMPONENT is one of ``gpu`` (mtbf per GPU), ``host`` and ``cable`` (per host), ``switch``
(per rack's ToR switch) and ``software`` (per host); ``_repair`` is the median repair time.
Defaults are the profile's (`traces.datacenter_profiles`): Llama 3's 16,384 GPUs over its
54-day snapshot. ``days`` is a number of days; mtbf and repair take a unit (``3301d``,
``4h``); ``COMPONENT_mtbf=off`` removes that component. ``rate`` sets the expected
interruptions per day at the trace's size (``gpus``, every host up): every component's MTBF
is scaled by one factor, so the mix of causes stays the profile's (after any
``COMPONENT_mtbf`` given), e.g. FT-HSDP's "a failure every 18 minutes at 98,304 GPUs"
(arXiv 2602.00277) is ``datacenter:gpus=98304,days=3,rate=80``.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .datacenter import (
    datacenter_failures,
    expected_interruptions_per_day,
    get_datacenter_profile,
)
from .datacenter_profiles import (
    DEFAULT_DATACENTER_PROFILE,
    LLAMA3_DAYS,
    LLAMA3_GPUS,
    LLAMA3_UNEXPECTED,
    DatacenterProfile,
)
from .errors import TraceError
from .generators import parse_duration_s
from .model import Trace

COMPONENTS = ("gpu", "host", "cable", "switch", "software")
KEYS = (
    "gpus",
    "days",
    "profile",
    "seed",
    "spares",
    "spare_delay",
    "gpus_per_host",
    "hosts_per_rack",
    "repair_sigma",
    "rate",
    *(f"{c}_{what}" for c in COMPONENTS for what in ("mtbf", "repair")),
)


def _number(keys: dict[str, str], key: str, kind: type, default):
    if key not in keys:
        return default
    try:
        value = kind(keys[key])
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise TraceError(f"{key}={keys[key]!r} is not {what}") from None
    if kind is float and not math.isfinite(value):
        raise TraceError(f"{key}={keys[key]!r} must be finite")
    return value


def profile_from_keys(keys: dict[str, str]) -> DatacenterProfile:
    """The named profile with every override the keys give."""
    prof = get_datacenter_profile(keys.get("profile", DEFAULT_DATACENTER_PROFILE))
    prof = replace(
        prof,
        gpus_per_host=_number(keys, "gpus_per_host", int, prof.gpus_per_host),
        hosts_per_rack=_number(keys, "hosts_per_rack", int, prof.hosts_per_rack),
        repair_sigma=_number(keys, "repair_sigma", float, prof.repair_sigma),
    )
    for key in ("gpus_per_host", "hosts_per_rack"):
        if getattr(prof, key) < 1:
            raise TraceError(f"{key}={keys.get(key)!r} must be a whole number >= 1")
    comps = {c.name: c for c in prof.components}
    for name in COMPONENTS:
        for what in ("mtbf", "repair"):
            key = f"{name}_{what}"
            if key not in keys:
                continue
            if name not in comps:
                raise TraceError(f"{key}: profile {prof.name} has no {name} component")
            if what == "mtbf" and keys[key].lower() == "off":
                del comps[name]
                continue
            value_s = parse_duration_s(keys[key])
            if value_s <= 0:
                raise TraceError(f"{key} must be > 0, got {keys[key]!r}")
            if what == "mtbf":
                comps[name] = replace(comps[name], mtbf_d=value_s / 86400.0)
            else:
                comps[name] = replace(comps[name], repair_median_h=value_s / 3600.0)
    prof = replace(prof, components=tuple(comps.values()))
    if "rate" in keys:
        prof = _at_rate(prof, _number(keys, "gpus", int, LLAMA3_GPUS), _number(keys, "rate", float, 0.0))
    return prof


def _at_rate(prof: DatacenterProfile, gpus: int, per_day: float) -> DatacenterProfile:
    """`prof` with every component's MTBF scaled by one factor, so that a job on `gpus`
    GPUs expects `per_day` interruptions a day (the mix of causes kept)."""
    if not per_day > 0:
        raise TraceError(f"rate must be > 0 interruptions per day, got {per_day!r}")
    if not prof.components:
        raise TraceError("rate: every component is off, so no rate can be set")
    factor = expected_interruptions_per_day(gpus, prof) / per_day
    return replace(prof, components=tuple(replace(c, mtbf_d=c.mtbf_d * factor) for c in prof.components))


def from_keys(keys: dict[str, str], rng: np.random.Generator | None, name: str) -> Trace:
    """The trace a ``datacenter:`` spec's keys describe."""
    prof = profile_from_keys(keys)
    return datacenter_failures(
        _number(keys, "gpus", int, LLAMA3_GPUS),
        _number(keys, "days", float, float(LLAMA3_DAYS)),
        rng=rng if rng is not None else np.random.default_rng(0),
        profile=prof,
        spares=_number(keys, "spares", int, 0),
        spare_delay_s=parse_duration_s(keys["spare_delay"]) if "spare_delay" in keys else 600.0,
        name=name,
    ).trace


def info_rows(keys: dict[str, str]) -> list[tuple[str, str, float]]:
    """(label, text, value) rows `ooblab traces info` adds for a datacenter spec."""
    prof = profile_from_keys(keys)
    gpus = _number(keys, "gpus", int, LLAMA3_GPUS)
    expected = expected_interruptions_per_day(gpus, prof)
    published = LLAMA3_UNEXPECTED / LLAMA3_DAYS
    scaled = []
    if "rate" in keys:
        unscaled = profile_from_keys({k: v for k, v in keys.items() if k != "rate"})
        factor = expected_interruptions_per_day(gpus, unscaled) / expected
        mtbf = ", ".join(f"{c.name} {c.mtbf_d:,.0f} d" for c in prof.components)
        scaled = [
            (
                "rate",
                f"{expected:.2f} per day as asked (one failure every {1440.0 / expected:.1f} min): every MTBF "
                f"x {factor:.4g} ({mtbf}), the profile's mix of causes kept",
                expected,
            )
        ]
    return [
        *scaled,
        (
            "expected/day",
            (f"{expected:.2f} interruptions per day with every host up (profile {prof.name}, {gpus} GPUs)"),
            expected,
        ),
        (
            "published/day",
            (
                f"{published:.2f} (Llama 3: {LLAMA3_UNEXPECTED} unexpected interruptions, "
                f"{LLAMA3_GPUS} GPUs, {LLAMA3_DAYS} days)"
            ),
            published,
        ),
    ]
