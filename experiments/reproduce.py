"""Run one experiment end to end: its runs (skipping finished ones), its table, its
figures as PNG and PDF under `results/NAME/` (the quick setting under
`results/NAME/quick/`). `results` is what notebooks call: it loads what is there and
runs only what is missing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from . import plots
from .base import Setting
from .paths import experiment_dir, shared_dir
from .registry import get
from .simrun import KIND as SIM_KIND
from .sweep import RunSpec, run_sweep

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Reproduction:
    name: str
    out_dir: Path
    table: pd.DataFrame
    figures: tuple[Path, ...]
    seconds: float
    errors: tuple[str, ...]  # one line per run the simulator or planner rejected


def results(
    name: str,
    *,
    quick: bool,
    out_dir: str | Path | None = None,
    processes: int | None = None,
    progress: bool = True,
    force: bool = False,
    backend: str = "local",
    address: str | None = None,
    chunk_size: int | None = None,
    costs: str | None = None,
) -> tuple[pd.DataFrame, Path]:
    """The experiment's results table (running what is missing) and its directory; the
    runs on `backend` (`run_sweep`'s: local, or ray with `address` and `chunk_size`);
    with `costs`, every planner-calibration run that names no cost profile takes it."""
    experiment = get(name)
    out = Path(out_dir) if out_dir is not None else experiment_dir(name, quick=quick)
    specs = experiment.specs(Setting(quick=quick, shared=shared_dir()))
    if costs is not None:
        if out_dir is None:
            out = out / f"costs-{Path(costs).stem}"
        specs = [with_costs(spec, costs) for spec in specs]
    workers = processes if processes is not None else experiment.processes
    table = run_sweep(
        specs,
        experiment.runner,
        out,
        processes=workers,
        progress=progress,
        force=force,
        backend=backend,
        address=address,
        chunk_size=chunk_size,
    )
    return table, out


def with_costs(spec: RunSpec, costs: str) -> RunSpec:
    """`spec` under the cost profile `costs`, if it is a planner-calibration simulator run
    that names none (the artifact calibrations take their prices from the artifact)."""
    params = spec.params
    if spec.kind != SIM_KIND or params.get("calibration") != "planner" or params.get("costs") is not None:
        return spec
    return replace(spec, params={**params, "costs": costs})


def figures(name: str, table: pd.DataFrame, out_dir: Path) -> dict[str, Figure]:
    """The experiment's figures (matplotlib Figures by name) from its table."""
    return dict(get(name).figures(table, out_dir))


def reproduce(
    name: str,
    *,
    quick: bool = False,
    out_dir: str | Path | None = None,
    processes: int | None = None,
    progress: bool = True,
    force: bool = False,
    backend: str = "local",
    address: str | None = None,
    chunk_size: int | None = None,
    costs: str | None = None,
) -> Reproduction:
    import matplotlib.pyplot as plt

    start = time.perf_counter()
    table, out = results(
        name,
        quick=quick,
        out_dir=out_dir,
        processes=processes,
        progress=progress,
        force=force,
        backend=backend,
        address=address,
        chunk_size=chunk_size,
        costs=costs,
    )
    paths: list[Path] = []
    for fig_name, fig in figures(name, table, out).items():
        paths.extend(plots.save(fig, out, fig_name))
        plt.close(fig)
    errors: tuple[str, ...] = ()
    if "outcome" in table:
        failed = table[table["outcome"] == "error"]
        errors = tuple(
            f"{row.get('system', '')} {row.get('model', '')} {row.get('trace_label', '')}: {row.get('infeasible_reason', '')}"
            for _, row in failed.iterrows()
        )
    return Reproduction(name, out, table, tuple(paths), time.perf_counter() - start, errors)
