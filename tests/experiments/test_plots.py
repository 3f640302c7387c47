"""Plotting functions return figures with labelled axes and save PNG and PDF."""

from __future__ import annotations

import matplotlib
import pandas as pd
import pytest

from experiments import plots


def runs():
    rows = []
    for model in ("A", "B"):
        for trace in ("6h", "1h"):
            for system, value in (("oobleck", 3.0), ("varuna", 1.0), ("bamboo", 2.0)):
                rows.append(
                    {
                        "model": model,
                        "trace": trace,
                        "policy": system,
                        "avg_samples_per_s": value,
                        "std": 0.1,
                        "breakdown_useful_compute_s": 80.0 * value,
                        "breakdown_restart_s": 10.0,
                        "breakdown_waiting_s": 5.0,
                    }
                )
    return pd.DataFrame(rows)


def test_grouped_bars(tmp_path):
    fig = plots.grouped_bars(
        runs(),
        x="trace",
        y="avg_samples_per_s",
        panel="model",
        x_order=["6h", "1h"],
        xlabel="failure interval",
        ylabel="throughput (samples/s)",
        errors="std",
    )
    assert isinstance(fig, matplotlib.figure.Figure)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "throughput (samples/s)" and ax.get_title() == "A"
    heights = sorted(p.get_height() for p in ax.patches)
    assert heights == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
    paths = plots.save(fig, tmp_path, "bars")
    assert [p.suffix for p in paths] == [".png", ".pdf"] and all(p.stat().st_size > 1000 for p in paths)


def test_time_breakdown_percentages_sum_to_100():
    fig = plots.time_breakdown(runs(), panel="model")
    ax = fig.axes[0]
    totals = {}
    for patch in ax.patches:
        x = round(patch.get_x(), 3)
        totals[x] = totals.get(x, 0) + patch.get_height()
    assert all(abs(t - 100) < 1e-9 for t in totals.values())


def test_throughput_over_time_and_lines():
    timeline = pd.DataFrame({"time_s": [0, 3600, 7200], "throughput_samples_per_s": [1.0, 2.0, 0.0]})
    live = pd.DataFrame({"time_s": [0, 3600], "live_nodes": [30, 29]})
    fig = plots.throughput_over_time({"oobleck": timeline, "varuna": timeline}, live, title="t")
    assert fig.axes[1].get_ylabel() == "live nodes" and fig.axes[1].get_xlabel() == "time (h)"
    table = pd.DataFrame({"x": [1, 2, 1, 2], "y": [1.0, 2.0, 2.0, 3.0], "sd": [0.1] * 4, "f": [0, 0, 1, 1]})
    fig = plots.lines(table, x="x", y="y", series="f", xlabel="nodes", ylabel="samples/s", band="sd")
    assert len(fig.axes[0].lines) == 2


def axes_with_data(fig):
    return [ax for ax in fig.axes if ax.get_visible() and (ax.lines or ax.patches or ax.collections)]


def test_committed_throughput_counts_only_work_that_survives():
    # 100 samples per iteration; a removal at 350 s rolls back to 100 samples (the iteration
    # ending at 300 s is lost), then one more iteration commits at 500 s.
    rows = [
        (0, "waiting", 0),
        (100, "running", 0),
        (200, "running", 100),
        (300, "running", 200),
        (350, "restarting", 100),
        (400, "running", 100),
        (500, "running", 200),
        (600, "finished", 200),
    ]
    timeline = pd.DataFrame(rows, columns=["time_s", "state", "samples_done"])
    rate = plots.committed_throughput(timeline, 100.0)
    assert rate["time_s"].tolist() == [0, 100, 200, 300, 400, 500]
    assert rate["throughput_samples_per_s"].tolist() == pytest.approx([0, 1, 0, 0, 1, 0])


def test_throughput_panels_draw_each_system_and_the_live_nodes():
    timeline = pd.DataFrame(
        {"time_s": [0.0, 1800.0, 3600.0, 7200.0], "state": ["running"] * 4, "samples_done": [0, 1800, 3600, 7200]}
    )
    live = pd.DataFrame({"time_s": [0.0, 3600.0], "live_nodes": [30, 20]})
    panels = [
        plots.TimelinePanel(f"model {i}", {"oobleck": timeline, "varuna": timeline}, live, {"oobleck": 1.0})
        for i in range(2)
    ]
    fig = plots.throughput_panels(panels, ncols=2, bin_s=900.0, title="t")
    tops = [ax for ax in fig.axes if ax.get_ylabel() == "samples/s"]
    lows = [ax for ax in fig.axes if ax.get_ylabel() == "nodes"]
    assert len(tops) == 2 and len(lows) == 2
    assert all(ax.get_xlabel() == "time (h)" for ax in lows)
    assert max(tops[0].lines[0].get_ydata()) == pytest.approx(1.0)  # 1 sample/s
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["Oobleck", "Varuna"]
    assert fig._suptitle.get_text() == "t"


def test_grouped_bars_annotations_reference_and_title():
    table = runs()
    table["note"] = ["OOM" if s == "bamboo" else "" for s in table["policy"]]
    fig = plots.grouped_bars(
        table,
        x="trace",
        y="avg_samples_per_s",
        panel="model",
        annotate="note",
        reference={"A": 2.5, "B": 1.5},
        reference_label="on-demand",
        xlabel="trace",
        ylabel="samples/s",
        title="T",
    )
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.texts] == ["OOM", "OOM"]
    assert [line.get_ydata()[0] for line in ax.lines] == [2.5]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "on-demand" in labels and "Oobleck" in labels
    assert fig._suptitle.get_text() == "T" and ax.get_xlabel() == "trace"


def test_lines_with_panels_bands_and_series_labels():
    table = pd.DataFrame(
        {
            "x": [1, 2, 1, 2] * 2,
            "y": [1.0, 2.0, 2.0, 3.0] * 2,
            "sd": [0.1] * 8,
            "f": [0, 0, 1, 1] * 2,
            "m": ["a"] * 4 + ["b"] * 4,
        }
    )
    fig = plots.lines(
        table,
        x="x",
        y="y",
        series="f",
        panel="m",
        band="sd",
        series_fmt="f = {}",
        xlabel="nodes",
        ylabel="samples/s",
        logx=True,
        xticks=[1, 2],
        title="T",
    )
    shown = axes_with_data(fig)
    assert len(shown) == 2 and all(len(ax.lines) == 2 and len(ax.collections) == 2 for ax in shown)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["f = 0", "f = 1"]
    assert shown[0].get_xscale() == "log" and [t.get_text() for t in shown[0].get_xticklabels()] == ["1", "2"]
    assert shown[0].get_title() == "a" and shown[0].get_xlabel() == "nodes" and shown[0].get_ylabel() == "samples/s"


def test_breakdown_title_and_text_figure():
    fig = plots.time_breakdown(runs(), panel="model", title="where")
    assert fig._suptitle.get_text() == "where" and fig.legends
    assert fig.axes[0].get_ylabel() == "share of time (%)"
    note = plots.text_figure("nothing ran")
    assert note.axes[0].texts[0].get_text() == "nothing ran"
