"""Simulated vs measured throughput over time, one panel per policy."""

from __future__ import annotations

from collections.abc import Sequence


def _steps(points, end_s):
    """Per-iteration rates as a step line: each rate holds over its iteration."""
    xs, ys = [], []
    previous = 0.0
    for t, rate in points:
        if t > end_s:
            break
        xs += [previous, t]
        ys += [rate, rate]
        previous = t
    return xs, ys


def timeline_figure(results: Sequence, event_times_s: Sequence[float], title: str = ""):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..plots import label

    fig, axes = plt.subplots(len(results), 1, figsize=(9, 2.8 * len(results)), sharex=True, squeeze=False)
    for ax, result in zip(axes[:, 0], results):
        end = result.comparison.window_s
        for side, style in (
            (result.real, dict(color="tab:blue", lw=1.4, label="measured")),
            (result.sim, dict(color="tab:orange", lw=1.2, ls="--", label="simulated")),
        ):
            xs, ys = _steps(side.throughput_points(), end)
            ax.plot(xs, ys, **style)
            for a, b in side.recoveries:
                if a <= end:
                    ax.axvspan(a, min(b, end), color=style["color"], alpha=0.12)
        for t in event_times_s:
            if t <= end:
                ax.axvline(t, color="grey", lw=0.8, ls=":")
        c = result.comparison
        errs = c.throughput_errors()
        ax.set_title(
            f"{label(result.policy)}: committed samples {c.real_samples} measured, {c.sim_samples} simulated"
            + (f"; phase throughput errors {', '.join(f'{100 * e:+.0f}%' for e in errs)}" if errs else ""),
            fontsize=9,
        )
        ax.set_ylabel("samples/s")
        ax.set_ylim(bottom=0)
        ax.legend(loc="lower left", fontsize=8)
    axes[-1, 0].set_xlabel("seconds since training started (dotted: trace events; shaded: recoveries)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
