"""The artifact as it ran: every published cell, what the stated model gives, and
what each of the artifact's ten departures contributes.

Runs, for the 5 models x the paper's 7 traces (6h ... 10m, and both scaled spot traces) x
3 systems: `published` (`--calibration artifact-as-run`: the artifact's code, which
reproduces the paper's numbers), `stated` (`--calibration artifact`: the model the paper
states, with the paper's rollback setting), and one leave-one-out run per switch that
applies to the system (`artifact_quirks=-NAME`). A switch's share of a cell is
(published - without it) / published. Traces are the artifact's files from ../shared (Bamboo
as run depends on the nodes' names and order); without them the generated frequency traces
and spot look-alikes stand in, labelled so. Quick: BERT-large and GPT-3-6_7b on 10m,
GPT-3-6_7b on the EC2 P3 trace (50 runs).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from sim.artifact_quirks import ArtifactQuirks

from . import plots
from .base import Experiment, Setting
from .common import MODELS, SYSTEMS
from .simrun import sim_spec
from .sweep import RunSpec
from .tracesrc import FREQUENCIES, TraceChoice, artifact_spot, paper_frequency

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "as-run"
QUICK_MODELS = ("BERT-large", "GPT-3-6_7b")
APPLIES = {
    "oobleck": ("stale_timeouts", "train_through_pause", "oobleck_zero_rate_runs"),
    "bamboo": (
        "stale_timeouts",
        "train_through_pause",
        "bamboo_slow_on_any_removal",
        "bamboo_heap_order",
        "bamboo_stale_waiting",
    ),
    "varuna": (
        "stale_timeouts",
        "train_through_pause",
        "varuna_checkpoint_scan",
        "varuna_counter_keeps_rolled_back",
        "varuna_restart_previous_count",
        "eval_spot_no_rollback",
    ),
}
BAMBOO_OOM = ("GPT-3-medium", "GPT-3-2_7b", "GPT-3-6_7b")
NO_THROUGHPUT = {"bamboo": BAMBOO_OOM}  # models the artifact gives a system no throughput on


def _traces(setting: Setting) -> list[TraceChoice]:
    out = []
    for label in FREQUENCIES:
        path = None if setting.shared is None else setting.shared / "traces" / "oobleck-artifact" / f"{label}.csv"
        if path is not None and path.exists():
            out.append(TraceChoice(f"shared:oobleck-artifact/{label}.csv", label))
        else:
            out.append(paper_frequency(label))
    out += [artifact_spot(name, setting.shared) for name in ("gcp", "p3")]
    return out


def specs(setting: Setting) -> list[RunSpec]:
    models = QUICK_MODELS if setting.quick else MODELS
    out = []
    for model in models:
        for trace in _traces(setting):
            if setting.quick and not (trace.label == "10m" or ("P3" in trace.label and model == "GPT-3-6_7b")):
                continue
            for system in SYSTEMS:
                variants: list[tuple[str, dict]] = [
                    ("published", {"calibration": "artifact-as-run"}),
                    ("stated", {"calibration": "artifact"}),
                ]
                if model not in NO_THROUGHPUT.get(system, ()):
                    variants += [
                        (f"-{q}", {"calibration": "artifact-as-run", "artifact_quirks": f"-{q}"})
                        for q in APPLIES[system]
                    ]
                for variant, options in variants:
                    out.append(
                        sim_spec(NAME, trace, policy=system, model=model, labels={"variant": variant}, **options)
                    )
    return out


def shares(table: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: published, stated, and each switch's share (fraction of published)."""
    data = table[table.get("outcome", "ok") != "error"] if "outcome" in table else table
    wide = data.pivot_table(
        index=["system", "model", "trace_label"], columns="variant", values="avg_samples_per_s", aggfunc="first"
    )
    out = pd.DataFrame(index=wide.index)
    out["published"] = wide["published"]
    out["stated"] = wide["stated"]
    for name in ArtifactQuirks.names():
        column = f"-{name}"
        if column in wide:
            out[name] = (wide["published"] - wide[column]) / wide["published"].where(wide["published"] > 0)
    out["stated_vs_published"] = (out["stated"] - out["published"]) / out["published"].where(out["published"] > 0)
    return out.reset_index()


def headline(table: pd.DataFrame) -> pd.DataFrame:
    """Oobleck / Varuna per model and trace, as published and under the stated model."""
    s = shares(table).set_index(["system", "model", "trace_label"])
    rows = []
    for model in dict.fromkeys(s.index.get_level_values("model")):
        for label in dict.fromkeys(s.index.get_level_values("trace_label")):
            try:
                o, v = s.loc[("oobleck", model, label)], s.loc[("varuna", model, label)]
            except KeyError:
                continue
            ratio = {k: (o[k] / v[k] if v[k] > 0 else np.inf) for k in ("published", "stated")}
            rows.append({"model": model, "trace_label": label, **{f"{k}_ratio": r for k, r in ratio.items()}})
    return pd.DataFrame(rows)


def figures(table: pd.DataFrame, out_dir: Path) -> dict[str, Figure]:
    import matplotlib.pyplot as plt

    s = shares(table)
    columns = [f"{r.system[:1].upper()} {r.model} {r.trace_label.split(' ')[0]}" for r in s.itertuples()]
    rows = ["stated_vs_published", *ArtifactQuirks.names()]
    values = np.array([[s[r].iloc[i] if r in s else np.nan for i in range(len(s))] for r in rows], dtype=float) * 100
    fig, ax = plt.subplots(figsize=(max(6.0, 0.16 * len(columns) + 3), 4.2))
    limit = 50.0
    image = ax.imshow(np.clip(values, -limit, limit), cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
    ax.set_yticks(range(len(rows)), ["stated model vs published", *rows[1:]], fontsize=7)
    ax.set_xticks(range(len(columns)), columns, rotation=90, fontsize=5)
    ax.set_title(
        "The artifact as it ran: stated model vs published, and each behaviour's share (leave one out), %", fontsize=8
    )
    fig.colorbar(image, ax=ax, fraction=0.02, label="% of the published value (clipped at 50)")
    fig.tight_layout()
    figs = {"as-run-shares": fig}
    h = headline(table)
    if not h.empty:
        fig2, ax2 = plt.subplots(figsize=(6.0, 3.0))
        labels = [f"{r.model} {r.trace_label.split(' ')[0]}" for r in h.itertuples()]
        x = np.arange(len(h))
        for k, (column, name) in enumerate(
            (("published_ratio", "published (as run)"), ("stated_ratio", "stated model"))
        ):
            ax2.bar(
                x + (k - 0.5) * 0.4,
                np.minimum(h[column], 100),
                0.4,
                label=name,
                color=plots.color("oobleck" if k == 0 else "varuna"),
            )
        ax2.set_yscale("log")
        ax2.set_xticks(x, labels, rotation=90, fontsize=5)
        ax2.set_ylabel("Oobleck / Varuna (capped at 100)")
        ax2.legend(fontsize=7)
        fig2.tight_layout()
        figs["as-run-ratio"] = fig2
    return figs


EXPERIMENT = Experiment(
    name=NAME,
    description="the artifact as it ran: published vs stated model per cell, each behaviour's share (leave one out)",
    paper_figures=(),
    notebook="notebooks/as_run.py",
    specs=specs,
    figures=figures,
)
