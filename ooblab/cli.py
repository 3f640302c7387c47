"""The `ooblab` command: one sub-command per part of the testbed.

Each part owns its sub-commands in `<part>/cli.py`, which exposes `register(subparsers)`.
Modules are imported here only to register their parsers; heavy dependencies (torch,
simpy) are imported inside the handlers. When the command line names a sub-command, only
the part that owns it is imported (`ooblab plan` then loads neither pandas, simpy nor
torch); `ooblab --help` and unknown commands import every part.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import signal
import sys
import threading

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


# Files that fail for reasons of the place read or written, not of ooblab (a full disk, a
# read-only directory, a name too long): one line naming the file, exit 2.
_WRITE_ERRORS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "over the disk quota",
    errno.EROFS: "a read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "not permitted",
    errno.ENAMETOOLONG: "a name too long for the file system",
    errno.EISDIR: "a directory where a file was to be written",
    errno.ENOTDIR: "a path through something that is not a directory",
}


class Terminated(Exception):
    """SIGTERM, turned into an exception so that `main` ends the command in one line."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated


def main(argv: list[str] | None = None) -> int:
    """Run one sub-command. Ctrl-C (exit 130) and SIGTERM (exit 143) end any command with
    one line from the moment this function runs, the sub-command's imports included (spawned
    children print their own); a file that the file system refuses (a full disk, a
    read-only directory) is one line naming it and exit 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[0] if argv and not argv[0].startswith("-") else "command"
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    try:
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        command = args.command
        return int(args.handler(args) or 0)
    except BrokenPipeError:  # e.g. `ooblab plan --json | head`
        _quiet_stdout()
        return 0
    except KeyboardInterrupt:  # Ctrl-C: one line, the shell's convention for SIGINT
        print(f"ooblab {command}: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print(f"ooblab {command}: terminated", file=sys.stderr)
        return 143
    except OSError as exc:
        why = _WRITE_ERRORS.get(exc.errno or 0)
        if why is None:
            raise
        _quiet_stdout()
        print(f"ooblab {command}: error: {exc.filename or 'standard output'}: {why}", file=sys.stderr)
        return 2
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _quiet_stdout() -> None:
    """Point standard output at /dev/null, so that the interpreter's last flush of what
    could not be written adds no second message."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
