"""What the notebooks call: the setting from the environment, results loaded (and run
where missing), figures shown inline.

`OOBLAB_QUICK=1` selects the quick setting (the test suite sets it); otherwise a notebook
runs, or loads, the full one: `jupytext --to ipynb --execute notebooks/NAME.py` after (or
instead of) `ooblab reproduce NAME`, which share `results/NAME/`.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Mapping

import pandas as pd

from . import reproduce


def quick() -> bool:
    return os.environ.get("OOBLAB_QUICK", "") not in ("", "0")


def results(name: str, *, quick_setting: bool | None = None) -> tuple[pd.DataFrame, Path]:
    """The experiment's table and directory: finished runs loaded, missing ones run
    (no progress bar: notebooks show their output)."""
    setting = quick() if quick_setting is None else quick_setting
    table, out = reproduce.results(name, quick=setting, progress=False)
    print(f"{name}: {len(table)} runs ({'quick' if setting else 'full'} setting) in {out}")
    return table, out


def show(figures: Mapping[str, object], *names: str) -> None:
    """Display the named figures (all, without names) as PNG images, and close them."""
    import matplotlib.pyplot as plt
    from IPython.display import Image, Markdown, display

    from . import plots

    for name in names or tuple(figures):
        if name not in figures:
            raise KeyError(f"no figure {name!r}; this experiment draws {', '.join(figures)}")
        fig = figures[name]


        buffer = io.BytesIO()
        with plt.rc_context(plots.RC):
            fig.savefig(buffer, format="png")
        display(Markdown(f"**{name}**"), Image(buffer.getvalue()))
        plt.close(fig)
