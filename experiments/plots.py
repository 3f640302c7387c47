"""Publication-quality figures from results tables (matplotlib, no seaborn).

One colour per system everywhere, axes labelled with units, sized for a paper column
(3.4 in wide) or a full width (7 in). Every function takes tidy pandas tables (one row
per run, as `experiments.sweep` writes them, or one row per timeline entry as
`planner.records` writes them) and returns a `matplotlib.figure.Figure`; `save` writes it
as PNG and PDF.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")  # figures are files here; notebooks display the returned Figure

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

SYSTEM_ORDER = ("oobleck", "bamboo", "varuna")
SYSTEM_LABELS = {"oobleck": "Oobleck", "bamboo": "Bamboo", "varuna": "Varuna", "varuna-nockpt": "Varuna (no ckpt cost)", "ondemand": "On-demand"}
# Colour-blind safe (Okabe-Ito).
SYSTEM_COLORS = {
    "oobleck": "#0072B2",
    "bamboo": "#E69F00",
    "varuna": "#009E73",
    "varuna-nockpt": "#56B4E9",
    "ondemand": "#555555",
}
BREAKDOWN_FIELDS = (
    ("useful_compute_s", "useful compute", "#0072B2"),
    ("redundant_compute_s", "redundant compute", "#E69F00"),
    ("reconfiguration_s", "reconfiguration", "#CC79A7"),
    ("restart_s", "restart", "#D55E00"),
    ("checkpoint_s", "checkpoint", "#009E73"),
    ("lost_work_s", "lost work", "#F0E442"),
    ("waiting_s", "waiting for nodes", "#999999"),
)
COLUMN_IN = 3.4
FULL_IN = 7.0

RC = {
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.dpi": 150,
    "savefig.bbox": "tight",
    "pdf.fonttype": 42,
}


def color(system: str) -> str:
    return SYSTEM_COLORS.get(system, "#333333")


def label(system: str) -> str:
    return SYSTEM_LABELS.get(system, system)


def _systems(values: Iterable[str]) -> list[str]:
    present = list(dict.fromkeys(values))
    return [s for s in SYSTEM_ORDER if s in present] + [s for s in present if s not in SYSTEM_ORDER]


def _figure(width_in: float, height_in: float, nrows: int = 1, ncols: int = 1, **kwargs):
    with plt.rc_context(RC):
        fig, axes = plt.subplots(nrows, ncols, figsize=(width_in, height_in), squeeze=False, **kwargs)
    return fig, axes


def save(fig, out_dir: str | Path, name: str) -> list[Path]:
    """Write `name`.png and `name`.pdf into `out_dir`; returns the paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    with plt.rc_context(RC):
        for suffix in ("png", "pdf"):
            path = out_dir / f"{name}.{suffix}"
            fig.savefig(path)
            paths.append(path)
    return paths


