"""In-memory copies taken while training (GEMINI): one rank's side, one generation.

At every step boundary the copy order makes due (`copies.due`: `every` steps committed),
the rank flattens its layers (a copy: training may change them at once), posts a
non-blocking send of each to the ranks the order names and a receive for each layer it
is to hold, on the generation's world group (idle while training: the pipeline and the
gradient synchronisation have their own groups), and goes on training: gloo moves the
bytes in its own threads meanwhile. At each later boundary it looks whether they are
done; once they are, it writes its own layers and what it received to its node's memory
(`state.memory.NodeMemory`) and counts itself in `gen<g>/copy/<k>`; a copy is complete
when every rank of the generation has. A copy still in flight when the next is due is
waited for first (training stalls only then). Once a newer copy is complete, older ones
are dropped from the node's memory. A failed send or receive raises like any failed
collective: the generation's failure path handles it, and the copy never completes.

Receivers size their buffers from `size/<l>`, which every owner of layer l sets when it
builds the layer (`publish_sizes`). The messages travel in host memory on gloo (CUDA
workers copy their layers to the host first: what lands in memory is a host copy anyway)
and in device memory on NCCL, which moves device memory only (`wire_device`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.distributed as dist

from ..protocol import keys
from ..protocol.copies import CopyOrder, copy_transfers, due
from ..protocol.layout import Layout
from ..state.layer_state import LayerState, flatten
from ..state.memory import NodeMemory
from .groups import async_work


def publish_sizes(store: dist.Store, states: Mapping[int, LayerState], known: set[int]) -> None:
    """Set `size/<l>` for this rank's layers (once per process: the sizes never change)."""
    for layer, state in states.items():
        if layer not in known:
            store.set(keys.layer_size_key(layer), str(state.numel))
            known.add(layer)


class _InFlight:
    """One copy being taken: its step, own flat states, receive buffers and pending works."""

    def __init__(self, step: int, own: dict[int, torch.Tensor]):
        self.step, self.own = step, own
        self.inbox: list[tuple[int, torch.Tensor]] = []  # a layer may come from each of its replicas
        self.works: list[dist.Work] = []

    def done(self) -> bool:
        return all(w.is_completed() for w in self.works)


class CopyTaker:
    """Rank `rank`'s in-memory copies in `generation` (module docstring)."""

    def __init__(
        self,
        store: dist.Store,
        order: CopyOrder,
        generation: int,
        layout: Layout,
        rank: int,
        memory: NodeMemory,
        steps: int,
        sizes: dict[int, int],
        wire_device: torch.device | None = None,
    ):
        self.store, self.order, self.generation, self.layout, self.rank = store, order, generation, layout, rank
        self.memory, self.steps, self.sizes = memory, steps, sizes
        self.wire = wire_device or torch.device("cpu")
        self.plan = copy_transfers(order, layout)
        self.in_flight: _InFlight | None = None
        self.reported: list[int] = []  # steps this rank completed, not yet known complete everywhere

    def at_boundary(self, ready_step: int, states: Callable[[], Mapping[int, LayerState]]) -> None:
        """`ready_step` steps are committed: finish, report and prune what is done; take a
        new copy if one is due (`states()`: this rank's layers, ready for `ready_step`)."""
        if self.in_flight is not None and self.in_flight.done():
            self._finish()
        self._prune()
        if due(self.order, ready_step, self.steps):
            if self.in_flight is not None:  # the previous copy is still travelling: wait for it
                self._finish()
            self._post(ready_step, states())

    def _size(self, layer: int) -> int:
        if layer not in self.sizes:
            self.store.wait([keys.layer_size_key(layer)])
            self.sizes[layer] = int(self.store.get(keys.layer_size_key(layer)).decode())
        return self.sizes[layer]

    def _post(self, step: int, states: Mapping[int, LayerState]) -> None:
        # flatten concatenates: a copy, safe from the optimizer steps that follow
        own = {layer: flatten(state).detach().to(self.wire).contiguous() for layer, state in states.items()}
        flight = _InFlight(step, own)
        dtype = next(iter(own.values())).dtype
        for t in self.plan:
            if t.src == self.rank:
                flight.works.append(async_work(dist.isend(own[t.layer], dst=t.dst, tag=t.tag)))
            elif t.dst == self.rank:
                buffer = torch.empty(self._size(t.layer), dtype=dtype, device=self.wire)
                flight.inbox.append((t.layer, buffer))
                flight.works.append(async_work(dist.irecv(buffer, src=t.src, tag=t.tag)))
        self.in_flight = flight

    def _finish(self) -> None:
        flight, self.in_flight = self.in_flight, None
        assert flight is not None  # only called with a copy in flight
        for work in flight.works:
            work.wait()
        for layer, flat in dict([*flight.inbox, *flight.own.items()]).items():  # replicas' copies are equal
            self.memory.put(self.generation, flight.step, layer, flat)
        self.store.add(keys.copy_done_key(self.generation, flight.step), 1)
        self.reported.append(flight.step)

    def _prune(self) -> None:
        world = self.layout.world_size
        complete = [k for k in self.reported if self.store.add(keys.copy_done_key(self.generation, k), 0) >= world]
        if complete:
            newest = max(complete)
            self.memory.prune(self.generation, newest)
            self.reported = [k for k in self.reported if k > newest]

    def release(self) -> None:
        """Drop what is in flight (the generation is being torn down)."""
        self.in_flight = None
