"""A design's options: a frozen dataclass whose fields say their unit, meaning and reach.

Each field is declared with `option(default, doc=..., unit=..., where=..., legacy=...)`:

- `where`: where the option has an effect, among `ARTIFACT` and `PLANNER` (the
  simulator's calibrations) and `REAL` (the real backend); setting it elsewhere is an error,
  never a silent no-op.
- `legacy`: the name of the engine config field that carried the option before designs had
  options of their own (`bamboo_depth` for Bamboo's `depth`); that field keeps working and
  is where the value is stored, so old configs and their result keys stay as they were.
- `minimum`: the smallest value allowed (numbers); `positive`: strictly above `minimum`.

`make_options` turns a mapping of settings into the dataclass, checking names, types and
values, each failure one line (`DesignError`) that names the option and what is known.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ARTIFACT, PLANNER, REAL = "artifact", "planner", "real"
EVERYWHERE = (ARTIFACT, PLANNER, REAL)
WHERE_TITLES = {ARTIFACT: "the artifact calibration", PLANNER: "the planner calibration", REAL: "the real backend"}
_KINDS = {"bool": bool, "int": int, "float": float, "str": str}


class DesignError(ValueError):
    """A design or its options cannot be used; the message names the problem and the known names."""


def option(
    default: Any,
    *,
    doc: str,
    unit: str = "",
    where: tuple[str, ...] = EVERYWHERE,
    legacy: str | None = None,
    minimum: float | None = None,
    positive: bool = False,
) -> Any:
    """A dataclass field for a design option (see the module docstring)."""
    unknown = set(where) - set(EVERYWHERE)
    if unknown:
        raise DesignError(f"internal: option where={where!r}; known: {', '.join(EVERYWHERE)}")
    meta = {"doc": doc, "unit": unit, "where": tuple(where), "legacy": legacy, "minimum": minimum, "positive": positive}
    return dataclasses.field(default=default, metadata={"ooblab": meta})


@dataclass(frozen=True)
class OptionSpec:
    """One option as listed by `ooblab designs`: name, type name, default, unit, doc, reach."""

    name: str
    type: str
    default: Any
    unit: str
    doc: str
    where: tuple[str, ...]
    legacy: str | None
    minimum: float | None = None
    positive: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"where": list(self.where)}


@dataclass(frozen=True)
class NoOptions:
    """The options of a design that has none."""


@functools.lru_cache(maxsize=256)
def specs(options: type) -> tuple[OptionSpec, ...]:
    """The options of a design's dataclass, in declaration order (read once per class)."""
    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise DesignError(f"a design's options must be a dataclass, got {options!r}")
    if not options.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise DesignError(f"a design's options must be a frozen dataclass: {options.__name__} is not frozen")
    hints = typing.get_type_hints(options)
    out = []
    for f in dataclasses.fields(options):
        kind = hints[f.name]
        name = getattr(kind, "__name__", None)
        if name not in _KINDS:
            raise DesignError(f"option {options.__name__}.{f.name} must be bool, int, float or str, got {kind!r}")
        if f.default is dataclasses.MISSING:
            raise DesignError(f"option {options.__name__}.{f.name} needs a default")
        meta = f.metadata.get("ooblab", {})
        if not meta.get("doc"):
            raise DesignError(f"option {options.__name__}.{f.name} needs a doc: declare it with designs.option(...)")
        out.append(
            OptionSpec(
                f.name,
                name,
                f.default,
                meta.get("unit", ""),
                meta["doc"],
                meta.get("where", EVERYWHERE),
                meta.get("legacy"),
                meta.get("minimum"),
                meta.get("positive", False),
            )
        )
    return tuple(out)


def parse_text(text: str) -> Any:
    """A `--set KEY=VALUE` value: true/false, none, an int, a float, else the text."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def check_value(design: str, spec: OptionSpec, value: Any) -> Any:
    """`value` as the option's type, or a one-line error naming the option."""
    label = f"{design} option {spec.name}"
    if spec.type == "bool":
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            value = value.strip().lower() == "true"
        if not isinstance(value, bool):
            raise DesignError(f"{label} must be true or false, got {value!r}")
        return value
    if spec.type == "str":
        if not isinstance(value, str):
            raise DesignError(f"{label} must be text, got {value!r}")
        return value
    if isinstance(value, str):
        value = parse_text(value)
    if spec.type == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise DesignError(f"{label} must be a whole number, got {value!r}")
    elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise DesignError(f"{label} must be a finite number{_unit(spec)}, got {value!r}")
    else:
        value = float(value)
    if spec.minimum is not None:
        if spec.positive and not value > spec.minimum:
            raise DesignError(f"{label} must be > {spec.minimum:g}{_unit(spec)}, got {value!r}")
        if not value >= spec.minimum:
            raise DesignError(f"{label} must be >= {spec.minimum:g}{_unit(spec)}, got {value!r}")
    return value


def _unit(spec: OptionSpec) -> str:
    return f" ({spec.unit})" if spec.unit else ""


def make_options(design: str, options: type, values: Mapping[str, Any]) -> Any:
    """The options dataclass of `design` from `values` (option names or their legacy names);
    an unknown name is an error that lists the design's options."""
    known = specs(options)
    by_name = {s.name: s for s in known} | {s.legacy: s for s in known if s.legacy}
    chosen: dict[str, Any] = {}
    for key, value in values.items():
        spec = by_name.get(key)
        if spec is None:
            names = ", ".join(s.name for s in known) or "none"
            raise DesignError(f"unknown option {key!r} of design {design}; its options: {names}")
        if spec.name in chosen and chosen[spec.name] != value:
            raise DesignError(f"{design} option {spec.name} is given twice ({spec.legacy} and {spec.name})")
        chosen[spec.name] = check_value(design, spec, value)
    try:
        return options(**chosen)
    except DesignError:
        raise
    except (TypeError, ValueError) as exc:  # the dataclass's own cross-field checks
        raise DesignError(f"{design} options: {exc}") from None


def as_dict(values: Any) -> dict[str, Any]:
    """An options dataclass as JSON-ready name -> value."""
    return {f.name: getattr(values, f.name) for f in dataclasses.fields(values)}
