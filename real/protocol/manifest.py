"""A checkpoint's manifest: the complete set of layer files ready for one step.

On disk (`directory`): `checkpoint.json` = {"step": k, "files": {"<l>": "step<k>/layer<l>.pt"},
"time_s": ..., "kept": [k', k]}, where `kept` lists the complete checkpoints still on disk,
oldest first (the newest is `step`; an older one is the fallback when a file of the newest
has gone missing). The coordinator names a manifest in a restart's directive and workers
read the layer files it lists; writing the files and the manifest is `state.checkpoint`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "checkpoint.json"


def layer_path(step: int, layer: int) -> str:
    return f"step{step}/layer{layer}.pt"


@dataclass(frozen=True)
class Manifest:
    """A complete checkpoint: every layer, ready for `step`."""

    directory: str
    step: int
    files: Mapping[int, str]
    time_s: float = 0.0
    kept: tuple[int, ...] = ()  # complete checkpoints on disk, oldest first (ends with `step`)

    def to_dict(self) -> dict:
        return {"directory": self.directory, "step": self.step, "files": {str(l): f for l, f in self.files.items()},
                "time_s": self.time_s, "kept": list(self.kept)}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping) -> Manifest:
        files = {int(l): str(f) for l, f in data["files"].items()}
        return cls(
            str(data["directory"]),
            int(data["step"]),
            files,
            float(data.get("time_s", 0.0)),
            tuple(int(k) for k in data.get("kept", ())),
        )

    def older(self) -> list[Manifest]:
        """The older complete checkpoints the manifest keeps, newest first (same file names)."""
        steps = sorted((k for k in self.kept if k < self.step), reverse=True)
        return [
            Manifest(
                self.directory, k, {l: layer_path(k, l) for l in self.files}, 0.0, tuple(j for j in self.kept if j <= k)
            )
            for k in steps
        ]


def read_manifest(directory: str | Path) -> Manifest | None:
    path = Path(directory) / MANIFEST
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return Manifest.from_dict({**data, "directory": str(directory)})
