"""A simulation's configuration: four small records, and one table of the flat keys.

`SimConfig` groups every input of a run by what it is about:

- `job` (`JobConfig`): the model, the trace, the batch and the cluster;
- `design` (`DesignConfig`): the design's name, its options (Bamboo's `depth`, Oobleck's
  `fault_tolerance`, ...) and the checkpoint schedule any checkpointing design follows;
- `costs` (`CostConfig`): the cost profile (`sim.cost_profiles`) and one field a cost term
  of `sim.cost_terms` (start-ups, relaunches, checkpoints, detection, the terms that `ooblab
  validate` fits, the sensitivity factors), the fields made from that table;
- `run` (`RunControl`): the calibration, seed, duration and timeline granularity.

Fields left at None take the profile's or the calibration's default when the run is set up
(`sim.setup`). Sweeps, `--set`, result tables and `config.json` name each input by one flat
key (`global_batch`, `restart_fixed_s`): `KEYS` maps each to its group and field, and `--set`
also takes the dotted form (`job.global_batch`). A design's option keeps its own name from
`--set depth=3` (or `design.depth`) to the policy, in `design_options`; an older flat name of
it (`bamboo_depth`, declared with `legacy=`) is upgraded to that name where a command line or
a record is read, and goes no further. `config.json` records the flat keys as
given plus `effective_<key>` for each default filled in, so `SimConfig.from_record(json)`
reruns a run from its directory, whichever version wrote it. An option that the calibration
does not use must stay unset: setting one is an error rather than a silent no-op.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, make_dataclass
from typing import TYPE_CHECKING, Any

from designs import registry
from designs.options import ARTIFACT, DesignError

from .config_keys import (
    ARTIFACT_CALIBRATIONS,
    BY_FIELD,
    CALIBRATIONS,
    FLAT_KEYS,
    GROUPS,
    KEYS,
    TIMELINES,
    check,
)
from .cost_terms import TERMS
from .errors import SimError

__all__ = [
    "ARTIFACT_CALIBRATIONS",
    "CALIBRATIONS",
    "FLAT_KEYS",
    "TIMELINES",
    "CostConfig",
    "DesignConfig",
    "JobConfig",
    "RunControl",
    "SimConfig",
]


@dataclass(frozen=True)
class JobConfig:
    """What is trained, on what, through which membership changes."""

    model: str = "GPT-3-medium"
    trace: str = "fixed:interval=1h"  # a trace file or a generator spec
    global_batch: int | None = None  # default: the artifact's batch for its model names
    microbatch_size: int | None = None  # default 1
    gpu: str | None = None  # default v100-16gb (the p3.2xlarge of the artifact's prices)
    gpus_per_node: int | None = None  # default 1
    inter_node_gbps: float | None = None  # default: the GPU type's (10 Gb/s for the V100)


@dataclass(frozen=True)
class DesignConfig:
    """The design (`designs.registry`), its options by name, and the checkpoint schedule."""

    name: str = "oobleck"
    options: Mapping[str, Any] | None = None  # None: every option at its default
    checkpoint_every_iterations: int | None = None  # Varuna: default 10
    checkpoint_every_s: float | None = None  # Oobleck and Bamboo (planner): default 3600 s
    # adaptive interval, any design that checkpoints (planner): "young" or "daly", from the
    # checkpoints charged so far and the failures seen so far (planner.checkpoint_interval)
    checkpoint_adaptive: str | None = None
    checkpoint_prior_mtbf_s: float | None = None  # the adaptive rule's prior MTBF, default 3600 s

    def option(self, name: str) -> Any:
        """The option `name` as given, None where it is not."""
        return (self.options or {}).get(name)


def _cost_config() -> type:
    """`CostConfig`, a frozen dataclass of `profile` and one field a cost term
    (`sim.cost_terms.TERMS`, in its order), each None unless set."""
    fields = [("profile", "str | None", field(default=None))]
    fields += [(key, "Any", field(default=None)) for key in TERMS]
    doc = (
        "The prices a run charges: a cost profile (a built-in's name or a .json file, whose "
        "values fill the fields left unset) and one field a cost term (sim.cost_terms)."
    )
    return make_dataclass("CostConfig", fields, frozen=True, namespace={"__doc__": doc, "__module__": __name__})


if TYPE_CHECKING:

    @dataclass(frozen=True)
    class CostConfig:
        """What the type checker sees of the record `_cost_config` makes."""

        profile: str | None = None

        def __init__(self, profile: str | None = None, **terms: Any) -> None: ...

        def __getattr__(self, key: str) -> Any: ...

else:
    CostConfig = _cost_config()


@dataclass(frozen=True)
class RunControl:
    """How the run is simulated and what it writes."""

    calibration: str = "artifact"
    # artifact calibrations: the artifact code's departures from its stated model
    # (sim.artifact_quirks: "all", "none", names, or -names from all); default: none in
    # `artifact`, all in `artifact-as-run`
    artifact_quirks: str | None = None
    seed: int = 0  # trace generators and count-log victims
    # how long: seconds from the trace's first event (None: until its last event; longer
    # runs on past it with the membership as the trace left it)
    duration_s: float | None = None
    timeline: str = "changes"  # timeline rows at state changes, or also one per iteration


_GROUP_TYPES = {"job": JobConfig, "design": DesignConfig, "costs": CostConfig, "run": RunControl}


@dataclass(frozen=True)
class SimConfig:
    """Everything a run depends on, by group (None in a group: the default)."""

    job: JobConfig = field(default_factory=JobConfig)
    design: DesignConfig = field(default_factory=DesignConfig)
    costs: CostConfig = field(default_factory=CostConfig)
    run: RunControl = field(default_factory=RunControl)

    def __post_init__(self) -> None:
        for name, kind in _GROUP_TYPES.items():
            if not isinstance(getattr(self, name), kind):
                raise SimError(f"internal: SimConfig.{name} must be a {kind.__name__}, got {getattr(self, name)!r}")
        try:
            registry.get(self.design.name)
        except DesignError as exc:
            raise SimError(str(exc)) from None
        check(self.to_dict())
        if self.design.options:  # each option by its design's rules (value, calibration), at once
            where = ARTIFACT if self.run.calibration in ARTIFACT_CALIBRATIONS else self.run.calibration
            try:
                registry.resolve(self.design.name, dict(self.design.options), where)
            except DesignError as exc:
                raise SimError(str(exc)) from None

    # -- from and to the flat keys -----------------------------------------------------------
    @classmethod
    def of(cls, **flat: Any) -> SimConfig:
        """Build from flat keys (`global_batch=...`, `bamboo_depth=...`; see `KEYS`)."""
        return cls.from_mapping(flat)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> SimConfig:
        """Build from a mapping of flat keys (a config.json, a sweep's parameters), dotted
        keys (`job.global_batch`, `design.depth` for an option) or groups (`{"job": {...}}`),
        rejecting unknown keys by name; `design` naming a design is another name for `policy`.
        An option given by its older flat name (`bamboo_depth`) is upgraded here to its own
        name in the design's options."""
        flat: dict[str, Any] = {}
        options: dict[str, Any] = {}
        older: dict[str, Any] = {}
        legacy = registry.legacy_fields()
        for key, value in _expanded(data).items():
            if key in KEYS:
                flat[key] = value
                continue
            if key in legacy:
                if value is not None:
                    older[key] = value
                continue
            group, _, name = key.partition(".")
            if (group, name) in BY_FIELD:
                flat[BY_FIELD[(group, name)]] = value
            elif group == "design" and name:
                options[name] = value
            else:
                known = ", ".join(sorted(KEYS))
                raise SimError(f"unknown config key(s) {key}; known: {known} (or group.field, design.OPTION)")
        if options:
            flat["design_options"] = {**options, **(flat.get("design_options") or {})}
        return cls._from_flat(flat, older)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> SimConfig:
        """The config of a run's `config.json` (its input keys; derived keys ignored), a
        record written before designs had options included (its older option keys upgraded)."""
        legacy = registry.legacy_fields()
        older = {k: v for k, v in record.items() if k in legacy and v is not None}
        return cls._from_flat({k: v for k, v in record.items() if k in KEYS}, older)

    @classmethod
    def _from_flat(cls, flat: Mapping[str, Any], older: Mapping[str, Any] | None = None) -> SimConfig:
        parts: dict[str, dict[str, Any]] = {group: {} for group in GROUPS}
        for key, value in flat.items():
            group, name = KEYS[key]
            parts[group][name] = value
        if older:
            parts["design"]["options"] = _with_older_options(
                parts["design"].get("name", DesignConfig.name), parts["design"].get("options"), older
            )
        return cls(**{group: _GROUP_TYPES[group](**values) for group, values in parts.items()})

    def to_dict(self) -> dict[str, Any]:
        """The flat record (`KEYS`' order): config.json's inputs, a sweep's parameters."""
        return {key: getattr(getattr(self, group), name) for key, (group, name) in KEYS.items()}

    def with_(self, **changes: Any) -> SimConfig:
        """This config with some flat keys changed (an option's older flat name changes that
        option)."""
        legacy = registry.legacy_fields()
        older = {k: v for k, v in changes.items() if k in legacy}
        flat = {**self.to_dict(), **{k: v for k, v in changes.items() if k not in legacy}}
        if older:
            flat["design_options"] = _with_older_options(
                flat["policy"], flat.get("design_options"), {k: v for k, v in older.items() if v is not None}, True
            )
        return SimConfig._from_flat(flat)


def _expanded(data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` with groups given as mappings turned into dotted keys, and `design` naming a
    design turned into `policy`."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in GROUPS and isinstance(value, Mapping):
            out.update({f"{key}.{name}": inner for name, inner in value.items()})
        elif key == "design":
            if data.get("policy", value) != value:
                raise SimError(f"design {value!r} and policy {data['policy']!r} disagree: give one")
            out["policy"] = value
        else:
            out[key] = value
    return out


def _with_older_options(design: str, options: Any, older: Mapping[str, Any], override: bool = False) -> Any:
    """`options` with the options `older` gives by their older flat keys (Bamboo's
    `bamboo_depth`), under their own names; an option also in `options` keeps that value
    (unless `override`). A key of another design is an error."""
    try:
        specs = registry.get(design).option_specs
    except DesignError as exc:
        raise SimError(str(exc)) from None
    if options is not None and not isinstance(options, Mapping):
        return options  # `check` names the problem
    merged = dict(options or {})
    by_key = {spec.legacy: spec.name for spec in specs if spec.legacy}
    for key, value in older.items():
        if key not in by_key:
            owners = registry.legacy_fields().get(key, ())
            raise SimError(f"{key} applies to {' and '.join(owners)}, not {design}")
        if override:
            merged[by_key[key]] = value
        else:
            merged.setdefault(by_key[key], value)
    return merged