def grouped_bars(
    table: pd.DataFrame,
    *,
    x: str,
    y: str,
    panel: str | None = None,
    system: str = "policy",
    x_order: Sequence | None = None,
    xlabel: str = "",
    ylabel: str = "",
    errors: str | None = None,
    title_fmt: str = "{}",
):
    """Bars of `y` per `x`, one colour per system, one panel per value of `panel`.
    With `errors`, a column of standard deviations drawn as error bars."""
    panels = list(dict.fromkeys(table[panel])) if panel else [None]
    ncols = min(len(panels), 3)
    nrows = int(np.ceil(len(panels) / ncols))
    fig, axes = _figure(FULL_IN if ncols > 1 else COLUMN_IN, 1.9 * nrows + 0.4, nrows, ncols)
    systems = _systems(table[system])
    for index, name in enumerate(panels):
        ax = axes[index // ncols][index % ncols]
        data = table if name is None else table[table[panel] == name]
        xs = list(x_order) if x_order is not None else list(dict.fromkeys(data[x]))
        width = 0.8 / max(len(systems), 1)
        for offset, sys_name in enumerate(systems):
            part = data[data[system] == sys_name].set_index(x)
            values = [float(part[y].get(v, np.nan)) if v in part.index else np.nan for v in xs]
            err = [float(part[errors].get(v, np.nan)) if errors and v in part.index else 0.0 for v in xs] if errors else None
            positions = np.arange(len(xs)) + (offset - (len(systems) - 1) / 2) * width
            ax.bar(positions, values, width, color=color(sys_name), label=label(sys_name), yerr=err, capsize=2 if errors else 0)
        ax.set_xticks(np.arange(len(xs)), [str(v) for v in xs])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if name is not None:
            ax.set_title(title_fmt.format(name))
    for index in range(len(panels), nrows * ncols):
        axes[index // ncols][index % ncols].set_visible(False)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(systems), frameon=False, bbox_to_anchor=(0.5, 1.02))
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


def throughput_over_time(
    timelines: Mapping[str, pd.DataFrame],
    live_nodes: pd.DataFrame | None = None,
    *,
    title: str = "",
    hours: bool = True,
):
    """Throughput of each system over time (step lines) with the live node count below.

    `timelines`: system -> timeline table with `time_s` and `throughput_samples_per_s`;
    `live_nodes`: a table with `time_s` and `live_nodes` (from the trace)."""
    rows = 2 if live_nodes is not None else 1
    fig, axes = _figure(COLUMN_IN * 1.3, 1.5 * rows + 0.6, rows, 1, sharex=True, gridspec_kw={"height_ratios": [2, 1][:rows]})
    scale = 3600.0 if hours else 1.0
    ax = axes[0][0]
    for system in _systems(timelines):
        data = timelines[system]
        ax.step(data["time_s"] / scale, data["throughput_samples_per_s"], where="post", color=color(system), label=label(system), lw=1)
    ax.set_ylabel("throughput (samples/s)")
    ax.legend(frameon=False, ncol=len(timelines))
    if title:
        ax.set_title(title)
    if live_nodes is not None:
        low = axes[1][0]
        low.step(live_nodes["time_s"] / scale, live_nodes["live_nodes"], where="post", color="#333333", lw=1)
        low.set_ylabel("live nodes")
        low.set_xlabel("time (h)" if hours else "time (s)")
    else:
        ax.set_xlabel("time (h)" if hours else "time (s)")
    fig.tight_layout()
    return fig


def time_breakdown(table: pd.DataFrame, *, group: str = "policy", panel: str | None = None, percent: bool = True, title_fmt: str = "{}"):
    """Stacked bars of where the time went (`breakdown_*` columns), one bar per `group`."""
    panels = list(dict.fromkeys(table[panel])) if panel else [None]
    ncols = min(len(panels), 3)
    nrows = int(np.ceil(len(panels) / ncols))
    fig, axes = _figure(FULL_IN if ncols > 1 else COLUMN_IN, 2.0 * nrows + 0.5, nrows, ncols)
    for index, name in enumerate(panels):
        ax = axes[index // ncols][index % ncols]
        data = table if name is None else table[table[panel] == name]
        groups = _systems(data[group])
        bottom = np.zeros(len(groups))
        for field, text, colour in BREAKDOWN_FIELDS:
            column = f"breakdown_{field}"
            if column not in data:
                continue
            values = np.array([data[data[group] == g][column].mean() for g in groups], dtype=float)
            if percent:
                totals = np.array(
                    [sum(data[data[group] == g][f"breakdown_{f}"].mean() for f, _, _ in BREAKDOWN_FIELDS if f"breakdown_{f}" in data) for g in groups],
                    dtype=float,
                )
                values = 100 * values / np.where(totals > 0, totals, 1)
            ax.bar([label(g) for g in groups], values, bottom=bottom, color=colour, label=text, width=0.6)
            bottom += values
        ax.set_ylabel("share of time (%)" if percent else "time (s)")
        if name is not None:
            ax.set_title(title_fmt.format(name))
    for index in range(len(panels), nrows * ncols):
        axes[index // ncols][index % ncols].set_visible(False)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    fig.tight_layout()
    return fig


def lines(
    table: pd.DataFrame,
    *,
    x: str,
    y: str,
    series: str,
    xlabel: str,
    ylabel: str,
    band: str | None = None,
    colors: Mapping[str, str] | None = None,
    logy: bool = False,
    title: str = "",
    width_in: float = COLUMN_IN,
):
    """One line per value of `series` (e.g. f, or system); `band` is a column of standard
    deviations drawn as a shaded band."""
    fig, axes = _figure(width_in, 2.3)
    ax = axes[0][0]
    names = _systems(table[series].astype(str)) if colors is None else list(dict.fromkeys(table[series].astype(str)))
    for name in names:
        data = table[table[series].astype(str) == name].sort_values(x)
        colour = (colors or {}).get(name, SYSTEM_COLORS.get(name))
        ax.plot(data[x], data[y], marker="o", ms=2.5, lw=1, color=colour, label=label(name))
        if band and band in data:
            ax.fill_between(data[x], data[y] - data[band], data[y] + data[band], color=colour, alpha=0.2, lw=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    if title:
        ax.set_title(title)
    ax.legend(frameon=False)
    fig.tight_layout()
    return fig
