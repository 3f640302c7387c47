"""The flat keys of a simulation's configuration: one table, and each key's checks.

Sweeps, `--set`, result tables and `config.json` name every input of a run by one flat key;
`KEYS` maps each to its group of `SimConfig` and the field there. A design's options are not
flat keys: they live in `design_options` under their own names. The names some of them had
before designs had options (`bamboo_depth` for Bamboo's `depth`, declared with `legacy=`) are
upgraded where a record or a command line is read (`sim.config`), and go no further.
The cost keys, their bounds and the calibrations that use them are `sim.cost_terms`' rows.
`check` holds every rule on a single value and those between values of the flat record, each
failure one line naming the key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from planner.checkpoint_interval import RULES
from planner.input_files import shown
from traces.errors import MAX_HOURS

from .cost_terms import PLANNER_ONLY as _PLANNER_ONLY_COSTS
from .cost_terms import TERMS, must_be, within
from .errors import SimError

CALIBRATIONS = ("artifact", "planner", "artifact-as-run")
ARTIFACT_CALIBRATIONS = ("artifact", "artifact-as-run")  # the artifact's tables and constants
TIMELINES = ("changes", "iterations")
GROUPS = ("job", "design", "costs", "run")

_JOB = ("model", "trace", "global_batch", "microbatch_size", "gpu", "gpus_per_node", "inter_node_gbps")
_CHECKPOINTS = ("checkpoint_every_iterations", "checkpoint_every_s", "checkpoint_adaptive", "checkpoint_prior_mtbf_s")
_COSTS = tuple(TERMS)  # every cost term, in the table's order
_RUN = ("calibration", "artifact_quirks", "seed", "duration_s", "timeline")
# the record's order: the order of the flat record these keys have always been written in
_ORDER = (
    "policy", "model", "trace", "calibration", "seed", "costs", "global_batch", "microbatch_size",
    "gpu", "gpus_per_node", "inter_node_gbps", "node_startup_s", "price_per_node_hour", *_CHECKPOINTS,
    "artifact_quirks", "design_options", *_COSTS[2:], "duration_s", "timeline",
)  # fmt: skip


def _table() -> dict[str, tuple[str, str]]:
    where: dict[str, tuple[str, str]] = {"policy": ("design", "name"), "design_options": ("design", "options")}
    where |= {k: ("job", k) for k in _JOB} | {k: ("design", k) for k in _CHECKPOINTS}
    where |= {k: ("costs", k) for k in _COSTS} | {"costs": ("costs", "profile")}
    where |= {k: ("run", k) for k in _RUN}
    assert sorted(where) == sorted(_ORDER), "internal: the key table and the record's order disagree"
    return {key: where[key] for key in _ORDER}


# flat key -> (group, field); `OPTION`: a design option under its older name
KEYS: dict[str, tuple[str, str]] = _table()
FLAT_KEYS = tuple(KEYS)
BY_FIELD = {(group, name): key for key, (group, name) in KEYS.items()}

# keys each calibration ignores: setting them is an error
PLANNER_ONLY = (
    "global_batch", "microbatch_size", "gpu", "gpus_per_node", "inter_node_gbps",
    "checkpoint_every_s", "checkpoint_adaptive", "checkpoint_prior_mtbf_s", *_PLANNER_ONLY_COSTS,
)  # fmt: skip
ARTIFACT_ONLY = ("artifact_quirks",)

# the longest run `duration_s` may ask for: beyond the trace it holds the last membership
MAX_DURATION_S = MAX_HOURS * 3600.0  # a year: the traces' own bound on generated hours

_NOT_NUMBERS = (
    "policy", "model", "trace", "calibration", "gpu", "timeline", "seed", "costs",
    "design_options", "artifact_quirks", "checkpoint_adaptive",
)  # fmt: skip
_WHOLE = (
    "global_batch", "microbatch_size", "gpus_per_node", "checkpoint_every_iterations",
)  # fmt: skip
_POSITIVE = ("inter_node_gbps", "checkpoint_every_s", "checkpoint_prior_mtbf_s", "duration_s")


def check(flat: Mapping[str, Any]) -> None:
    """Every rule on the flat record `flat` (all of `KEYS`); the first broken one raises."""
    options = flat["design_options"]
    if options is not None and (not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options)):
        raise SimError(f"design_options must map option names to values, got {options!r}")
    if flat["calibration"] not in CALIBRATIONS:
        raise SimError(f"unknown calibration {flat['calibration']!r}; choose one of {', '.join(CALIBRATIONS)}")
    if flat["timeline"] not in TIMELINES:
        raise SimError(f"unknown timeline granularity {flat['timeline']!r}; choose one of {', '.join(TIMELINES)}")
    if not isinstance(flat["trace"], str) or not flat["trace"].strip():
        raise SimError("trace must be a file path or a generator spec, got an empty value")
    if not isinstance(flat["model"], str) or not flat["model"].strip():
        raise SimError("model must be a name or a profile directory, got an empty value")
    seed = flat["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SimError(f"seed must be a whole number >= 0, got {seed!r}")
    costs = flat["costs"]
    if costs is not None and (not isinstance(costs, str) or not costs.strip()):
        raise SimError(f"costs must name a cost profile or a .json file, got {costs!r}")
    for key, value in flat.items():
        if value is not None and key not in _NOT_NUMBERS:
            _check_number(key, value)
    _check_between(flat)


def _check_number(key: str, value: Any) -> None:
    if key in TERMS:
        if not within(key, value):
            raise SimError(f"{key} must be {must_be(key, value)}, got {shown(value)}")
    elif key in _WHOLE:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SimError(f"{key} must be a whole number >= 1, got {value!r}")
    else:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise SimError(f"{key} must be a finite number >= 0, got {value!r}")
        if key in _POSITIVE and value == 0:
            raise SimError(f"{key} must be > 0")


def _check_between(flat: Mapping[str, Any]) -> None:
    duration = flat["duration_s"]
    if duration is not None and duration > MAX_DURATION_S:
        raise SimError(
            f"duration_s {duration:g} is past the bound of {MAX_DURATION_S:g} s (a year): past its last "
            "event a trace's membership is held as it is, so a longer run is extrapolation; give a longer trace"
        )
    if (flat["compute_cores"] is None) != (flat["sample_core_s"] is None):
        raise SimError(
            "compute_cores and sample_core_s bound throughput together (the host's cores and the "
            "core-seconds a sample costs): set both or neither"
        )
    if flat["sample_core_per_worker_s"] is not None and flat["sample_core_s"] is None:
        raise SimError(
            "sample_core_per_worker_s adds to sample_core_s for each worker past the first: "
            "set compute_cores and sample_core_s too"
        )
    if flat["restart_overhead_s"] is not None and (
        flat["restart_fixed_s"] is not None or flat["restart_per_process_s"] is not None
    ):
        raise SimError(
            "restart_overhead_s (a constant relaunch) and restart_fixed_s / restart_per_process_s "
            "(a relaunch growing with its processes) are alternatives: set one"
        )
    if flat["artifact_quirks"] is not None and not isinstance(flat["artifact_quirks"], str):
        raise SimError(f"artifact_quirks must be a comma-separated list of names, got {flat['artifact_quirks']!r}")
    _check_adaptive(flat)
    check_reach(flat["calibration"], flat)


def check_reach(calibration: str, given: Mapping[str, Any]) -> None:
    """No key of `given` that the calibration ignores is set."""
    unused = PLANNER_ONLY if calibration in ARTIFACT_CALIBRATIONS else ARTIFACT_ONLY
    stray = [name for name in unused if given.get(name) is not None]
    if stray:
        raise SimError(
            f"{', '.join(stray)} ha{'s' if len(stray) == 1 else 've'} no effect in the {calibration} calibration"
        )


def _check_adaptive(flat: Mapping[str, Any]) -> None:
    if flat["checkpoint_adaptive"] is None:
        if flat["checkpoint_prior_mtbf_s"] is not None:
            raise SimError("checkpoint_prior_mtbf_s needs checkpoint_adaptive (young or daly)")
        return
    if flat["checkpoint_adaptive"] not in RULES:
        raise SimError(f"unknown checkpoint_adaptive {flat['checkpoint_adaptive']!r}; choose one of {', '.join(RULES)}")
    fixed = [k for k in ("checkpoint_every_iterations", "checkpoint_every_s") if flat[k] is not None]
    if fixed:
        raise SimError(f"checkpoint_adaptive sets the interval: drop {' and '.join(fixed)}")
