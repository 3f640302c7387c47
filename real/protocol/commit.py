"""The atomic commit of a training step, through the coordinator's store (DESIGN 5).

A step's gradients are synchronised (all-reduced) before its optimizer step. Each rank
of the generation then *acks* the step (`gen<g>/acks/<k>` += 1) and waits for the step's
verdict, `gen<g>/commit/<k>`, before touching its parameters:

- the rank whose ack completes the count writes "ok" (or "stop" when the coordinator has
  asked, through `gen<g>/stopreq`, to stop at the next boundary: a join);
- the coordinator, when it sees a failure, writes "abort" for the first step it has not
  seen committed.

Both write with `compare_set(key, "", value)`, so exactly one verdict wins and every rank
reads the same one. "ok" and "stop": every rank runs its optimizer step (a local
operation that only a crash can interrupt, and a crashed rank's state is gone anyway);
"abort": no rank does. So after any failure every survivor's state is ready for the same
step, the first uncommitted one, which `resolve` finds and every survivor redoes: no
rank ever has to roll back, and no copy of the pre-step state is kept.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import torch.distributed as dist

from .keys import acks_key, commit_key, step_key, stop_request_key

OK, STOP, ABORT = "ok", "stop", "abort"
COMMITTED = (OK, STOP)


class StepTimeout(RuntimeError):
    """A step's verdict did not come within the group timeout."""


def ack(store: dist.Store, generation: int, step: int, world_size: int) -> None:
    """Count this rank in; the last one in writes the verdict (unless the coordinator
    already aborted the step)."""
    if store.add(acks_key(generation, step), 1) == world_size:
        verdict = STOP if store.check([stop_request_key(generation)]) else OK
        store.compare_set(commit_key(generation, step), "", verdict)


def wait_verdict(store: dist.Store, generation: int, step: int, timeout_s: float) -> str:
    """Block until step `step` has a verdict, at most `timeout_s` (the group's timeout: a
    rank stalled between its ack and the verdict costs its peers no more than a stalled
    collective would). Raises StepTimeout (the caller's fault path) when none came."""
    key = commit_key(generation, step)
    try:
        store.wait([key], timedelta(seconds=timeout_s))
    except dist.DistStoreError as exc:
        if "timeout" not in str(exc).lower():
            raise
        raise StepTimeout(
            f"generation {generation} step {step}: no verdict within the group timeout ({timeout_s:g} s)"
        ) from None
    return store.get(key).decode()


def verdict(store: dist.Store, generation: int, step: int) -> str | None:
    """The verdict of a step, or None while it has none (the coordinator's watch)."""
    key = commit_key(generation, step)
    return store.get(key).decode() if store.check([key]) else None


def resolve(store: dist.Store, generation: int, first: int, steps: int) -> int:
    """Abort the first step of `generation` from `first` on that has no verdict yet;
    returns the first uncommitted step: the one every survivor is ready for (`steps`
    when all are committed)."""
    step = first
    while step < steps:
        result = store.compare_set(commit_key(generation, step), "", ABORT).decode()
        if result == ABORT:
            return step
        if result == STOP:
            return step + 1
        step += 1
    return steps


def report_step(store: dist.Store, generation: int, step: int, rank: int, loss_sum: float | None) -> None:
    store.set(step_key(generation, step, rank), json.dumps({"t": time.time(), "loss_sum": loss_sum}))
