"""Checking where a command will write, before it starts any work, without writing there.

Every command that writes (`simulate --out`, `run --out` and `--checkpoint-dir`,
`validate --out`, `profile --out`, `reproduce --out`, `traces ... -o`) asks
`check_output_dir` (a directory) or `check_output_file` (a file) first: a path through a
file, a name too long for the file system, a directory that cannot be created or written
into (read-only, no permission) is refused in one line naming the flag. Nothing is
created by the check (a refused command leaves nothing behind): it finds the nearest
directory that exists on the way and proves it writable with a temporary file that is
gone when the check returns.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


class OutputError(ValueError):
    """A place a command cannot write to; the message names the flag and the path."""


def _nearest_existing(path: Path) -> Path:
    current = path
    while not current.exists():
        if current.parent == current:
            break
        current = current.parent
    return current


def _check_names(flag: str, path: Path) -> None:
    """Each component of the path fits the file system's name length (checked first: a
    longer one makes even asking whether the path exists fail)."""
    try:
        limit = os.pathconf("/", "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    for part in path.parts:
        if len(os.fsencode(part)) > limit:
            raise OutputError(
                f"{flag} {path}: the name {part[:40]}... is {len(os.fsencode(part))} bytes, past the file system's "
                f"{limit}"
            )


def _check_writable(flag: str, path: Path, base: Path) -> None:
    if not base.is_dir():
        raise OutputError(f"{flag} {path}: {base} is a file, not a directory")
    try:
        with tempfile.TemporaryFile(dir=base):
            pass
    except OSError as exc:
        why = {errno.EROFS: "a read-only file system", errno.EACCES: "permission denied"}.get(
            exc.errno or 0, exc.strerror or str(exc)
        )
        if Path(path).exists():
            raise OutputError(f"{flag} {path}: cannot write into it ({why})") from None
        raise OutputError(f"{flag} {path}: cannot create it in {base} ({why})") from None


def check_output_dir(path: str | Path, flag: str = "--out") -> None:
    """Refuse, before any work, a directory that cannot be made or written into."""
    path = Path(path)
    _check_names(flag, path.absolute())
    if path.exists() and not path.is_dir():
        raise OutputError(f"{flag} {path}: exists and is not a directory")
    _check_writable(flag, path, _nearest_existing(path.absolute()))


def check_output_file(path: str | Path, flag: str = "-o") -> None:
    """Refuse, before any work, a file that cannot be written (its directory must exist)."""
    path = Path(path)
    _check_names(flag, path.absolute())
    if path.is_dir():
        raise OutputError(f"{flag} {path}: is a directory; name a file")
    parent = path.absolute().parent
    if not parent.exists():
        raise OutputError(f"{flag} {path}: {parent} does not exist")
    _check_writable(flag, path, parent)
