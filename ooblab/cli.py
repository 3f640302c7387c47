"""The `ooblab` command: one sub-command per part of the testbed.

Each part owns its sub-commands in `<part>/cli.py`, which exposes `register(subparsers)`.
Modules are imported here only to register their parsers; heavy dependencies (torch,
simpy) are imported inside the handlers. When the command line names a sub-command, only
the part that owns it is imported (`ooblab plan` then loads neither pandas, simpy nor
torch); `ooblab --help` and unknown commands import every part.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# Parts that contribute sub-commands, in the order `ooblab --help` lists them.
_PARTS = (
    "planner.cli",
    "traces.cli",
    "designs.cli",
    "sim.cli",
    "real.launch.cli",
    "experiments.cli",
    "experiments.validation.cli",
)
# Which part registers each sub-command (tests/planner/test_cli.py checks it against the parts).
COMMANDS = {
    "plan": "planner.cli",
    "traces": "traces.cli",
    "designs": "designs.cli",
    "simulate": "sim.cli",
    "costs": "sim.cli",
    "run": "real.launch.cli",
    "coordinator": "real.launch.cli",
    "netns": "real.launch.cli",
    "node": "real.launch.cli",
    "worker": "real.launch.cli",
    "profile": "real.launch.cli",
    "reproduce": "experiments.cli",
    "validate": "experiments.validation.cli",
}


class OneLineParser(argparse.ArgumentParser):
    """Bad arguments get one line naming the problem (exit 2), not the usage block;
    sub-command parsers are of this class too (argparse makes them from the parent's)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with `argv` naming a known sub-command first, only its part's."""
    command = argv[0] if argv else None
    parts = (COMMANDS[command],) if command in COMMANDS else _PARTS
    parser = OneLineParser(
        prog="ooblab",
        description="Testbed for resilient distributed training on preemptible GPUs.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in parts:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # the part has no CLI yet
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except BrokenPipeError:  # e.g. `ooblab plan --json | head`
        return 0
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's convention for SIGINT
        print(f"ooblab {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
