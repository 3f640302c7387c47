"""Simulator runs inside a sweep: the spec helper and the runner.

A simulator spec's parameters are flat: the `SimConfig` fields it sets (`policy`,
`model`, `calibration`, options...; checked by name), `trace` (a `tracesrc` reference)
and the labels the experiment's figures group by (`system`, `trace_label`, ...; labels
never reach the simulator, but they are part of the key).
The runner resolves the trace, runs `sim.simulate`, writes the run's four files and
returns its summary plus the trace's facts (`trace_*`). A configuration the simulator
or planner rejects (e.g. f = 3 with too few nodes) becomes a row with `outcome` "error"
and the reason, so one impossible corner does not sink a sweep.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from planner.records import RAN_OUTCOMES

from .sweep import RunSpec
from .tracesrc import TraceChoice

KIND = "sim"


def _config_fields() -> frozenset[str]:
    from sim.config import FLAT_KEYS

    return frozenset(FLAT_KEYS)


def sim_spec(
    experiment: str,
    trace: TraceChoice,
    *,
    system: str | None = None,
    labels: Mapping[str, Any] | None = None,
    **config: Any,
) -> RunSpec:
    """A simulator run: `config` holds SimConfig fields (checked by name) and options of its
    design (`design=` is another name for `policy=`; options without a SimConfig field go to
    `design_options`), `labels` what the figures group by; `system` (default the design)
    names the bar or line it feeds."""
    fields_ = _config_fields()
    if "design" in config:
        config = dict(config)
        config["policy"] = config.pop("design")
    extra = {k: v for k, v in config.items() if k not in fields_}
    if extra:
        from designs.cli import split_settings
        from designs.options import DesignError

        try:
            into_fields, options = split_settings(config.get("policy", "oobleck"), extra, fields_)
        except DesignError as exc:
            raise ValueError(f"{exc} in experiment {experiment!r}") from None
        owned = {s.name for s in _design(config.get("policy", "oobleck")).option_specs}
        config = {k: v for k, v in config.items() if k in fields_} | into_fields
        if options:
            config["design_options"] = {**(config.get("design_options") or {}), **options}
        extra = {k: v for k, v in options.items() if k not in owned}
    unknown = sorted(extra)
    if unknown:
        raise ValueError(f"unknown simulator option(s) {', '.join(unknown)} in experiment {experiment!r}")
    if "trace" in config:
        raise ValueError("pass the trace as a TraceChoice, not as an option")
    labels = dict(labels or {})
    clash = sorted(set(labels) & (fields_ | {"trace_label", "system"}))
    if clash:
        raise ValueError(f"label(s) {', '.join(clash)} would shadow a simulator option or a reserved column")
    full = {
        **config,
        **labels,
        "trace": trace.ref,
        "trace_label": trace.label,
        "system": system or config.get("policy", "oobleck"),
    }
    return RunSpec(experiment, KIND, full)


def _design(name: str):
    from designs import registry

    return registry.get(name)


def run_sim(spec: RunSpec, run_dir: Path) -> Mapping[str, Any]:
    """Sweep runner: one simulation (module level, so it crosses process boundaries)."""
    from sim.config import SimConfig
    from sim.run import simulate

    from . import tracesrc

    names = _config_fields()
    config_params = {k: v for k, v in spec.params.items() if k in names}
    trace = tracesrc.resolve(spec.params["trace"])
    facts = tracesrc.stats(trace)
    try:
        result = simulate(SimConfig.of(**config_params), trace=trace)
    except ValueError as exc:  # SimError, PlannerError, TraceError: the reason is the message
        return {
            "outcome": "error",
            "infeasible_reason": str(exc),
            "avg_samples_per_s": math.nan,
            "committed_samples": 0,
            **facts,
        }
    result.write(run_dir)
    return {**result.summary.to_dict(), **facts}


def timeline(out_dir: str | Path, key: str) -> pd.DataFrame:
    """The timeline of run `key` of an experiment's results directory."""
    path = Path(out_dir) / "runs" / key / "timeline.csv"
    if not path.exists():
        return pd.DataFrame(columns=["time_s", "live_nodes", "state", "samples_done", "throughput_samples_per_s"])
    return pd.read_csv(path)


def ok(table: pd.DataFrame) -> pd.Series:
    """Rows of runs that ran (possibly as 'infeasible', i.e. out of memory)."""
    return (
        table["outcome"].isin([*RAN_OUTCOMES, "infeasible"])
        if "outcome" in table
        else pd.Series(True, index=table.index)
    )
