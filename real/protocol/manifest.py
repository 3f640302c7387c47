"""A checkpoint's manifest: the complete set of layer files ready for one step.

On disk (`directory`): `checkpoint.json` = {"step": k, "files": {"<l>": "step<k>/layer<l>.pt"},
"time_s": ...}. The coordinator names a manifest in a restart's directive and workers
read the layer files it lists; writing the files and the manifest is `state.checkpoint`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

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

    def to_dict(self) -> dict:
        return {"directory": self.directory, "step": self.step, "files": {str(l): f for l, f in self.files.items()}, "time_s": self.time_s}

    @classmethod
    def from_dict(cls, data: Mapping) -> "Manifest":
        return cls(str(data["directory"]), int(data["step"]), {int(l): str(f) for l, f in data["files"].items()}, float(data.get("time_s", 0.0)))


def read_manifest(directory: str | Path) -> Manifest | None:
    path = Path(directory) / MANIFEST
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return Manifest.from_dict({**data, "directory": str(directory)})


