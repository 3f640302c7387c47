"""Process groups of one plan generation (DESIGN 5), built and torn down as a unit.

Generation g initialises torch.distributed on `PrefixStore("gen<g>/pg", base)` so a later
generation never meets an earlier one's keys, then creates, in the same order on every
rank (new_group is collective over the world): one group per pipeline (its stages' p2p
traffic) and one per distinct owner set of a layer (gradient synchronisation). Every group
gets `timeout=` explicitly: subgroups do not inherit the world's. `teardown` destroys them
all, leaving the worker able to join generation g + 1 (part 2): gloo's by destroying
them (their sockets close, so blocked peers fail fast), NCCL's by aborting them (a
communicator that may be waiting on a dead peer cannot be destroyed cleanly, `nccl`).
Teardown may come from the main thread and from an NCCL generation's abort watch at
once; a lock makes it happen once. A gloo generation's abort watch does not tear down:
it severs the sockets its groups opened (`sever`), which makes every blocked operation on
them, this rank's and its peers', fail at once, and the main thread then tears down.
"""

from __future__ import annotations

import linecache
import sys
import threading
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from types import FrameType

import torch.distributed as dist

from ..protocol.keys import pg_prefix
from ..protocol.layout import Layout
from .nccl import abort_all_groups
from .sever import sever, snapshot


def _main_frame() -> FrameType | None:
    """The main thread's innermost Python frame (None if it has none)."""
    return sys._current_frames().get(threading.main_thread().ident or -1)


def main_thread_stack(frames: int = 8) -> str:
    """The main thread's innermost `frames` Python frames, as traceback lines."""
    frame = _main_frame()
    if frame is None:
        return ""
    return "".join(traceback.format_stack(frame)[-frames:])


def main_thread_waits() -> bool:
    """True when the main thread's innermost Python frame calls some `.wait(`: a blocking
    wait in C++ on a communication handle or a store (torch's `Work.wait`, `Store.wait`;
    the caller's line is then the innermost Python one), not a computation or a sleep."""
    frame = _main_frame()
    if frame is None:
        return False
    return ".wait(" in linecache.getline(frame.f_code.co_filename, frame.f_lineno)


def tcp_store_port(store: dist.Store) -> int | None:
    """The port of the TCPStore under `store` (through PrefixStores), else None."""
    for _ in range(16):  # a chain of prefixes, never a cycle
        port = getattr(store, "port", None)
        if port is not None:
            return int(port)
        inner = getattr(store, "underlying_store", None)
        if inner is None:
            return None
        store = inner
    return None


def async_work(work: dist.Work | None) -> dist.Work:
    """The handle of an operation issued asynchronously by a rank of its group (torch
    returns None only to ranks outside the group, which this code never issues from)."""
    if work is None:
        raise RuntimeError("internal error: an asynchronous operation returned no handle")
    return work


