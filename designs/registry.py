"""The registry: design name -> `Design`, filled at first use, asked by every engine.

Designs come from three places, in this order: the package's own (`BUILTIN`), the
`ooblab.designs` entry-point group of installed distributions (each entry point names a
module, whose module-level `Design`s are registered, or a `Design` itself), and modules
loaded from a file (`load_file`, the `--design-module FILE.py` flag). A name registered
twice is an error unless it is the very same design.

`resolve(name, settings, where)` is what an engine calls: the design, and its options
from `settings` (option names, or the legacy config fields that carry them), checked
against the place they are used (`options.ARTIFACT`, `PLANNER`, `REAL`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from .base import REAL_BACKEND, SIMULATOR, Design
from .options import WHERE_TITLES, DesignError, make_options

BUILTIN = (
    "designs.oobleck",
    "designs.bamboo",
    "designs.varuna",
    "designs.gemini",
    "designs.parcae",
    "designs.recycle",
    "designs.replica_groups",
)
ENTRY_POINT_GROUP = "ooblab.designs"

_designs: dict[str, Design] = {}
_loaded = False
_files: dict[str, list[str]] = {}  # resolved path -> the names it registered


def register(design: Design) -> Design:
    """Add `design`; the same name twice is an error (the same object again is not)."""
    if not isinstance(design, Design):
        raise DesignError(f"only a designs.Design can be registered, got {type(design).__name__}")
    known = _designs.get(design.name)
    if known is not None and known is not design:
        raise DesignError(f"design {design.name!r} is registered twice")
    clash = [d.name for d in _designs.values() if d is not design and d.label.casefold() == design.label.casefold()]
    if clash:
        raise DesignError(f"design {design.name!r} would show as {design.label!r}, as design {clash[0]!r} does")
    _designs[design.name] = design
    return design


def designs_in(module: ModuleType) -> list[Design]:
    """The module-level `Design`s of `module`, in definition order."""
    return [value for value in vars(module).values() if isinstance(value, Design)]


def _ensure_loaded() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name in BUILTIN:
        for design in designs_in(importlib.import_module(name)):
            register(design)
    load_entry_points()


def load_entry_points(group: str = ENTRY_POINT_GROUP) -> list[str]:
    """Register the designs the installed distributions declare in `group`."""
    names = []
    for point in importlib.metadata.entry_points(group=group):
        try:
            target = point.load()
        except Exception as exc:  # noqa: BLE001 - a broken plug-in is the user's problem, named
            raise DesignError(f"entry point {point.name} = {point.value} ({group}) cannot be loaded: {exc}") from None
        found = designs_in(target) if isinstance(target, ModuleType) else [target]
        if not found or not all(isinstance(d, Design) for d in found):
            raise DesignError(f"entry point {point.name} = {point.value} ({group}) defines no designs.Design")
        names += [register(d).name for d in found]
    return names


def load_file(path: str | Path) -> list[str]:
    """Import the module at `path` (a .py file, or a package directory with an
    `__init__.py`, as the built-in designs are) and register the designs it defines;
    their names."""
    _ensure_loaded()
    file = Path(path).resolve()
    if str(file) in _files:
        return list(_files[str(file)])
    if not file.exists():
        raise DesignError(f"design module {path}: no such file or directory")
    package = file.is_dir()
    if package and not (file / "__init__.py").is_file():
        raise DesignError(f"design module {path} is a directory without an __init__.py")
    if not package and (not file.is_file() or file.suffix != ".py"):
        raise DesignError(f"design module {path} is not a .py file or a package directory")
    name = f"ooblab_design_module_{len(_files)}_{file.stem}"
    if package:  # its own modules import each other relatively (from .policy import ...)
        spec = importlib.util.spec_from_file_location(
            name, file / "__init__.py", submodule_search_locations=[str(file)]
        )
    else:
        spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise DesignError(f"design module {path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except DesignError as exc:
        del sys.modules[name]
        raise DesignError(f"design module {path}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed: say where
        del sys.modules[name]
        raise DesignError(f"design module {path} failed to import: {type(exc).__name__}: {exc}") from None
    found = designs_in(module)
    if not found:
        raise DesignError(
            f"design module {path} defines no design (a module-level designs.Design); known designs: {', '.join(names())}"
        )
    registered = [register(d).name for d in found]
    _files[str(file)] = registered
    return registered


def load_files(paths: Iterable[str | Path]) -> list[str]:
    return [name for path in paths for name in load_file(path)]


def names() -> tuple[str, ...]:
    _ensure_loaded()
    return tuple(_designs)


def all_designs() -> tuple[Design, ...]:
    _ensure_loaded()
    return tuple(_designs.values())


def get(name: str) -> Design:
    _ensure_loaded()
    design = _designs.get(name)
    if design is None:
        raise DesignError(f"unknown design {name!r}; known designs: {', '.join(_designs)}")
    return design


def label(name: str) -> str | None:
    """The display name of the design registered as `name`; None where no design is."""
    _ensure_loaded()
    design = _designs.get(name)
    return design.label if design is not None else None


def shown(name: str) -> str:
    """How to print `name`: its design's display name, or the name itself where no
    design is registered under it (a design of a saved run since removed)."""
    return label(name) or name


def owners(key: str) -> tuple[str, ...]:
    """The designs that have an option (or legacy field) called `key`."""
    return tuple(d.name for d in all_designs() if any(key in (s.name, s.legacy) for s in d.option_specs))


def legacy_fields() -> dict[str, tuple[str, ...]]:
    """Legacy config field -> the designs whose option it carries."""
    out: dict[str, list[str]] = {}
    for design in all_designs():
        for spec in design.option_specs:
            if spec.legacy:
                out.setdefault(spec.legacy, []).append(design.name)
    return {key: tuple(value) for key, value in out.items()}


def resolve(name: str, settings: Mapping[str, Any], where: str) -> tuple[Design, Any]:
    """The design `name` and its options from `settings`, for use in `where` (ARTIFACT,
    PLANNER: the simulator's calibrations; REAL: the real backend)."""
    design = get(name)
    engine = REAL_BACKEND if where == "real" else SIMULATOR
    if engine not in design.runs_on:
        able = [d.name for d in all_designs() if engine in d.runs_on]
        raise DesignError(
            f"design {name} does not run on the {'real backend' if engine == REAL_BACKEND else 'simulator'}; "
            f"designs that do: {', '.join(able)}"
        )
    specs = design.option_specs
    mine = {s.name for s in specs} | {s.legacy for s in specs if s.legacy}
    for key in settings:
        if key not in mine:
            others = [d for d in owners(key) if d != name]
            if others:
                raise DesignError(
                    f"{key} is an option of {' and '.join(others)}, not of {name}; "
                    f"{name}'s options: {', '.join(s.name for s in specs) or 'none'}"
                )
    options = make_options(name, design.options, settings)
    for spec in specs:
        if any(key in (spec.name, spec.legacy) for key in settings) and where not in spec.where:
            raise DesignError(f"{name} option {spec.name} has no effect in {WHERE_TITLES[where]}")
    return design, options
