"""Cost profiles: what the planner calibration charges that is neither the model nor the
design, each price with its unit and where it comes from.

A profile names values for some of the priced cost terms (`sim.cost_terms.PRICED`: the
`CostConfig` fields of the same names, their units and bounds); a run that names a profile (`--costs NAME|FILE`) takes them where it sets no value of its
own (`--set` wins), and the calibration's defaults for the rest. Built-ins are in
`sim.cost_builtins`; a file is JSON in the form `ooblab costs NAME --json` prints:

    {"format": "ooblab-costs", "version": 1, "name": "...", "description": "...",
     "costs": {"restart_fixed_s": {"value": 441.3, "unit": "s", "source": "..."}, ...}}

Every value needs its unit (the key's, checked) and a non-empty `source`: a paper and its
table, "fitted by ooblab validate on HOST", or "assumed: why". A value may also say the range
its source measured it over (`"range": {"over": "gpus", "low": 2048, "high": 16384}`, or
`nodes`): a run whose job lies outside it uses the value all the same and says so
(`extrapolated`: the run's output and summary name the term, the range and the size). A bad
file is a `CostProfileError` naming the file and the key.

A profile is complete: it names a `base` (a built-in: `"base": "paper"` or
`"h100-datacenter"`) and inherits every value it leaves out, or it prices every term a run
needs (`REQUIRED`: the cluster terms that have a default) and a missing one is an error
naming it. Nothing a profile leaves out falls back silently to another default.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from planner.input_files import MIB, InputFileError, read_json, shown

from .cost_builtins import DATA
from .cost_terms import PRICED, must_be, paper_values, within
from .errors import SimError

FORMAT, VERSION = "ooblab-costs", 1


# the terms a profile without a base must price: every cluster term that has a default
REQUIRED = tuple(paper_values())
MAX_FILE_BYTES = MIB  # a profile is a few kilobytes
_BUILT: dict[str, CostProfile] = {}  # the built-ins as they are built (`BUILTIN`): the bases


class CostProfileError(SimError):
    """A cost profile that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class Cost:
    """One price: its value in `unit` and where it comes from."""

    value: float | bool
    unit: str
    source: str
    measured: MeasuredRange | None = None  # the range its source measured it over


RANGE_OVER = ("gpus", "nodes")


@dataclass(frozen=True)
class MeasuredRange:
    """The job sizes (`over`: GPUs or nodes) a value's source measured it at, inclusive."""

    over: str
    low: float
    high: float

    def to_dict(self) -> dict[str, Any]:
        return {"over": self.over, "low": self.low, "high": self.high}

    def outside(self, gpus: int, nodes: int) -> int | None:
        """The job's size when it lies outside the range, else None."""
        size = gpus if self.over == "gpus" else nodes
        return size if not self.low <= size <= self.high else None


