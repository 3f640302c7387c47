"""What the coordinator tells the workers about one generation (JSON through the store).

A `Directive` is generation g's layout (ranks, stages, groups), which worker runs each
rank, the step training resumes at, and where every rank gets each of its layers
(`sources.Source`), plus the checkpoint to load from when some layer comes from one, the
generation whose in-memory copy `memory` sources read (`memory_from`, the copy of the
resume step), and the in-memory copies this generation takes while it trains (`copies`,
`copies.CopyOrder`; None: none). Workers that are not named sit the generation out
(spares) and keep what they hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .copies import CopyOrder
from .layout import Layout
from .manifest import Manifest
from .sources import CHECKPOINT, MEMORY, Source, sources_from_json, sources_to_json

START, RECONFIGURE, RESTART = "start", "reconfigure", "restart"


@dataclass(frozen=True)
class Directive:
    generation: int
    kind: str  # START | RECONFIGURE | RESTART
    layout: Layout
    workers: tuple[int, ...]  # workers[rank] = worker id
    resume_step: int
    sources: tuple[tuple[Source, ...], ...]  # sources[rank]: one per layer of its stage
    checkpoint: Manifest | None = None
    copies: CopyOrder | None = None
    memory_from: int | None = None

    def __post_init__(self) -> None:
        if len(self.workers) != self.layout.world_size or len(self.sources) != self.layout.world_size:
            raise ValueError("a directive names one worker and one source list per rank")
        for stage, per_rank in zip(self.layout.stages, self.sources):
            if [s.layer for s in per_rank] != list(stage.layers):
                raise ValueError(
                    f"rank {stage.rank}: sources for layers {[s.layer for s in per_rank]}, stage holds {list(stage.layers)}"
                )
        if self.checkpoint is None and any(s.kind == CHECKPOINT for per_rank in self.sources for s in per_rank):
            raise ValueError("layers come from a checkpoint, but the directive names none")
        if self.memory_from is None and any(s.kind == MEMORY for per_rank in self.sources for s in per_rank):
            raise ValueError("layers come from an in-memory copy, but the directive names no generation")
        if self.copies is not None and len(self.copies.sends) != self.layout.world_size:
            raise ValueError("a copy order names one list of receivers per rank")

    def rank_of_worker(self, worker_id: int) -> int | None:
        try:
            return self.workers.index(worker_id)
        except ValueError:
            return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "kind": self.kind,
            "layout": self.layout.to_dict(),
            "workers": list(self.workers),
            "resume_step": self.resume_step,
            "sources": sources_to_json(self.sources),
            "checkpoint": self.checkpoint.to_dict() if self.checkpoint else None,
            "copies": self.copies.to_dict() if self.copies else None,
            "memory_from": self.memory_from,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Directive:
        return cls(
            generation=int(data["generation"]),
            kind=str(data["kind"]),
            layout=Layout.from_dict(data["layout"]),
            workers=tuple(int(w) for w in data["workers"]),
            resume_step=int(data["resume_step"]),
            sources=sources_from_json(data["sources"]),
            checkpoint=Manifest.from_dict(data["checkpoint"]) if data.get("checkpoint") else None,
            copies=CopyOrder.from_dict(data["copies"]) if data.get("copies") else None,
            memory_from=None if data.get("memory_from") is None else int(data["memory_from"]),
        )
