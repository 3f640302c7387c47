"""Reading a file a user hands in: bounded, UTF-8 (a byte order mark is fine), one error.

Every part reads its input files through `read_text` or `read_json` (traces, cost
profiles, Hugging Face configs, ...), so each refusal is worded alike and names the file:
no such file, a directory, past its size cap (read no further than the cap, so
`/dev/zero` is refused at once rather than read until memory runs out), not UTF-8 text,
not JSON (with the line), nested too deeply. The caller turns `InputFileError` into its
own error type where it has one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MIB = 1 << 20


class InputFileError(ValueError):
    """A file that cannot be read as the input it should be; the message names it (and
    the line, where there is one): `where` and `line` kept apart for callers that word
    their own."""

    def __init__(self, where: str, reason: str, line: int | None = None):
        self.where, self.reason, self.line = where, reason, line
        super().__init__(f"{where}:{line}: {reason}" if line is not None else f"{where}: {reason}")


def read_bytes(path: str | Path, *, what: str, cap_bytes: int) -> bytes:
    """The file's bytes, refusing a file past `cap_bytes` without reading past the cap."""
    path = Path(path)
    if str(path).strip() in ("", "."):
        raise InputFileError(what, "an empty path names no file")
    try:
        with open(path, "rb") as handle:
            data = handle.read(cap_bytes + 1)
    except FileNotFoundError:
        raise InputFileError(str(path), "no such file") from None
    except IsADirectoryError:
        raise InputFileError(str(path), f"is a directory, not {what}") from None
    except PermissionError:
        raise InputFileError(str(path), "permission denied") from None
    except OSError as exc:
        raise InputFileError(str(path), f"cannot be read ({exc.strerror or exc})") from None
    if len(data) > cap_bytes:
        raise InputFileError(
            str(path),
            f"larger than the {cap_bytes / MIB:g} MiB that {what} may be (read no further); is this the right file?",
        )
    return data


def read_text(path: str | Path, *, what: str, cap_bytes: int) -> str:
    """The file as text (UTF-8, a leading byte order mark dropped)."""
    data = read_bytes(path, what=what, cap_bytes=cap_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputFileError(str(path), f"not UTF-8 text (is this {what}?)", line) from None


def read_json(path: str | Path, *, what: str, cap_bytes: int = MIB) -> Any:
    """The file's JSON value."""
    text = read_text(path, what=what, cap_bytes=cap_bytes)
    return parse_json(text, where=str(path))


def parse_json(text: str, *, where: str) -> Any:
    """`text` as JSON; an error names `where` and the line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFileError(where, f"not JSON: {exc.msg}", exc.lineno) from None
    except RecursionError:
        raise InputFileError(where, "not JSON this reads: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise InputFileError(where, f"not JSON this reads: {exc}") from None


def shown(value: Any, limit: int = 60) -> str:
    """`repr(value)` for an error message, cut to `limit` characters (a 400-digit number or
    a pasted file stays one readable line)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}... ({len(text):,} characters)"


def exists(path: str | Path) -> bool:
    """Whether `path` names something on disk; False for a string no file system could
    hold (a 300-character spec or model name asked about as a path), rather than an error."""
    try:
        return Path(path).exists()
    except (OSError, ValueError):
        return False
