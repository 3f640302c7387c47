"""The worker's failure points: where a scheduled crash or hang strikes (`real.failures`).

The worker calls `probe(point, step)` at named points of its step (`forward`,
`backward`, `allreduce`, `optimizer`), of a reconfiguration's state copy
(`reconfigure`), of a generation's process-group creation (`groups`: before it joins the
rendezvous, so the other ranks wait there for it) and of its teardown after a failure
(`teardown`). An injection scheduled for this worker fires the first time the worker
reaches its point during its step (for `reconfigure` and `groups`: a generation resuming
at or after its step): it records the time under
`inject/<i>` (with compare-and-set, so a respawned process never fires it again) and
sends itself SIGKILL (crash) or SIGSTOP (hang), or blocks its main thread for good
(stall: the heartbeat thread goes on). With nothing scheduled for this worker a probe
costs one comparison.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Sequence

import torch.distributed as dist

from ..protocol.failures import Injection
from ..protocol.keys import fired_key

SIGNALS = {"crash": signal.SIGKILL, "hang": signal.SIGSTOP}
RESUMING = ("reconfigure", "groups")  # points of a generation, hit by one resuming at or after the step


class FailureProbe:
    def __init__(self, store: dist.Store | None, node: str, gpu: int, injections: Sequence[Injection]):
        self._store = store
        self._mine = [i for i in injections if i.by_worker and i.node == node and i.gpu == gpu]
        self.step: int | None = None  # the step in progress (set by the trainer)

    def __bool__(self) -> bool:
        return bool(self._mine)

    def __call__(self, point: str, step: int | None = None) -> None:
        if not self._mine:
            return
        step = self.step if step is None else step
        if step is None:
            return
        for item in list(self._mine):
            assert item.step is not None  # by_worker: step-based only
            hit = item.step <= step if point in RESUMING else item.step == step
            if item.point == point and hit:
                self._mine.remove(item)
                self._fire(item)

    def _fire(self, item: Injection) -> None:
        stamp = repr(time.time())
        if self._store is not None:
            won = self._store.compare_set(fired_key(item.index), "", stamp).decode()
            if won != stamp:
                return  # an earlier incarnation of this worker already fired it
        if item.kind == "stall":
            threading.Event().wait()  # never set: only the coordinator's fence ends this
        os.kill(os.getpid(), SIGNALS[item.kind])