@dataclass(frozen=True)
class CostProfile:
    name: str
    description: str
    costs: Mapping[str, Cost]  # resolved: its own values and those inherited from `base`
    base: str | None = None
    inherited: tuple[str, ...] = ()  # the keys of `costs` taken from `base`

    def to_dict(self) -> dict[str, Any]:
        """The file form (`load_file` reads it back)."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "description": self.description,
            **({"base": self.base} if self.base is not None else {}),
            "costs": {k: _entry(c) for k, c in self.costs.items() if k not in self.inherited},
        }

    def values(self) -> dict[str, float | bool]:
        return {key: cost.value for key, cost in self.costs.items()}


def _entry(cost: Cost) -> dict[str, Any]:
    out: dict[str, Any] = {"value": cost.value, "unit": cost.unit, "source": cost.source}
    if cost.measured is not None:
        out["range"] = cost.measured.to_dict()
    return out


def parse(data: Any, *, where: str) -> CostProfile:
    """A `CostProfile` from the file form, every key, unit and value checked."""
    if not isinstance(data, dict):
        raise CostProfileError(f"{where}: a cost profile is a JSON object, got {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise CostProfileError(f"{where}: 'format' must be {FORMAT!r}, got {data.get('format')!r}")
    if data.get("version") != VERSION:
        raise CostProfileError(f"{where}: version {data.get('version')!r} is not one this ooblab reads ({VERSION})")
    stray = sorted(set(data) - {"format", "version", "name", "description", "base", "costs"})
    if stray:
        raise CostProfileError(f"{where}: unknown field(s) {', '.join(stray)}")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise CostProfileError(f"{where}: 'name' must be a non-empty string")
    costs = data.get("costs")
    if not isinstance(costs, dict) or not costs:
        raise CostProfileError(f"{where}: 'costs' must map cost keys to {{value, unit, source}}")
    out = {}
    for key, entry in costs.items():
        out[key] = _cost(key, entry, where=where)
    description = str(data.get("description", ""))
    base = data.get("base")
    if base is None:
        missing = [key for key in REQUIRED if key not in out]
        if missing:
            raise CostProfileError(
                f"{where}: prices no {', '.join(missing)}, which a run needs: give them, or name a base to "
                f'inherit them from ("base": one of {", ".join(_BUILT) or "paper"})'
            )
        return CostProfile(name, description, out)
    if not isinstance(base, str) or base not in _BUILT:
        raise CostProfileError(f"{where}: base {base!r} is not a built-in profile ({', '.join(_BUILT)})")
    inherited = tuple(key for key in _BUILT[base].costs if key not in out)
    resolved = {**{key: _BUILT[base].costs[key] for key in inherited}, **out}
    return CostProfile(name, description, resolved, base, inherited)


def _cost(key: str, entry: Any, *, where: str) -> Cost:
    if key not in PRICED:
        raise CostProfileError(f"{where}: unknown cost {key!r} (known: {', '.join(PRICED)})")
    unit = PRICED[key].unit
    if not isinstance(entry, dict):
        raise CostProfileError(f"{where}: {key}: expected {{value, unit, source}}, got {entry!r}")
    stray = sorted(set(entry) - {"value", "unit", "source", "range"})
    if stray:
        raise CostProfileError(f"{where}: {key}: unknown field(s) {', '.join(stray)}")
    if "unit" not in entry:
        raise CostProfileError(f"{where}: {key}: no unit (it is in {unit})")
    if entry["unit"] != unit:
        raise CostProfileError(f"{where}: {key}: unit {entry['unit']!r}, but {key} is in {unit}")
    value: Any = entry.get("value")
    if value is None or not within(key, value):
        raise CostProfileError(f"{where}: {key}: value must be {must_be(key, value)}, got {shown(value)}")
    source = entry.get("source")
    if not isinstance(source, str) or not source.strip():
        raise CostProfileError(f"{where}: {key}: no source (a paper and its table, a fit, or 'assumed: why')")
    measured = _range(key, entry["range"], where=where) if "range" in entry else None
    return Cost(value if unit == "bool" else float(value), unit, source.strip(), measured)


def _range(key: str, data: Any, *, where: str) -> MeasuredRange:
    """An entry's `range`, checked: over gpus or nodes, 1 <= low <= high, finite."""
    form = f"{{over: {' or '.join(RANGE_OVER)}, low, high}}"
    if not isinstance(data, dict) or set(data) != {"over", "low", "high"}:
        raise CostProfileError(f"{where}: {key}: range must be {form}, got {data!r}")
    if data["over"] not in RANGE_OVER:
        raise CostProfileError(f"{where}: {key}: range over {data['over']!r}: choose {' or '.join(RANGE_OVER)}")
    low, high = data["low"], data["high"]
    for bound in (low, high):
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound) or bound < 1:
            raise CostProfileError(f"{where}: {key}: range bounds must be finite numbers >= 1, got {bound!r}")
    if low > high:
        raise CostProfileError(f"{where}: {key}: range low {low!r} is above high {high!r}")
    return MeasuredRange(str(data["over"]), float(low), float(high))


