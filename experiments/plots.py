"""Publication-quality figures from results tables (matplotlib, no seaborn).

One colour per system everywhere, axes labelled with units, sized for a paper column
(3.4 in wide) or a full width (7 in). Every function takes tidy pandas tables (one row
per run, as `experiments.sweep` writes them, or one row per timeline entry as
`planner.records` writes them) and returns a `matplotlib.figure.Figure`; `save` writes it
as PNG and PDF.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

from designs import registry

matplotlib.use("Agg")  # figures are files here; notebooks display the returned Figure

import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

SYSTEM_ORDER = ("oobleck", "bamboo", "varuna")
# series that are not registered designs (designs show their registry display name)
SYSTEM_LABELS = {
    "varuna-nockpt": "Varuna (no ckpt cost)",
    "ondemand": "On-demand",
}
# Colour-blind safe (Okabe-Ito).
SYSTEM_COLORS = {
    "oobleck": "#0072B2",
    "bamboo": "#E69F00",
    "varuna": "#009E73",
    "varuna-nockpt": "#56B4E9",
    "ondemand": "#555555",
}
# Other series (f, models, traces): Okabe-Ito's remaining hues, then greys.
SERIES_COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000", "#999999")
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

RC: dict[RcKeyType, Any] = {
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


def _styled(function):
    """Run a plotting function inside the module's rc settings, so every text it creates
    (titles, legends, labels) gets the paper sizes, not only what exists at creation."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with plt.rc_context(RC):
            return function(*args, **kwargs)

    return wrapper


# Series without a colour of their own (designs added after the paper's three, ...): the
# next unused hue, in the order first drawn, the same name keeping it for the process.
EXTRA_COLORS = ("#D55E00", "#CC79A7", "#000000", "#56B4E9", "#F0E442", "#999999", "#8C564B", "#7F7FFF")
_extra: dict[str, str] = {}


def color(system: str) -> str:
    if system in SYSTEM_COLORS:
        return SYSTEM_COLORS[system]
    if system not in _extra:
        _extra[system] = EXTRA_COLORS[len(_extra) % len(EXTRA_COLORS)]
    return _extra[system]


def label(system: str) -> str:
    """How a figure names a series: a registered design by its display name (a variant
    `name+rule` as `Display + Rule`), the few non-design series by `SYSTEM_LABELS`, any
    other value (a trace, a schedule) as it is."""
    if system in SYSTEM_LABELS:
        return SYSTEM_LABELS[system]
    base, plus, variant = system.partition("+")
    shown = registry.label(base)
    if shown is None:
        return system
    return f"{shown} + {variant.title()}" if plus else shown


def _systems(values: Iterable[str]) -> list[str]:
    present = list(dict.fromkeys(values))
    return [s for s in SYSTEM_ORDER if s in present] + [s for s in present if s not in SYSTEM_ORDER]


def _figure(width_in: float, height_in: float, nrows: int = 1, ncols: int = 1, **kwargs):
    with plt.rc_context(RC):
        fig, axes = plt.subplots(nrows, ncols, figsize=(width_in, height_in), squeeze=False, **kwargs)
    return fig, axes


def _header(fig, handles, labels, title: str = "", ncol: int | None = None) -> None:
    """Title, then a legend row(s) under it, above the panels; lays the panels out below."""
    height = fig.get_figheight()
    ncol = ncol or max(1, min(len(labels), 6))
    title_in = 0.25 if title else 0.0
    legend_in = 0.2 * int(np.ceil(len(labels) / ncol)) + 0.05 if labels else 0.0
    # lay the panels out first: tight_layout would otherwise make room for the title twice
    fig.tight_layout(rect=(0, 0, 1, 1.0 - (title_in + legend_in) / height))
    if title:
        fig.suptitle(title, y=1.0 - 0.03 / height, va="top")
    if labels:
        fig.legend(
            handles, labels, loc="upper center", ncol=ncol, frameon=False, bbox_to_anchor=(0.5, 1.0 - title_in / height)
        )


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


