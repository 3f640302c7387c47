"""What the notebooks call: the setting from the environment, results loaded (and run
where missing), figures shown inline.

`OOBLAB_QUICK=1` selects the quick setting (the test suite sets it); otherwise a notebook
runs, or loads, the full one, sharing `results/NAME/` with `ooblab reproduce NAME`.
`execute` runs a notebook file with nbclient (the test extras) and writes the executed
`.ipynb`; from the command line:

    python -m experiments.notebook notebooks/frequency.py [-o OUT.ipynb] [--timeout S]

(default output `results/notebooks/NAME.ipynb`; `jupytext --to ipynb --execute` works
too where nbconvert is installed).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from . import reproduce

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def quick() -> bool:
    return os.environ.get("OOBLAB_QUICK", "") not in ("", "0")


def results(name: str, *, quick_setting: bool | None = None) -> tuple[pd.DataFrame, Path]:
    """The experiment's table and directory: finished runs loaded, missing ones run
    (no progress bar: notebooks show their output)."""
    setting = quick() if quick_setting is None else quick_setting
    table, out = reproduce.results(name, quick=setting, progress=False)
    print(f"{name}: {len(table)} runs ({'quick' if setting else 'full'} setting) in {out}")
    return table, out


def show(figures: Mapping[str, Figure], *names: str) -> None:
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


def execute(path: str | Path, out: str | Path | None = None, *, timeout_s: int = 1800) -> Path:
    """Run a jupytext notebook in its own directory with a fresh kernel and write the
    executed notebook (`out`, default results/notebooks/NAME.ipynb); a failing cell
    raises nbclient's CellExecutionError."""
    import jupytext
    import nbformat
    from nbclient import NotebookClient

    from .paths import results_root

    path = Path(path).resolve()
    notebook = jupytext.read(path)
    NotebookClient(
        notebook, timeout=timeout_s, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    target = Path(out) if out is not None else results_root() / "notebooks" / f"{path.stem}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.notebook",
        description="Execute a notebook (full size unless OOBLAB_QUICK=1) and write the .ipynb.",
    )
    parser.add_argument("notebook", help="a notebooks/*.py file")
    parser.add_argument(
        "-o", "--output", default=None, help="where to write the executed .ipynb (default results/notebooks/NAME.ipynb)"
    )
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    args = parser.parse_args(argv)
    if not Path(args.notebook).is_file():
        print(f"python -m experiments.notebook: error: no such notebook {args.notebook!r}", file=sys.stderr)
        return 2
    print(execute(args.notebook, args.output, timeout_s=args.timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
