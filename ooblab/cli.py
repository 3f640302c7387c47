"""The `ooblab` command: one sub-command per part of the testbed.

Each part owns its sub-commands in `<part>/cli.py`, which exposes `register(subparsers)`.
Modules are imported here only to register their parsers; heavy dependencies (torch,
simpy) are imported inside the handlers so that `ooblab plan` stays light.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Parts that contribute sub-commands, in the order `ooblab --help` lists them.
_PARTS = ("planner.cli", "traces.cli", "sim.cli", "real.launch.cli", "experiments.cli", "experiments.validation.cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ooblab",
        description="Testbed for resilient distributed training on preemptible GPUs.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in _PARTS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # the part has no CLI yet
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except BrokenPipeError:  # e.g. `ooblab plan --json | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
