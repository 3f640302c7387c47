"""The one error type of the traces package.

Bad input must fail loudly and point at the culprit: every message names the source (a file
path, or a generator spec) and, where there is one, the 1-based line number, then says what
is wrong and, where a fix exists, how to get it (e.g. ``repair=True``).
"""

from __future__ import annotations


class TraceError(ValueError):
    """A trace, trace file, generator spec or transformation argument is invalid.

    ``source`` and ``line`` are kept as attributes so that callers (the CLI, the simulator)
    can report them in their own way; ``str(error)`` already contains both.
    """

    def __init__(self, message: str, *, source: str | None = None, line: int | None = None):
        self.source = source
        self.line = line
        self.reason = message
        where = ""
        if source is not None:
            where = f"{source}:{line}: " if line is not None else f"{source}: "
        super().__init__(where + message)
