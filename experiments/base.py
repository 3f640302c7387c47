"""What an experiment is (DESIGN 7): a function returning run specs, a runner, and a
function turning the results table into figures.

`Experiment.specs(setting)` lists the runs (the quick setting: a small subset that
finishes in seconds); `run_sweep` executes them; `Experiment.figures(table, out_dir)`
returns named matplotlib figures (reading per-run files under `out_dir/runs/` where a
figure needs more than the table, e.g. timelines).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from .simrun import run_sim
from .sweep import Runner, RunSpec

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Setting:
    """How big a run: `quick` (seconds, for tests and a first look) or full; `shared` is
    the reference-data directory (None: absent, generated look-alikes stand in)."""

    quick: bool
    shared: Path | None


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str  # one line, for `ooblab reproduce --list`
    paper_figures: tuple[str, ...]  # the paper's figure numbers it regenerates (empty: beyond the paper)
    notebook: str  # path in the checkout
    specs: Callable[[Setting], list[RunSpec]]
    figures: Callable[[pd.DataFrame, Path], Mapping[str, Figure]]  # name -> figure
    runner: Runner = run_sim
    family: str = "beyond the paper"  # how --list tags it when it is no paper figure
    processes: int | None = None  # None: one per CPU; 1 where runs measure wall time
