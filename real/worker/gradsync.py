"""Cross-pipeline gradient synchronisation, one bucket per owner-set group (DESIGN 3.4, 5).

Each pipeline's gradients arrive here already weighted: its loss is scaled by m_i / M
(the plan's gradient weight) over its m_i microbatches, i.e. 1 / M per microbatch, so
the SUM all-reduce over the replicas of a layer yields the gradient of the mean loss over
the global batch: one data-parallel step, whatever the split of microbatches.

A rank flattens the gradients of the layers it shares with each group into one buffer
and all-reduces them asynchronously in the layout's global group order (the same on
every rank, so overlapping groups cannot deadlock), then waits and copies back.

A tied pair (the token embedding and the head's projection of a tied model): each holder
keeps its own copy, left out of the layer buckets. A rank adds up the gradients of the
copies it holds and all-reduces that sum over every rank holding either layer (issued
after the buckets, on every such rank), so each copy's gradient becomes the whole
shared parameter's: the embedding's and the head's, over every pipeline. In
emulated mode it then sleeps for the planner's all-reduce time of its layers, after the
real (tiny) all-reduce has synchronised it with the other replicas, as the planner's
exposure model has it (`planner.allreduce`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

import torch
import torch.distributed as dist

from ..models.emulated import sleep_until
from ..protocol.layout import Layout
from .groups import async_work


def grad_of(p: torch.Tensor) -> torch.Tensor:
    """`p`'s gradient, which every synchronised parameter has after backward (the
    optimizer zeroes gradients without dropping them)."""
    if p.grad is None:
        raise RuntimeError("internal error: a parameter to synchronise has no gradient")
    return p.grad


class GradientSync:
    """Sum this rank's layer gradients over the other pipelines' replicas."""

    def __init__(
        self,
        layout: Layout,
        rank: int,
        groups: Mapping[tuple[int, ...], dist.ProcessGroup],
        layer_params: Mapping[int, Sequence[torch.nn.Parameter]],
        emulated_allreduce_s: float = 0.0,
        issued: Callable[[], None] | None = None,
        tied: Sequence[torch.nn.Parameter] = (),
        tie_group: dist.ProcessGroup | None = None,
    ):
        """`tied`: this rank's copies of a tied parameter (none, one, or both), which must not
        be in `layer_params`; `tie_group`: the group of every rank holding a copy (None:
        this rank holds them all)."""
        self.tied, self.tie_group = list(tied), tie_group
        self.buckets: list[tuple[dist.ProcessGroup, list[torch.nn.Parameter]]] = []
        for spec in layout.groups_of(rank):
            missing = [layer for layer in spec.layers if layer not in layer_params]
            if missing:
                raise ValueError(f"rank {rank} is in the sync group of layers {list(spec.layers)} but lacks {missing}")
            params = [p for layer in spec.layers for p in layer_params[layer]]
            if params:
                self.buckets.append((groups[spec.ranks], params))
        self.emulated_allreduce_s = emulated_allreduce_s
        self._issued = issued  # called once every all-reduce is in flight (a failure point)

    @property
    def num_buckets(self) -> int:
        return len(self.buckets)

    def __call__(self) -> None:
        pending = []
        for group, params in self.buckets:
            grads = [grad_of(p) for p in params]
            flat = torch.cat([g.reshape(-1) for g in grads])
            pending.append(
                (async_work(dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group, async_op=True)), flat, grads)
            )
        tied = None
        if self.tied:
            tied = torch.stack([grad_of(p) for p in self.tied]).sum(0)
            if self.tie_group is not None:
                work = dist.all_reduce(tied, op=dist.ReduceOp.SUM, group=self.tie_group, async_op=True)
                pending.append((async_work(work), tied, []))
        if self._issued is not None:
            self._issued()
        for work, flat, grads in pending:
            work.wait()
            offset = 0
            for g in grads:
                n = g.numel()
                g.copy_(flat[offset : offset + n].view_as(g))
                offset += n
        if tied is not None:
            for p in self.tied:
                grad_of(p).copy_(tied)
        if self.emulated_allreduce_s > 0:
            sleep_until(time.perf_counter() + self.emulated_allreduce_s)
