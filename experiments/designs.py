"""Every registered design side by side: throughput, where the time went, dollars per sample.

Designs: every design in the registry that runs in the simulator (`designs.registry`,
read when the specs are made, so designs added later, or loaded with `--design-module`,
are picked up), each with its default options and schedule, and, for those whose default
schedule writes periodic checkpoints, once more with the adaptive interval (Daly's rule,
`checkpoint_adaptive="daly"`; system `NAME+daly`). Planner calibration throughout.

Traces (family: traces):
- frequency: the paper's five fixed-frequency traces (30 nodes, one removal every 6h ... 10m);
- spot: the artifact's two scaled spot traces (GCP, EC2 P3; labelled look-alikes without
  ../shared);
- real: every real trace in ../shared/traces, scaled in proportion to a 30-node peak (as in
  the real-traces experiment; the look-alikes without ../shared);
- datacenter: `datacenter:gpus=8N,days=D` (Llama 3's failure rates) at N = 64, 256, 1024
  nodes of 8 x A100 80 GB, GPT-3 175B, global batch 24 x N (the scale experiment's job).
The 30-node traces run the paper's five models on one V100 per node (0.91 $/node-hour, the
artifact's spot price); the datacenter runs are charged `DATACENTER_PRICE` per node-hour.

Measures (`measures`): samples/s over the whole run (committed samples / wall time), its
share of the best default design's on the same trace and model, dollars per million
committed samples, and the time breakdown. Quick: GPT-3-medium on the 1h and P3 traces,
the datacenter job on 16 nodes for a day; the adaptive variants on the 1h trace only.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from planner.records import RAN_OUTCOMES

from . import plots, tracesrc
from .base import Experiment, Setting
from .common import MODELS, notes, run_throughput
from .simrun import sim_spec
from .sweep import RunSpec

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "designs"
ADAPTIVE_RULE = "daly"
FAMILIES = {
    "frequency": "paper frequency traces (30 nodes)",
    "spot": "spot traces (scaled 15-30)",
    "real": "real traces (peak 30)",
    "datacenter": "datacenter (GPT-3 175B, 8 x A100)",
}
QUICK_MODELS = ("GPT-3-medium",)
QUICK_FREQUENCIES = ("1h",)
QUICK_SPOT = ("p3",)
DC_MODEL, DC_GPU, DC_GPUS_PER_NODE, DC_BATCH_PER_NODE = "gpt3-175b", "a100-80gb", 8, 24
DC_SIZES, DC_DAYS = (64, 256, 1024), 7.0
QUICK_DC_SIZES, QUICK_DC_DAYS = (16,), 1.0
DATACENTER_PRICE = 40.97  # $/node-hour: an 8 x A100 80 GB instance on demand (AWS p4de.24xlarge list price)


def simulator_designs() -> list[str]:
    """The registered designs that run in the simulator, in registry order."""
    from designs import SIMULATOR, registry

    return [d.name for d in registry.all_designs() if SIMULATOR in d.runs_on]


def _checkpoints(name: str) -> bool:
    from designs import registry

    schedule = registry.get(name).default_checkpoints
    return bool(schedule.every_iterations or schedule.every_s)


def traces_for(setting: Setting) -> list[tuple[str, tracesrc.TraceChoice]]:
    """(family, trace) of the 30-node traces, in figure order."""
    quick = setting.quick
    out = [("frequency", tracesrc.paper_frequency(f)) for f in (QUICK_FREQUENCIES if quick else tracesrc.FREQUENCIES)]
    for key in QUICK_SPOT if quick else tuple(tracesrc.ARTIFACT_SPOT):
        choice = tracesrc.artifact_spot(key, setting.shared)
        out.append(("spot", tracesrc.TraceChoice(choice.ref, choice.label, choice.generated, key)))
    if not quick:
        out += [("real", choice) for choice in tracesrc.real_traces(setting.shared, peak=30)]
    return out


def datacenter_traces(setting: Setting) -> list[tuple[int, float, tracesrc.TraceChoice]]:
    sizes, days = (QUICK_DC_SIZES, QUICK_DC_DAYS) if setting.quick else (DC_SIZES, DC_DAYS)
    return [
        (
            n,
            days,
            tracesrc.TraceChoice(
                f"datacenter:gpus={n * DC_GPUS_PER_NODE},days={days:g},seed=0", f"{n} nodes", True, f"{n} nodes"
            ),
        )
        for n in sizes
    ]


def _variants(name: str, adaptive: bool) -> list[tuple[str, dict[str, Any]]]:
    """(system, extra options): the design as it comes, and with the adaptive interval."""
    out: list[tuple[str, dict[str, Any]]] = [(name, {})]
    if adaptive and _checkpoints(name):
        out.append((f"{name}+{ADAPTIVE_RULE}", {"checkpoint_adaptive": ADAPTIVE_RULE}))
    return out


def specs(setting: Setting) -> list[RunSpec]:
    names = simulator_designs()
    models = QUICK_MODELS if setting.quick else MODELS
    out = []
    for family, trace in traces_for(setting):
        adaptive = not setting.quick or family == "frequency"
        key = trace.key or trace.label
        for model in models:
            for name in names:
                for system, extra in _variants(name, adaptive):
                    labels = {"family": family, "trace_key": key, "schedule": _schedule(extra)}
                    out.append(
                        sim_spec(
                            NAME, trace, system=system, policy=name, model=model, calibration="planner", labels=labels,
                            **extra,
                        )
                    )  # fmt: skip
    for nodes, days, trace in datacenter_traces(setting):
        for name in names:
            for system, extra in _variants(name, not setting.quick):
                labels = {"family": "datacenter", "trace_key": trace.key, "schedule": _schedule(extra)}
                out.append(
                    sim_spec(
                        NAME,
                        trace,
                        system=system,
                        policy=name,
                        model=DC_MODEL,
                        calibration="planner",
                        gpu=DC_GPU,
                        gpus_per_node=DC_GPUS_PER_NODE,
                        global_batch=DC_BATCH_PER_NODE * nodes,
                        duration_s=days * 86400.0,
                        price_per_node_hour=DATACENTER_PRICE,
                        labels=labels,
                        **extra,
                    )
                )
    return out


def _schedule(extra: dict[str, Any]) -> str:
    return f"adaptive ({extra['checkpoint_adaptive']})" if extra else "default"


def measures(table: pd.DataFrame) -> pd.DataFrame:
    """Every run with `run_samples_per_s`, `share_of_best` (of the best default design on
    the same trace and model; NaN where the run did not train), `usd_per_m` and `note`."""
    out = table.assign(run_samples_per_s=run_throughput(table), note=notes(table))
    trained = out["outcome"].isin(RAN_OUTCOMES)
    out.loc[~trained, "run_samples_per_s"] = math.nan
    best = (
        out[out["schedule"] == "default"]
        .groupby(["family", "trace_key", "model"])["run_samples_per_s"]
        .max()
        .rename("best_samples_per_s")
    )
    out = out.join(best, on=["family", "trace_key", "model"])
    out["share_of_best"] = out["run_samples_per_s"] / out["best_samples_per_s"].where(out["best_samples_per_s"] > 0)
    samples = out["committed_samples"].astype(float)
    out["usd_per_m"] = np.where(
        trained & (samples > 0), out["cost_usd"] / samples.where(samples > 0, 1.0) * 1e6, math.nan
    )
    out.loc[(out["note"] == "") & ~(samples > 0), "note"] = "no progress"
    out["where"] = out["family"].map(FAMILIES)
    return out


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """One row per design (default schedule): its mean share of the best design's
    throughput per trace family, how often it is the best, its median cost per sample
    relative to the cheapest design of the same run (medians: a run that barely trains
    would dominate a mean of ratios), its largest loss of time and the median gain of the
    adaptive checkpoint interval; prints them as docs/designs.md's table rows."""
    ran = measures(table)
    plain = ran[ran["schedule"] == "default"]
    cheapest = plain.groupby(["family", "trace_key", "model"])["usd_per_m"].transform("min")
    plain = plain.assign(cost_ratio=plain["usd_per_m"] / cheapest)
    rows = []
    for name in dict.fromkeys(plain["policy"]):
        mine = plain[plain["policy"] == name]
        row: dict[str, Any] = {"design": name}
        for family in FAMILIES:
            part = mine[mine["family"] == family]
            row[family] = float(part["share_of_best"].mean()) if len(part) else math.nan
        row["wins"] = int((mine["share_of_best"] >= 1.0 - 1e-12).sum())
        row["cells"] = int(len(mine))
        row["untrained"] = int(mine["run_samples_per_s"].isna().sum())
        row["cost_vs_cheapest"] = float(mine["cost_ratio"].median())
        row["largest_loss"] = _largest_loss(mine)
        adaptive = ran[(ran["policy"] == name) & (ran["schedule"] != "default")]
        row["adaptive_gain"] = _gain(adaptive, mine) if len(adaptive) else math.nan
        rows.append(row)
    frame = pd.DataFrame(rows)
    for line in readme_rows(frame):
        print(line)
    return frame


