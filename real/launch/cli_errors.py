"""How the real backend's commands fail: a request that cannot work is one line and exit
status 2 (`request_error`, for the errors `user_errors` lists); anything else is an internal error,
one line saying so and the traceback in the run directory's `error.log` (`internal_error`).
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

from ..config import (
    ConfigError,
)


def request_error(command: str, exc: Exception) -> int:
    print(f"ooblab {command}: error: {exc}", file=sys.stderr)
    return 2


def user_errors() -> tuple[type[Exception], ...]:
    """Exceptions that mean the request cannot work (exit 2); every other is a bug."""
    from designs.options import DesignError
    from planner.errors import PlannerError
    from planner.output_dirs import OutputError
    from traces.errors import TraceError

    from ..control.trace_replay import TraceScheduleError
    from ..protocol.errors import ConnectError, ListenError, SecretError
    from ..protocol.failures import InjectionError

    return (
        ConfigError,
        DesignError,
        PlannerError,
        TraceError,
        TraceScheduleError,
        InjectionError,
        ListenError,
        ConnectError,
        SecretError,
        OutputError,
    )


def internal_error(command: str, run_dir: Path | None) -> int:
    """One line naming the bug; the traceback goes to RUN_DIR/error.log (else stderr)."""
    text = traceback.format_exc()
    kind, _, message = text.strip().splitlines()[-1].partition(": ")
    where = "below"
    if run_dir is not None:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            with open(run_dir / "error.log", "a") as log:
                log.write(text)
            where = f"in {run_dir / 'error.log'}"
        except OSError:
            pass
    print(
        f"ooblab {command}: internal error: {kind}{': ' + message[:200] if message else ''} (traceback {where})",
        file=sys.stderr,
        flush=True,
    )
    if where == "below":
        print(text, file=sys.stderr, end="")
    return 1
