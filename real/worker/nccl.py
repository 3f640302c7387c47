"""NCCL's failure handling: environment, group abort, and a watch that aborts in time.

Gloo reports a dead peer within milliseconds ("Connection closed by peer"), so a gloo
worker learns of a failure from its own blocked operation. NCCL does not: a rank waiting
on a dead peer spins in a kernel until the group's timeout, and an NCCL communicator
that saw an error can only be aborted, never reused. So an NCCL generation is torn down
by aborting every group of it (`_abort_process_group()`, all communicators inside one
ncclGroupStart/End so their aborts cannot deadlock each other), and a worker does not
wait for its timeout to learn of a failure elsewhere: `AbortWatch` polls the
generation's `resume` key (the coordinator writes it once it has handled a failure in
the generation, `control.recovery_flow`) on its own store connection and aborts the
groups at once, which makes the main thread's blocked operation raise; the worker then
takes the same fault path as on gloo. The group timeout remains the backstop for a
failure the coordinator cannot see.

Environment (set only where the user has not set it, before the first NCCL group):

- TORCH_NCCL_BLOCKING_WAIT=1: `work.wait()` blocks the host and raises on timeout or
  abort, so a failure surfaces as an exception in the worker's main thread, where the
  commit protocol handles it, rather than as a later, silent stream dependency.
- TORCH_NCCL_ASYNC_ERROR_HANDLING=0: the watchdog neither aborts nor kills the process on
  an error; this worker aborts its own groups (torch's note on `_abort_process_group`
  asks for exactly this) and survives to join the next generation.
- TORCH_NCCL_ENABLE_MONITORING=0: the watchdog's heartbeat monitor would otherwise end a
  process whose watchdog is stuck behind a hung peer, which is the worker we keep.
- TORCH_NCCL_DUMP_ON_TIMEOUT=0: no flight-recorder dump on the critical path.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, MutableMapping

import torch.distributed as dist

NCCL_ENVIRONMENT: Mapping[str, str] = {
    "TORCH_NCCL_BLOCKING_WAIT": "1",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0",
    "TORCH_NCCL_ENABLE_MONITORING": "0",
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",
}


def apply_nccl_environment(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set NCCL_ENVIRONMENT's values the caller has not set; returns what is in force."""
    for name, value in NCCL_ENVIRONMENT.items():
        environ.setdefault(name, value)
    return {name: environ[name] for name in NCCL_ENVIRONMENT}


def abort_all_groups() -> None:
    """Abort every process group of this process (NCCL's teardown; gloo accepts it too)."""
    from torch.distributed.distributed_c10d import _abort_process_group

    if dist.is_initialized():
        _abort_process_group()


class AbortWatch:
    """Calls `abort` once `key` appears in `store` (polled every `interval_s` on a daemon
    thread), unless `stop` comes first. `store` must be a connection of its own: the main
    thread blocks on its connection in store waits.

    With `straggle`: if `stop` has not come `straggle_after_s` after the abort (the main
    thread is still blocked somewhere the abort should have freed it from), `straggle`
    is called once and what it returns is kept in `straggled` for the worker's report.
    Measured: twice in about 1,000 survivor teardowns at 32 ranks, a gloo rank stayed
    blocked in a send for the whole group timeout (60 s) after its generation's sockets
    were severed, while every other rank failed within 0.8 s."""

    def __init__(
        self,
        store: dist.Store,
        key: str,
        abort: Callable[[], None],
        interval_s: float = 0.05,
        straggle: Callable[[], dict] | None = None,
        straggle_after_s: float = 2.0,
    ):
        self._store, self._key, self._abort, self._interval_s = store, key, abort, interval_s
        self._straggle, self._straggle_after_s = straggle, straggle_after_s
        self._stopped = threading.Event()
        self.fired = False
        self.straggled: dict | None = None
        self._thread = threading.Thread(target=self._run, name=f"abort-watch:{key}", daemon=True)

    def start(self) -> AbortWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        while not self._stopped.wait(self._interval_s):
            try:
                present = self._store.check([self._key])
            except Exception:  # the coordinator is gone: the heartbeat thread ends the process
                return
            if present and not self._stopped.is_set():
                self.fired = True
                self._abort()
                if self._straggle is not None and not self._stopped.wait(self._straggle_after_s):
                    self.straggled = self._straggle()
                return