def _largest_loss(rows: pd.DataFrame) -> str:
    """The non-useful bucket of the breakdown that took the most time over these runs."""
    totals = {
        text: float(rows[f"breakdown_{part}"].sum())
        for part, text, _ in plots.BREAKDOWN_FIELDS
        if part != "useful_compute_s" and f"breakdown_{part}" in rows
    }
    totals = {k: v for k, v in totals.items() if np.isfinite(v) and v > 0}
    return max(totals, key=lambda k: totals[k]) if totals else "-"


def _gain(adaptive: pd.DataFrame, plain: pd.DataFrame) -> float:
    """Median ratio of the adaptive run's throughput to the default's, same trace and model."""
    keys = ["family", "trace_key", "model"]
    pair = adaptive.set_index(keys)["run_samples_per_s"] / plain.set_index(keys)["run_samples_per_s"]
    return float(pair.replace([np.inf, -np.inf], np.nan).median())


def readme_rows(frame: pd.DataFrame) -> list[str]:
    """The summary as Markdown table rows (header first)."""
    head = (
        "| design | "
        + " | ".join(f"{f} (share of best)" for f in FAMILIES)
        + " | best in | cost vs cheapest | largest loss | adaptive ckpt (x) |"
    )
    lines = [head, "|" + "---|" * (len(FAMILIES) + 5)]

    def fmt(value: float, pattern: str = "{:.2f}") -> str:
        return "-" if not np.isfinite(value) else pattern.format(value)

    for row in frame.to_dict("records"):
        lines.append(
            f"| {plots.label(row['design'])} | "
            + " | ".join(fmt(row[f]) for f in FAMILIES)
            + f" | {row['wins']}/{row['cells']} | {fmt(row['cost_vs_cheapest'], '{:.2f}x')} | {row['largest_loss']}"
            + f" | {fmt(row['adaptive_gain'])} |"
        )
    return lines


