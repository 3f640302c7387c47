"""What each layer's optimizer step costs per iteration (`optimizer.json`, optional).

The paper's cost model (Eq. 1-4), like Oobleck's profile format, charges an iteration its
forward and backward passes and its all-reduce, and nothing for the optimizer step that
every rank runs after the gradient synchronisation. On a GPU that step is a few fused
kernels; on the CPU testbed it is real work: tiny-gpt's AdamW takes about 22 ms for the
whole model on one core (CHANGELOG.md), 5% of a data-parallel iteration there. The
profiler (`real.launch.profiler`) times each layer's step and writes, beside `mb*.json`:

```json
{"source": "ooblab profile, tiny-gpt on host, AdamW, 1 thread, 2026-12-01",
 "step_s": [0.0004, 0.0051, 0.0051, 0.0051, 0.0051, 0.0003]}
```

`step_s[i]`: one optimizer step over layer i's parameters, in seconds, measured as its
layers are (beside the same busy neighbours, when `contention.json` is measured too).
The planner does not read it (plans are chosen as the backend chooses them, from the
Oobleck format); the simulator adds the slowest rank's step to every iteration
(`sim.optimizer_cost`). Without the file nothing is charged, as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ProfileError
from .side_files import read_side_file, write_side_file

FILE_NAME = "optimizer.json"


@dataclass(frozen=True)
class OptimizerProfile:
    """Seconds of one optimizer step per layer (see the module docstring)."""

    step_s: tuple[float, ...]
    source: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "step_s", tuple(float(s) for s in self.step_s))
        where = self.source or FILE_NAME
        if not self.step_s:
            raise ProfileError(f"{where}: step_s lists no layer")
        for index, seconds in enumerate(self.step_s):
            if not (math.isfinite(seconds) and seconds >= 0):
                raise ProfileError(f"{where}: step_s[{index}] = {seconds!r} is not a finite number >= 0")

    def stage_s(self, first_layer: int, end_layer: int, num_gpus: int = 1) -> float:
        """One step of layers [first_layer, end_layer) split over `num_gpus` GPUs."""
        return sum(self.step_s[first_layer:end_layer]) / num_gpus

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "step_s": list(self.step_s)}


def parse_optimizer(data: Any, where: str = FILE_NAME) -> OptimizerProfile:
    """An `OptimizerProfile` from the decoded JSON; ProfileError naming the bad field."""
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: expected an object, got {type(data).__name__}")
    unknown = sorted(set(data) - {"source", "step_s"})
    if unknown:
        raise ProfileError(f"{where}: unknown field {unknown[0]!r}")
    if "step_s" not in data:
        raise ProfileError(f"{where}: missing field 'step_s'")
    source = data.get("source", "")
    if not isinstance(source, str):
        raise ProfileError(f"{where}: field 'source' must be a string")
    steps = data["step_s"]
    if not isinstance(steps, list):
        raise ProfileError(f"{where}: field 'step_s' must be a list of seconds per layer")
    for index, value in enumerate(steps):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProfileError(f"{where}: step_s[{index}] must be a number, got {value!r}")
    return OptimizerProfile(tuple(float(v) for v in steps), source or where)


def load_optimizer(directory: str | Path) -> OptimizerProfile | None:
    """`directory/optimizer.json`, or None when the profile has none."""
    found = read_side_file(directory, FILE_NAME)
    return None if found is None else parse_optimizer(found[0], str(found[1]))


def write_optimizer(profile: OptimizerProfile, directory: str | Path) -> Path:
    return write_side_file(profile.to_json(), directory, FILE_NAME)
