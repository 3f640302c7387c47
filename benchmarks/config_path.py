"""Follow a simulation's configuration through the code: which functions it is handed to.

Runs `sim.run.simulate` on one configuration under `sys.setprofile` and records every call
whose arguments include the `SimConfig` or one of its groups (`job`, `design`, `costs`,
`run`). Prints the path (module and function, in call order, repeats folded), the distinct
stops and modules, and how many times the path comes back to `sim/setup.py` from another
module (a call into setup whose caller is outside it, after the path has left setup). A
maintainer reads it to see that the configuration takes one route into the engine.

    python benchmarks/config_path.py [--trace SPEC] [--design NAME] [--costs PROFILE]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.config import CostConfig, DesignConfig, JobConfig, RunControl, SimConfig  # noqa: E402
from sim.run import simulate  # noqa: E402

CONFIG_TYPES = (SimConfig, JobConfig, DesignConfig, CostConfig, RunControl)


def _arguments(frame: FrameType) -> Iterator[Any]:
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    for name in names:
        if name in frame.f_locals:
            yield frame.f_locals[name]


def _where(frame: FrameType) -> str | None:
    """The frame's file relative to the project, None outside it (the standard library)."""
    path = Path(frame.f_code.co_filename)
    if path.name.startswith("<"):  # generated code (a dataclass's __init__)
        return None
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return None


def trace_path(config: SimConfig) -> list[tuple[str, str, str]]:
    """(caller's file, callee's file, callee) for each call handed the configuration."""
    path: list[tuple[str, str, str]] = []

    def profiler(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        callee = _where(frame)
        if callee is not None and any(isinstance(a, CONFIG_TYPES) for a in _arguments(frame)):
            caller = frame.f_back
            path.append(
                (
                    (_where(caller) if caller else None) or "?",
                    callee,
                    getattr(frame.f_code, "co_qualname", frame.f_code.co_name),
                )
            )

    sys.setprofile(profiler)
    try:
        simulate(config)
    finally:
        sys.setprofile(None)
    return path


def returns_to(path: list[tuple[str, str, str]], module: str) -> int:
    """Calls into `module` from another module, after the first entry into it."""
    entered = False
    count = 0
    for caller, callee, _ in path:
        if callee != module:
            continue
        if caller != module:
            if entered:
                count += 1
            entered = True
    return count


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="datacenter:gpus=1024,days=2")
    parser.add_argument("--design", default="oobleck")
    parser.add_argument("--costs", default="h100-datacenter")
    args = parser.parse_args(argv)
    config = SimConfig.from_mapping(
        {
            "calibration": "planner",
            "model": "gpt3-6.7b",
            "gpu": "h100-80gb",
            "gpus_per_node": 8,
            "global_batch": 1024,
            "trace": args.trace,
            "policy": args.design,
            "costs": args.costs,
        }
    )
    path = trace_path(config)
    folded: list[tuple[str, str, str]] = []
    for step in path:
        if not folded or folded[-1][1:] != step[1:]:
            folded.append(step)
    for caller, callee, name in folded:
        print(f"  {callee}:{name}  (from {caller})")
    stops = {(callee, name) for _, callee, name in path}
    modules = {callee for _, callee, _ in path}
    print(f"stops: {len(stops)} functions in {len(modules)} modules")
    print(f"comes back to sim/setup.py: {returns_to(path, 'sim/setup.py')} time(s)")


if __name__ == "__main__":
    main()