def figures(table: pd.DataFrame, out_dir: Path) -> dict[str, Figure]:
    ran = measures(table)
    plain = ran[ran["schedule"] == "default"]
    if plain["run_samples_per_s"].notna().sum() == 0:
        return {"designs-throughput": plots.text_figure("no run trained")}
    models = ", ".join(dict.fromkeys(plain.loc[plain["family"] != "datacenter", "model"]))
    averaged = _mean_over(plain, ["where", "system", "trace_key"], ["share_of_best", "usd_per_m"])
    figs = {
        "designs-throughput": plots.grouped_bars(
            averaged,
            x="trace_key",
            y="share_of_best",
            panel="where",
            system="system",
            annotate="note",
            ncols=2,
            xlabel="trace",
            ylabel="share of best design",
            title=f"Every design, planner calibration (30-node traces: mean over {models})",
            xtick_rotation=30,
            width_in=plots.FULL_IN,
        ),
        "designs-cost": plots.grouped_bars(
            averaged,
            x="trace_key",
            y="usd_per_m",
            panel="where",
            system="system",
            annotate="note",
            ncols=2,
            logy=True,
            xlabel="trace",
            ylabel="$ per million samples",
            title=f"Dollars per committed sample ({models} at 0.91 $/node-h; datacenter at {DATACENTER_PRICE} $/node-h)",
            xtick_rotation=30,
            width_in=plots.FULL_IN,
        ),
        "designs-breakdown": plots.time_breakdown(
            plain[plain["outcome"].isin(RAN_OUTCOMES)],
            group="system",
            panel="where",
            title="Where the time went, every design",
        ),
    }
    tried = set(ran.loc[ran["schedule"] != "default", "policy"])
    if tried:
        pairs = ran[ran["policy"].isin(tried)]
        cells = pairs.groupby(["family", "trace_key", "model"])["schedule"].transform("nunique") > 1
        figs["designs-adaptive"] = plots.grouped_bars(
            _mean_over(pairs[cells], ["where", "policy", "schedule"], ["share_of_best"]),
            x="policy",
            y="share_of_best",
            panel="where",
            system="schedule",
            ncols=2,
            xlabel="design",
            ylabel="share of best default",
            title=f"Default checkpoint schedule vs the adaptive interval ({ADAPTIVE_RULE.title()})",
            width_in=plots.FULL_IN,
        )
    return figs


def _mean_over(rows: pd.DataFrame, keys: list[str], values: list[str]) -> pd.DataFrame:
    """Means of `values` over the rows sharing `keys` (models, traces); a note ("OOM", ...)
    only where every one of those runs has one."""
    grouped = rows.groupby(keys, sort=False)
    out = grouped[values].mean()
    out["note"] = grouped["note"].agg(lambda s: s.iloc[0] if s.ne("").all() else "")  # where no run trained
    return out.reset_index()


EXPERIMENT = Experiment(
    name=NAME,
    description="every registered design on the frequency, spot, real and datacenter traces: throughput, time breakdown, dollars per sample, and the adaptive checkpoint interval",
    paper_figures=(),
    notebook="notebooks/every_design.py",  # not designs.py: run from notebooks/ it would shadow the designs package
    specs=specs,
    figures=figures,
)
