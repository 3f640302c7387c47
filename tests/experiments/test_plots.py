"""Plotting functions return figures with labelled axes and save PNG and PDF."""

from __future__ import annotations

import matplotlib
import pandas as pd

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
    fig = plots.grouped_bars(runs(), x="trace", y="avg_samples_per_s", panel="model", x_order=["6h", "1h"], xlabel="failure interval", ylabel="throughput (samples/s)", errors="std")
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
