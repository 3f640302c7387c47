"""Where experiments read reference data and write results.

- Reference data (`shared_dir`): `$OOBLAB_SHARED` if set (an empty or missing path means
  "absent", which tests use to exercise the fallbacks), else `../shared` next to the
  checkout, else `../shared` from the working directory; None when none exists. Trace files
  are read from there, never copied into the project.
- Results (`results_root`): `$OOBLAB_RESULTS` if set, else `results/` at the top of the
  checkout (so notebooks, which run in `notebooks/`, and the CLI share one tree), else
  `results/` in the working directory. One experiment writes `results/NAME/` (its quick
  setting `results/NAME/quick/`).
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def checkout_root() -> Path | None:
    """The source checkout holding this package (None for an installed copy)."""
    root = PACKAGE_DIR.parent
    return root if (root / "pyproject.toml").exists() else None


def shared_dir() -> Path | None:
    override = os.environ.get("OOBLAB_SHARED")
    if override is not None:
        path = Path(override)
        return path if override and path.is_dir() else None
    candidates = [Path.cwd().parent / "shared"]
    root = checkout_root()
    if root is not None:
        candidates.insert(0, root.parent / "shared")
    for path in candidates:
        if (path / "traces").is_dir():
            return path
    return None


def results_root() -> Path:
    override = os.environ.get("OOBLAB_RESULTS")
    if override:
        return Path(override)
    root = checkout_root()
    return (root if root is not None else Path.cwd()) / "results"


def experiment_dir(name: str, *, quick: bool) -> Path:
    base = results_root() / name
    return base / "quick" if quick else base
