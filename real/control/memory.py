"""The coordinator's side of in-memory copies: which are complete, and who still holds them.

A design with `RealHooks.memory_copies` has every generation take copies of its layers
into nodes' CPU memory (`real.worker.copies`). The book

- orders them: for each generation's layout, the rank-level `CopyOrder` of the design's
  placement on the plan's nodes (`order`);
- learns which copies became complete when a generation ends (`close`: every rank
  counted itself in `gen<g>/copy/<k>`), keeping the newest complete one (workers drop
  older ones from memory once a newer one is complete) and which nodes hold each layer;
- forgets holders as nodes are lost (`lose`; a local run also wipes the lost node's
  memory directory, its RAM being gone), and copies of steps a rollback undid;
- answers a `RestartFromSnapshot(k)`: the copy of step k when every layer of it still has
  a holder on the new plan's nodes, else the newest complete copy that has (not older
  than the last checkpoint), else none, and the reason (`pick`).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch.distributed as dist

from designs import MemoryCopies

from ..protocol import keys
from ..protocol.copies import CopyOrder, copy_order, layer_holders
from ..protocol.directive import Directive


@dataclass(frozen=True)
class HeldCopy:
    """The copy of step `step` that generation `generation` took: layer -> live holders."""

    generation: int
    step: int
    holders: Mapping[int, frozenset[str]]

    def without(self, nodes: Iterable[str]) -> HeldCopy:
        gone = set(nodes)
        return replace(self, holders={l: h - gone for l, h in self.holders.items()})

    def missing(self, nodes: Iterable[str]) -> list[int]:
        """Layers with no holder among `nodes`."""
        have = set(nodes)
        return [l for l, h in self.holders.items() if not h & have]


class MemoryBook:
    """In-memory copies of one job (module docstring); `spec` None: the design takes none."""

    def __init__(self, spec: MemoryCopies | None, store: dist.Store, memory_dir: str | None, local: bool):
        self.spec, self.store, self.memory_dir, self.local = spec, store, memory_dir, local
        self.copies: list[HeldCopy] = []  # complete copies still held, oldest first
        self._closed: set[int] = set()

    def order(self, layout, nodes: Sequence[str]) -> CopyOrder | None:
        """The copies a generation running `layout` on the plan's `nodes` takes."""
        if self.spec is None:
            return None
        return copy_order(layout, self.spec.every, self.spec.holders(tuple(nodes)))

    def close(self, directive: Directive, committed: int, on_complete: Callable[[HeldCopy], None]) -> None:
        """The generation of `directive` ended with `committed` steps: record the copies it
        completed (`on_complete` hears of each)."""
        order = directive.copies
        if order is None or directive.generation in self._closed:
            return
        self._closed.add(directive.generation)
        world = directive.layout.world_size
        first = directive.resume_step // order.every * order.every + order.every
        for step in range(first, committed + 1, order.every):
            if self.store.add(keys.copy_done_key(directive.generation, step), 0) >= world:
                held = HeldCopy(directive.generation, step, layer_holders(order, directive.layout))
                self.copies = [held]  # workers drop every older copy once a newer one is complete
                on_complete(held)

    def lose(self, nodes: Sequence[str]) -> None:
        """`nodes` are gone, and what their memory held."""
        if self.spec is None or not nodes:
            return
        self.copies = [c.without(nodes) for c in self.copies]
        if self.local and self.memory_dir is not None:
            for node in nodes:
                shutil.rmtree(Path(self.memory_dir) / node, ignore_errors=True)

    def rolled_back(self, step: int) -> None:
        """Progress went back to `step`: copies of later steps belong to undone work."""
        self.copies = [c for c in self.copies if c.step <= step]

    def pick(self, wanted: int, nodes: Sequence[str], oldest: int, newest: int) -> tuple[HeldCopy | None, str]:
        """The copy to restart from on `nodes` (module docstring), and why (when not `wanted`)."""
        usable = [c for c in self.copies if oldest <= c.step <= newest and not c.missing(nodes)]
        exact = [c for c in usable if c.step == wanted]
        if exact:
            return exact[-1], ""
        have = {c.step: c for c in self.copies}
        if wanted not in have:
            why = f"the copy of step {wanted} was not complete on every holder"
        elif wanted < oldest or wanted > newest:
            why = f"the copy of step {wanted} is outside steps {oldest}..{newest}"
        else:
            why = f"every holder of layers {have[wanted].missing(nodes)} in the copy of step {wanted} is gone"
        if usable:
            return max(usable, key=lambda c: (c.step, c.generation)), why
        return None, why

    def clear(self) -> None:
        """The job is over: a local run removes every node's memory."""
        if self.local and self.memory_dir is not None:
            shutil.rmtree(self.memory_dir, ignore_errors=True)