@_styled
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
    annotate: str | None = None,
    reference: Mapping | None = None,
    reference_label: str = "",
    logy: bool = False,
    ncols: int = 3,
    title: str = "",
    xtick_rotation: float = 0.0,
    width_in: float | None = None,
    row_height_in: float = 1.9,
):
    """Bars of `y` per `x`, one colour per system, one panel per value of `panel`.
    With `errors`, a column of standard deviations drawn as error bars; with `annotate`,
    a column of short texts (e.g. "OOM") written vertically where a bar stands; with
    `reference`, {panel value (None without panels): y} drawn as a dashed line."""
    panels = list(dict.fromkeys(table[panel])) if panel else [None]
    ncols = min(len(panels), ncols)
    nrows = int(np.ceil(len(panels) / ncols))
    width = width_in if width_in is not None else (FULL_IN if ncols > 1 else COLUMN_IN)
    fig, axes = _figure(width, row_height_in * nrows + 0.4, nrows, ncols)
    systems = _systems(table[system])
    for index, name in enumerate(panels):
        ax = axes[index // ncols][index % ncols]
        data = table if name is None else table[table[panel] == name]
        xs = list(x_order) if x_order is not None else list(dict.fromkeys(data[x]))
        width = 0.8 / max(len(systems), 1)
        for offset, sys_name in enumerate(systems):
            part = data[data[system] == sys_name].set_index(x)
            values = [float(part[y].get(v, np.nan)) if v in part.index else np.nan for v in xs]
            err = (
                [float(part[errors].get(v, np.nan)) if errors and v in part.index else 0.0 for v in xs]
                if errors
                else None
            )
            positions = np.arange(len(xs)) + (offset - (len(systems) - 1) / 2) * width
            ax.bar(
                positions,
                values,
                width,
                color=color(sys_name),
                label=label(sys_name),
                yerr=err,
                capsize=2 if errors else 0,
            )
            if annotate:
                for pos, v in zip(positions, xs):
                    text = part[annotate].get(v) if v in part.index else None
                    if isinstance(text, str) and text:
                        ax.annotate(
                            text,
                            (pos, 0),
                            xytext=(0, 2),
                            textcoords="offset points",
                            rotation=90,
                            ha="center",
                            va="bottom",
                            fontsize=6,
                            color=color(sys_name),
                        )
        level = reference.get(name) if reference is not None else None
        if level is not None and np.isfinite(level):
            ax.axhline(level, color=SYSTEM_COLORS["ondemand"], ls="--", lw=1, label=reference_label or None)
        ax.set_xticks(
            np.arange(len(xs)),
            [label(str(v)) for v in xs],
            rotation=xtick_rotation,
            ha="right" if xtick_rotation else "center",
        )
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if logy:
            ax.set_yscale("log")
        if name is not None:
            ax.set_title(title_fmt.format(name))
    for index in range(len(panels), nrows * ncols):
        axes[index // ncols][index % ncols].set_visible(False)
    handles, labels = _legend_entries(axes)
    _header(fig, handles, labels, title)
    return fig


@_styled
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
    fig, axes = _figure(
        COLUMN_IN * 1.3, 1.5 * rows + 0.6, rows, 1, sharex=True, gridspec_kw={"height_ratios": [2, 1][:rows]}
    )
    scale = 3600.0 if hours else 1.0
    ax = axes[0][0]
    for system in _systems(timelines):
        data = timelines[system]
        ax.step(
            data["time_s"] / scale,
            data["throughput_samples_per_s"],
            where="post",
            color=color(system),
            label=label(system),
            lw=1,
        )
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


@_styled
def time_breakdown(
    table: pd.DataFrame,
    *,
    group: str = "policy",
    panel: str | None = None,
    percent: bool = True,
    title_fmt: str = "{}",
    title: str = "",
):
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
        for part, text, colour in BREAKDOWN_FIELDS:
            column = f"breakdown_{part}"
            if column not in data:
                continue
            values = np.array([data[data[group] == g][column].mean() for g in groups], dtype=float)
            if percent:
                totals = np.array(
                    [
                        sum(
                            data[data[group] == g][f"breakdown_{f}"].mean()
                            for f, _, _ in BREAKDOWN_FIELDS
                            if f"breakdown_{f}" in data
                        )
                        for g in groups
                    ],
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
    handles, labels = _legend_entries(axes)
    _header(fig, handles, labels, title, ncol=4)
    return fig


@_styled
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
    logx: bool = False,
    title: str = "",
    width_in: float | None = None,
    panel: str | None = None,
    title_fmt: str = "{}",
    series_fmt: str = "{}",
    ncols: int = 3,
    sharey: bool = False,
    xticks: Sequence[float] | None = None,
):
    """One line per value of `series` (systems get their colours, anything else a
    qualitative palette and the legend text `series_fmt.format(value)`), one panel per
    value of `panel`; `band` is a column of spreads (e.g. standard errors over seeds)
    drawn as a shaded band of +- that much."""
    panels = list(dict.fromkeys(table[panel])) if panel else [None]
    ncols = min(len(panels), ncols)
    nrows = int(np.ceil(len(panels) / ncols))
    width = width_in if width_in is not None else (COLUMN_IN if ncols == 1 else FULL_IN)
    fig, axes = _figure(width, (2.3 if nrows == 1 else 1.9 * nrows + 0.4), nrows, ncols, sharey=sharey)
    values = table[series].astype(str)
    names = _systems(values) if colors is None and set(values) & set(SYSTEM_COLORS) else list(dict.fromkeys(values))
    palette = dict(colors or {})
    for index, name in enumerate(n for n in names if n not in palette and n not in SYSTEM_COLORS):
        palette[name] = SERIES_COLORS[index % len(SERIES_COLORS)]
    for index, pname in enumerate(panels):
        ax = axes[index // ncols][index % ncols]
        data_panel = table if pname is None else table[table[panel] == pname]
        for name in names:
            data = data_panel[data_panel[series].astype(str) == name].sort_values(x)
            if data.empty:
                continue
            colour = palette.get(name, SYSTEM_COLORS.get(name))
            text = label(name) if label(name) != name else series_fmt.format(name)
            ax.plot(data[x], data[y], marker="o", ms=2.5, lw=1, color=colour, label=text)
            if band and band in data:
                ax.fill_between(
                    data[x],
                    data[y] - data[band].fillna(0),
                    data[y] + data[band].fillna(0),
                    color=colour,
                    alpha=0.15,
                    lw=0,
                )
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if logy:
            ax.set_yscale("log")
        if logx:
            ax.set_xscale("log")
        if xticks is not None:
            ax.set_xticks(list(xticks), [f"{v:g}" for v in xticks])
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        if pname is not None:
            ax.set_title(title_fmt.format(pname))
        elif title:
            ax.set_title(title)
    for index in range(len(panels), nrows * ncols):
        axes[index // ncols][index % ncols].set_visible(False)
    if len(panels) == 1:
        axes[0][0].legend(frameon=False)
        fig.tight_layout()
    else:
        handles, texts = _legend_entries(axes)
        _header(fig, handles, texts, title)
    return fig


def _legend_entries(axes):
    """Legend handles over all panels, each label once."""
    seen: dict[str, object] = {}
    for row in axes:
        for ax in row:
            for handle, text in zip(*ax.get_legend_handles_labels()):
                seen.setdefault(text, handle)
    return list(seen.values()), list(seen.keys())


# -- throughput over time, several panels --------------------------------------------------
@dataclass(frozen=True)
class TimelinePanel:
    """One panel of `throughput_panels`: each system's timeline (`time_s`,
    `samples_done`, one row per iteration), the live node count (`time_s`, `live_nodes`) and each
    system's average throughput (drawn dotted)."""

    title: str
    timelines: Mapping[str, pd.DataFrame]
    live_nodes: pd.DataFrame | None = None
    averages: Mapping[str, float] = field(default_factory=dict)


def committed_throughput(timeline: pd.DataFrame, bin_s: float) -> pd.DataFrame:
    """Samples per second, in bins of `bin_s`, of the iterations that are never rolled
    back (the artifact's view: work a restart throws away counts as nothing), each
    iteration's samples spread over the running time that produced it.

    Wants one timeline row per iteration (`timeline="iterations"`): `samples_done` is the
    committed count, the count that survives to the end is its running minimum taken from
    the end, and between two rows it grows linearly while the job runs, not otherwise."""
    if timeline.empty:
        return pd.DataFrame({"time_s": [], "throughput_samples_per_s": []})
    timeline = timeline.sort_values("time_s", kind="stable")
    t = timeline["time_s"].to_numpy(dtype=float)
    done = timeline["samples_done"].to_numpy(dtype=float)
    running = (timeline["state"] == "running").to_numpy() if "state" in timeline else np.ones(len(t), dtype=bool)
    surviving = np.minimum.accumulate(done[::-1])[::-1]
    xs, ys = [t[0]], [surviving[0]]
    for i in range(len(t) - 1):
        if not running[i]:  # no progress until the next row, then its count
            xs.append(t[i + 1])
            ys.append(surviving[i])
        xs.append(t[i + 1])
        ys.append(surviving[i + 1])
    edges = np.arange(0.0, t[-1] + bin_s, bin_s)
    if len(edges) < 2:
        edges = np.array([0.0, bin_s])
    at_edges = np.interp(edges, xs, ys, left=0.0)
    return pd.DataFrame({"time_s": edges[:-1], "throughput_samples_per_s": np.diff(at_edges) / bin_s})


@_styled
def throughput_panels(panels: Sequence[TimelinePanel], *, ncols: int = 3, bin_s: float = 900.0, title: str = ""):
    """Committed throughput over time (`committed_throughput`, bins of `bin_s`), one
    panel per model or trace, each with its live node count underneath and each system's
    average dotted."""
    ncols = min(len(panels), ncols)
    nrows = int(np.ceil(len(panels) / ncols))
    with plt.rc_context(RC):
        fig = plt.figure(figsize=(FULL_IN if ncols > 1 else COLUMN_IN * 1.3, 2.3 * nrows + 0.4))
        grid = fig.add_gridspec(nrows, ncols)
        for index, panel in enumerate(panels):
            cell = grid[index // ncols, index % ncols].subgridspec(2, 1, height_ratios=[2.2, 1], hspace=0.08)
            top = fig.add_subplot(cell[0])
            low = fig.add_subplot(cell[1], sharex=top)
            for system in _systems(panel.timelines):
                data = committed_throughput(panel.timelines[system], bin_s)
                top.step(
                    data["time_s"] / 3600.0,
                    data["throughput_samples_per_s"],
                    where="post",
                    color=color(system),
                    label=label(system),
                    lw=1,
                )
                if system in panel.averages and np.isfinite(panel.averages[system]):
                    top.axhline(panel.averages[system], color=color(system), ls=":", lw=1)
            top.set_title(panel.title)
            top.set_ylabel("samples/s")
            top.margins(x=0)
            top.set_ylim(bottom=0)
            plt.setp(top.get_xticklabels(), visible=False)
            if panel.live_nodes is not None and not panel.live_nodes.empty:
                low.step(
                    panel.live_nodes["time_s"] / 3600.0,
                    panel.live_nodes["live_nodes"],
                    where="post",
                    color="#333333",
                    lw=0.8,
                )
            low.set_ylabel("nodes")
            low.set_xlabel("time (h)")
            low.set_ylim(bottom=0)
        handles, texts = _legend_entries([[ax for ax in fig.axes]])
        _header(fig, handles, texts, title)
    return fig


@_styled
def text_figure(message: str):
    """A small figure that says why a figure is empty (e.g. every run was out of memory)."""
    fig, axes = _figure(COLUMN_IN, 1.0)
    ax = axes[0][0]
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True)
    return fig
