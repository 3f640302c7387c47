"""A figure of the live-node count over time (matplotlib is imported only when plotting)."""

from __future__ import annotations

from pathlib import Path

from .model import Trace


def time_axis(duration_s: float) -> tuple[float, str]:
    """(seconds per unit, unit label) that keep the axis numbers readable."""
    if duration_s >= 2 * 3600:
        return 3600.0, "hours"
    if duration_s >= 120:
        return 60.0, "minutes"
    return 1.0, "seconds"


def plot_live_nodes(trace: Trace, path: str | Path, *, title: str | None = None) -> Path:
    """Write a step plot of live nodes over time (PNG, SVG or PDF by the file suffix)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = trace.live_counts()
    scale, unit = time_axis(trace.duration_s)
    fig, ax = plt.subplots(figsize=(8, 3.2), layout="constrained")
    ax.step(frame.time_s / scale, frame.live_nodes, where="post", color="tab:blue", lw=1.4)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("live nodes")
    ax.set_ylim(bottom=0, top=max(1, int(frame.live_nodes.max()) if len(frame) else 1) * 1.08)
    s = trace.stats()
    ax.set_title(title or f"{trace.name}: {s.num_removes} removals, mean {s.mean_nodes:.1f} nodes")
    ax.grid(alpha=0.3)
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