def extrapolated(profile: CostProfile | None, given: Any, gpus: int, nodes: int) -> list[str]:
    """One line per term a run takes from its profile outside the range the value's source
    measured (`given`: the run's costs before `apply`: a value set by hand is the user's,
    with no range)."""
    if profile is None:
        return []
    lines = []
    for key, cost in profile.costs.items():
        if cost.measured is None or getattr(given, key) is not None:
            continue
        size = cost.measured.outside(gpus, nodes)
        if size is not None:
            m = cost.measured
            lines.append(
                f"{key} = {cost.value:g} {cost.unit} from {profile.name} was measured at {m.low:,.0f}-{m.high:,.0f} "
                f"{m.over}; this job has {size:,} {m.over}: extrapolated"
            )
    return lines


def _checked(
    name: str, description: str, costs: Mapping[str, Mapping[str, Any]], *, where: str, base: str | None = None
) -> CostProfile:
    """A profile built in code, put in the file form and checked as a file would be."""
    data: dict[str, Any] = {"format": FORMAT, "version": VERSION, "name": name, "description": description}
    if base is not None:
        data["base"] = base
    data["costs"] = dict(costs)
    return parse(data, where=where)


def from_values(
    name: str, description: str, values: Mapping[str, Any], sources: Mapping[str, str], *, base: str = "paper"
) -> CostProfile:
    """A profile of `values` (cost keys; others are left out), each with its source
    (`sources[key]`, else `sources["*"]`), on `base`, checked as a file's would be."""
    costs = {
        key: {"value": value, "unit": PRICED[key].unit, "source": sources.get(key, sources.get("*", ""))}
        for key, value in values.items()
        if key in PRICED
    }
    return _checked(name, description, costs, where=f"profile {name}", base=base)


def load_file(path: str | Path) -> CostProfile:
    """A profile file (JSON, at most `MAX_FILE_BYTES`; a byte order mark is fine)."""
    try:
        data = read_json(path, what="a cost profile (JSON text)", cap_bytes=MAX_FILE_BYTES)
    except InputFileError as exc:
        raise CostProfileError(str(exc)) from None
    return parse(data, where=str(path))


def _builtin_entry(entry: tuple) -> dict[str, Any]:
    """A built-in's (value, unit, source[, (over, low, high)]) in the file form."""
    out: dict[str, Any] = {"value": entry[0], "unit": entry[1], "source": entry[2]}
    if len(entry) > 3:
        over, low, high = entry[3]
        out["range"] = {"over": over, "low": low, "high": high}
    return out


# the built-ins' units are given, not taken from the terms, so a wrong one is caught here too;
# built in order, so that a later one can name an earlier one as its base
for _name, (_text, _values, _base) in DATA.items():
    _BUILT[_name] = _checked(
        _name,
        _text,
        {key: _builtin_entry(entry) for key, entry in _values.items()},
        where=f"built-in {_name}",
        base=_base,
    )
BUILTIN: dict[str, CostProfile] = dict(_BUILT)


def get(name_or_path: str) -> CostProfile:
    """A built-in by name, else a profile file."""
    if name_or_path in BUILTIN:
        return BUILTIN[name_or_path]
    if name_or_path.endswith(".json") or "/" in name_or_path or Path(name_or_path).exists():
        return load_file(name_or_path)
    raise CostProfileError(
        f"unknown cost profile {name_or_path!r}: built-ins are {', '.join(BUILTIN)}, or give a .json file"
    )


def apply(config: Any, profile: CostProfile | None = None) -> Any:
    """`config` (a `SimConfig`) with its profile's values where it sets none (`profile`: the
    one it names, when the caller has read it already)."""
    if config.costs.profile is None:
        return config
    if profile is None:
        profile = get(config.costs.profile)
    if config.run.calibration != "planner":
        priced = sorted(key for key in profile.costs if config.run.calibration not in PRICED[key].calibrations)
        if priced:
            raise CostProfileError(
                f"cost profile {profile.name!r} prices {', '.join(priced)}, which the {config.run.calibration} "
                "calibration takes from the artifact: use --calibration planner"
            )
    fill = {key: value for key, value in profile.values().items() if getattr(config.costs, key) is None}
    if config.costs.restart_overhead_s is not None:  # the older constant relaunch, set by hand, wins over the line
        fill = {k: v for k, v in fill.items() if k not in ("restart_fixed_s", "restart_per_process_s")}
    return replace(config, costs=replace(config.costs, **fill))
