"""The optional JSON files beside a profile's `mb*.json` (`contention.json`, `optimizer.json`):
read when present, with one error for a file that is there but unreadable, and written
the same way, so every such file behaves alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import ProfileError


def read_side_file(directory: str | Path, name: str) -> tuple[Any, Path] | None:
    """The decoded `directory/name` and its path, or None when the profile has no such file."""
    path = Path(directory) / name
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text()), path
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ProfileError(f"{path}: not a readable JSON file ({type(exc).__name__})") from None


def write_side_file(data: Any, directory: str | Path, name: str) -> Path:
    path = Path(directory) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))
    return path