@dataclass
class Generation:
    """This rank's view of generation `number`: its groups, ready to use."""

    number: int
    layout: Layout
    rank: int
    backend: str
    pipeline_group: dist.ProcessGroup | None
    sync_groups: dict[tuple[int, ...], dist.ProcessGroup] = field(default_factory=dict)
    sockets: frozenset[int] = frozenset()  # inodes of the TCP connections its groups opened (gloo)
    store_port: int | None = None  # the coordinator's store, whose connections are never severed
    # the ranks holding either layer of a tied pair (`tie_ranks`), and their group when this
    # rank is one of two or more
    tie_ranks: tuple[int, ...] = ()
    tie_group: dist.ProcessGroup | None = None
    alive: bool = True
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def stage(self):
        return self.layout.stages[self.rank]

    @property
    def aborts(self) -> bool:
        """Torn down by aborting its groups (NCCL) rather than destroying them (gloo)."""
        return self.backend == "nccl"

    def teardown(self) -> None:
        """Destroy (gloo) or abort (NCCL) every group of this generation (idempotent,
        thread-safe)."""
        with self._lock:
            if self.alive and dist.is_initialized():
                if self.aborts:
                    abort_all_groups()
                else:
                    dist.destroy_process_group()
            self.alive = False
            self.pipeline_group = None
            self.sync_groups = {}
            self.tie_group = None

    def sever(self) -> None:
        """Shut down the sockets this generation's groups opened, so that every operation
        blocked on them fails now (gloo's abort watch; thread-safe, a no-op once torn
        down)."""
        with self._lock:
            if self.alive:
                sever(self.sockets)

    def interrupt(self) -> None:
        """What the abort watch does on the coordinator's word: abort (NCCL) or sever
        (gloo)."""
        if self.aborts:
            self.teardown()
        else:
            self.sever()

    def straggle(self) -> dict:
        """What the abort watch does when the main thread is still blocked a while after
        `interrupt`: on gloo, shut down every connected TCP socket of this process but the
        store's (any the build's snapshot missed, and earlier generations'; only where the
        store's port is known, so that no store connection is ever taken); on both, note
        where the main thread is blocked (its innermost Python frames), for the report.
        `stuck`: the re-sever found no socket left to shut while the main thread waits on a
        communication handle, which nothing in this process can free any more (measured: a
        gloo send that outlived the sever held 32-node recoveries 6 s, to the coordinator's
        straggler bound, twice at the same reconfiguration); the coordinator fences such a
        rank at once."""
        resevered = None
        with self._lock:
            if self.alive and not self.aborts and self.store_port is not None:
                resevered = sever(snapshot(self.store_port))
        stuck = resevered == 0 and main_thread_waits()
        return {"resevered": resevered, "stuck": stuck, "stack": main_thread_stack()}


def tie_ranks(layout: Layout, tied_layers: tuple[int, int] | None) -> tuple[int, ...]:
    """The ranks holding either layer of a tied pair, in order (empty: no tie)."""
    if tied_layers is None:
        return ()
    return tuple(s.rank for s in layout.stages if any(s.first_layer <= l < s.end_layer for l in tied_layers))


def build_generation(
    base_store: dist.Store,
    layout: Layout,
    rank: int,
    backend: str,
    timeout_s: float,
    severable: bool = True,
    tied_layers: tuple[int, int] | None = None,
) -> Generation:
    """Join generation `layout.generation` as `rank` and create all of its groups (the
    pipelines', the sync groups', then the tied pair's, the same order on every rank); on
    gloo with `severable`, note the sockets they open (`Generation.sever`)."""
    if dist.is_initialized():
        raise RuntimeError("a process group is still initialised: tear the previous generation down first")
    timeout = timedelta(seconds=timeout_s)
    store = dist.PrefixStore(pg_prefix(layout.generation), base_store)
    store_port = tcp_store_port(base_store)  # its connections are never severed
    watched = severable and backend == "gloo"
    before = snapshot(store_port) if watched else frozenset()
    dist.init_process_group(backend, store=store, rank=rank, world_size=layout.world_size, timeout=timeout)
    mine = layout.stages[rank].pipeline
    pipeline_group = None
    for pipe in layout.pipelines:
        group = dist.new_group(list(pipe.ranks), timeout=timeout, backend=backend)
        if pipe.index == mine:
            pipeline_group = group
    sync: dict[tuple[int, ...], dist.ProcessGroup] = {}
    for spec in layout.sync_groups:
        group = dist.new_group(list(spec.ranks), timeout=timeout, backend=backend)
        if rank in spec.ranks:
            sync[spec.ranks] = group
    tied = tie_ranks(layout, tied_layers)
    tie_group = None
    if len(tied) > 1:
        group = dist.new_group(list(tied), timeout=timeout, backend=backend)
        tie_group = group if rank in tied else None
    opened = snapshot(store_port) - before if watched else frozenset()
    return Generation(
        layout.generation, layout, rank, backend, pipeline_group, sync, opened, store_port, tied, tie_group
    )
