"""Where one layer of one rank of a generation comes from, as the directive says it.

`local`: the rank's own worker holds it at the resume step; `peer`: another rank of the
generation sends it (`rank` names the sender); `memory`: the in-memory copy the directive
names (`memory_from`), read from the CPU memory of rank `rank`'s node, which sends it
(or the rank itself, when `rank` is its own); `checkpoint`: loaded from the directive's
checkpoint; `init`: built from its seed (a fresh start at step 0). Which source each
layer gets is the coordinator's choice (`state.transfers.plan_sources`); this module is
only the vocabulary both sides read and its JSON form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .layout import Layout

LOCAL, PEER, MEMORY, CHECKPOINT, INIT = "local", "peer", "memory", "checkpoint", "init"
KINDS = (LOCAL, PEER, MEMORY, CHECKPOINT, INIT)
SENT = (PEER, MEMORY)  # kinds that name the rank they come from


@dataclass(frozen=True)
class Source:
    """Where one layer of one rank comes from (`rank`: the sender, for `peer` and `memory`)."""

    layer: int
    kind: str
    rank: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown source kind {self.kind!r}")
        if (self.kind in SENT) != (self.rank is not None):
            raise ValueError("a peer or memory source names its rank, other sources do not")


def uniform_sources(layout: Layout, kind: str) -> tuple[tuple[Source, ...], ...]:
    """Every layer of every rank from the same place (`checkpoint` or `init`)."""
    return tuple(tuple(Source(l, kind) for l in s.layers) for s in layout.stages)


def sources_to_json(sources: Sequence[Sequence[Source]]) -> list[list[list]]:
    return [[[s.layer, s.kind, s.rank] for s in per_rank] for per_rank in sources]


def sources_from_json(data: Sequence[Sequence[Sequence]]) -> tuple[tuple[Source, ...], ...]:
    return tuple(
        tuple(Source(int(l), str(k), None if r is None else int(r)) for l, k, r in per_rank) for per_rank in data
    )
