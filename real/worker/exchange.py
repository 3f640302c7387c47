"""Layer copies between the ranks of a new generation (point-to-point, its world group).

Every rank walks the same global list of transfers (`transfers.transfers`): it posts a
non-blocking send for each layer it gives and a receive for each it gets (tag = the
transfer's position, so pairs never mix up), then waits for all. Each copy is one flat
tensor (`state.flatten`): parameters, exp_avg, exp_avg_sq and the step counters; the
receiver sizes its buffer from the layer it built itself. A sender may instead be handed
the flat tensors themselves (`flats`: an in-memory copy read back, of layers it never
built). CUDA workers on gloo
(`host_staged`) send and receive through pinned host buffers (`state.staging`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
import torch.distributed as dist

from ..state.layer_state import LayerState, flatten, unflatten
from ..state.staging import from_wire, to_wire, wire_buffer
from ..state.transfers import Transfer
from .groups import async_work


def exchange(
    plan: Sequence[Transfer],
    rank: int,
    held: Mapping[int, LayerState],
    templates: Mapping[int, LayerState],
    posted: Callable[[], None] | None = None,
    host_staged: bool = False,
    flats: Mapping[int, torch.Tensor] | None = None,
) -> dict[int, LayerState]:
    """Send what `rank` gives (from `flats` when it has the layer, else flattened from
    `held`), receive what it gets; returns the received states. `posted` runs once every
    operation is in flight (a failure point)."""
    works, inbox, outbox = [], {}, []
    for t in plan:
        if t.src == rank:
            if flats is not None and t.layer in flats:
                flat = to_wire(flats[t.layer].contiguous(), host_staged)
            elif t.layer not in held:
                raise RuntimeError(f"rank {rank} must send layer {t.layer} but does not hold it")
            else:
                flat = to_wire(flatten(held[t.layer]).contiguous(), host_staged)
            outbox.append(flat)
            works.append(async_work(dist.isend(flat, dst=t.dst, tag=t.tag)))
        if t.dst == rank:
            template = templates[t.layer]
            device = next(iter(template.params.values())).device
            buffer = wire_buffer(template.numel, template.dtype, device, host_staged)
            inbox[t.layer] = (buffer, device)
            works.append(async_work(dist.irecv(buffer, src=t.src, tag=t.tag)))
    if posted is not None:
        posted()
    for work in works:
        work.wait()
    return {layer: unflatten(from_wire(buffer, device), templates[layer]) for layer, (buffer, device) in inbox.items()}
