"""One run of a sweep, whatever backend runs it: its spec, its runner, how it is written.

`sweep` (the local pool) and `sweep_ray` (Ray tasks) both run specs with `execute_run`, so
a run's directory is the same whichever ran it; they share this module rather than import
each other.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

Runner = Callable[["RunSpec", Path], Mapping[str, Any]]


@dataclass(frozen=True)
class RunSpec:
    """One run of an experiment: which backend runs it (`kind`) and with what parameters."""

    experiment: str
    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def canonical(self) -> str:
        return json.dumps({"kind": self.kind, "params": dict(self.params)}, sort_keys=True, default=str)

    @property
    def key(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:16]


def execute_run(runner: Runner, spec: RunSpec, run_dir: Path) -> Mapping[str, Any]:
    """One run into `run_dir`, marked finished; every backend runs its specs with this."""
    run_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(dict(runner(spec, run_dir)), indent=2, sort_keys=True, default=str) + "\n"
    (run_dir / "summary.json").write_text(text)
    # Written last: a run interrupted half-way is redone next time.
    (run_dir / "spec.json").write_text(spec.canonical())
    return json.loads(text)  # what a later sweep will load: same types, same column order


class Bar(Protocol):
    """What a sweep needs of a progress bar (tqdm's, or none)."""

    def update(self, n: int) -> None: ...

    def close(self) -> None: ...
