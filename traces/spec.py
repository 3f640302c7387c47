"""`from_spec`: one string names a trace, either a file or a generator.

Syntax (keys in any order, values without spaces; durations take a unit: ms, s, m, h, d)::

    PATH                                   a trace file of any supported format
    fixed:interval=1h[,nodes=30][,removals=15][,hour_decimals=N][,seed=S][,start=0s]
    spot[:nodes=N][,hours=H][,profile=p3|g4dn|gcp-a100][,seed=S]
    datacenter[:gpus=16384][,days=54][,profile=llama3|llama3-hardware][,seed=S][,spares=K]...

``fixed`` is `traces.generators.fixed_interval` (defaults: the paper's 30 nodes and 15
removals; ``hour_decimals=3`` rounds the interval to 0.001 h as the Oobleck artifact did,
so ``interval=10m,hour_decimals=3`` removes every 601.2 s; without ``seed`` the oldest
node goes first). ``spot`` is `traces.spot.spot_market` (defaults: the profile's capacity
and the length of the trace it was fitted to; profile p3). A file that exists wins over a
generator of the same name. ``datacenter`` is `traces.datacenter.datacenter_failures`
(hardware failures of a large cluster; its keys are listed in `traces.datacenter_spec`).
``seed`` makes a spec self-contained; without it the ``rng``
argument is used, and without that seed 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from planner.input_files import exists

from . import datacenter_spec
from .errors import TraceError
from .generators import fixed_interval, parse_duration_s, round_interval_to_hours
from .load import load
from .model import Trace
from .spot import get_profile, spot_market
from .spot_profiles import DEFAULT_PROFILE

GENERATOR_KEYS = {
    "fixed": ("interval", "nodes", "removals", "hour_decimals", "seed", "start"),
    "spot": ("nodes", "hours", "profile", "seed"),
    "datacenter": datacenter_spec.KEYS,
}


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Split ``name:key=value,...`` into the generator name and its keys (checked)."""
    name, _, rest = spec.strip().partition(":")
    name = name.strip().lower()
    if name not in GENERATOR_KEYS:
        raise TraceError(
            f"no such trace file, and {name!r} is not a generator "
            f"(known: {', '.join(GENERATOR_KEYS)}; e.g. fixed:interval=1h, spot:nodes=30,hours=24 "
            f"or datacenter:gpus=16384,days=54)",
            source=spec,
        )
    keys: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip().lower()
        if not eq or not value.strip():
            raise TraceError(f"{item!r} is not key=value", source=spec)
        if key not in GENERATOR_KEYS[name]:
            raise TraceError(
                f"unknown key {key!r} for the {name} generator (known: {', '.join(GENERATOR_KEYS[name])})",
                source=spec,
            )
        if key in keys:
            raise TraceError(f"key {key!r} given twice", source=spec)
        keys[key] = value.strip()
    return name, keys


def _int(keys: dict[str, str], key: str, default: int | None, spec: str) -> int:
    if key not in keys:
        if default is None:
            raise TraceError(f"the key {key!r} is required", source=spec)
        return default
    try:
        return int(keys[key])
    except ValueError:
        raise TraceError(f"{key}={keys[key]!r} is not a whole number", source=spec) from None


def _float(keys: dict[str, str], key: str, default: float, spec: str) -> float:
    if key not in keys:
        return default
    try:
        return float(keys[key])
    except ValueError:
        raise TraceError(f"{key}={keys[key]!r} is not a number", source=spec) from None


def generate(spec: str, *, rng: np.random.Generator | None = None) -> Trace:
    """The trace a generator spec describes (see the module docstring)."""
    name, keys = parse_spec(spec)
    if "seed" in keys:
        seed = _int(keys, "seed", None, spec)
        if seed < 0:
            raise TraceError(f"seed={keys['seed']!r} must be a whole number >= 0", source=spec)
        rng = np.random.default_rng(seed)
    try:
        if name == "fixed":
            if "interval" not in keys:
                raise TraceError("the key 'interval' is required (e.g. interval=1h)", source=spec)
            interval_s = parse_duration_s(keys["interval"])
            if "hour_decimals" in keys:
                interval_s = round_interval_to_hours(interval_s, _int(keys, "hour_decimals", None, spec))
            start_s = parse_duration_s(keys["start"]) if "start" in keys else 0.0
            return fixed_interval(
                _int(keys, "nodes", 30, spec),
                _int(keys, "removals", 15, spec),
                interval_s,
                rng=rng,
                start_s=start_s,
                name=spec,
            )
        if name == "datacenter":
            return datacenter_spec.from_keys(keys, rng, spec)
        profile = get_profile(keys.get("profile", DEFAULT_PROFILE))
        return spot_market(
            _int(keys, "nodes", profile.capacity_nodes, spec),
            _float(keys, "hours", profile.duration_h, spec),
            rng=rng if rng is not None else np.random.default_rng(0),
            profile=profile,
            name=spec,
        )
    except TraceError as exc:
        if exc.source is not None:
            raise
        raise TraceError(exc.reason, source=spec) from None


def info_rows(spec: str) -> list[tuple[str, str, float]]:
    """Extra (label, text, value) rows `ooblab traces info` prints for a generator spec."""
    name, keys = parse_spec(spec)
    if name != "datacenter":
        return []
    try:
        return datacenter_spec.info_rows(keys)
    except TraceError as exc:
        raise TraceError(exc.reason, source=spec) from None


def from_spec(
    spec: str,
    *,
    rng: np.random.Generator | None = None,
    fmt: str | None = None,
    repair: bool = False,
) -> Trace:
    """A trace from a file path or a generator spec (see the module docstring).

    ``fmt`` and ``repair`` apply to files (see `traces.load`); ``rng`` picks count-log
    victims for files and drives generators that have no ``seed`` key.
    """
    if not isinstance(spec, (str, Path)) or not str(spec).strip():
        raise TraceError(f"empty trace spec {spec!r}")
    if exists(spec):
        return load(spec, fmt, repair=repair, rng=rng)
    if fmt is not None or repair:
        parse_spec(str(spec))  # say "no such file" / "unknown generator" first
        raise TraceError("format and repair apply to trace files, not generators", source=str(spec))
    return generate(str(spec), rng=rng)
