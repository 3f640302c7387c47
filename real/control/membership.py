"""The coordinator's view of the workers: who registered, who is alive, which nodes are usable.

Liveness comes from three places: exit statuses of the processes a local launcher owns
(a crash is seen within one poll), the heartbeat counter each worker bumps in the store
(judged on the coordinator's own clock, so a hung or silently vanished worker is
declared dead `heartbeat_timeout_s` after its last beat), and the coordinator's own
decisions (fencing). A fenced worker is dead for good: its id never appears in a
directive again, its launcher (or the coordinator, locally) kills it, and its
heartbeat thread exits if it still runs. A node is usable when all of its GPUs have a
live registered worker; usable nodes are kept in the order they became usable (what the
policies call `ready`). A registration that does not parse or does not prove the job's
secret is refused: its reason is queued in `refused` (the coordinator logs it) and the
entry is skipped, so a malformed or forged entry can neither crash nor join the job.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from typing import Protocol

import torch.distributed as dist

from ..protocol import keys
from ..protocol import rendezvous as rv
from ..protocol.secret import JobSecret


class ProcessControl(Protocol):
    """What a local launcher lets the coordinator do with worker processes."""

    def spawn(self, node: str, gpu: int) -> int:
        """Start a worker for GPU `gpu` of `node`; returns its pid."""

    def signal(self, pid: int, sig: int) -> bool:
        """Send `sig` to a worker process this launcher owns (False if not ours)."""

    def exited(self) -> dict[int, int]:
        """Exit statuses of owned processes that have ended since the last call."""

    def owns(self, pid: int) -> bool:
        """Whether `pid` is a running process of this launcher."""

    def pids_of(self, node: str) -> list[int]:
        """Running processes this launcher started for `node`."""


@dataclass
class WorkerRecord:
    info: rv.WorkerInfo
    alive: bool = True
    reason: str = ""
    beats: int = -1
    seen_s: float = field(default_factory=time.time)


class Membership:
    def __init__(
        self,
        store: dist.Store,
        gpus_per_node: int,
        heartbeat_timeout_s: float,
        processes: ProcessControl | None,
        secret: JobSecret,
        all_silent_patience_s: float = 0.0,
    ):
        self.store = store
        self.secret = secret
        self.refused: list[str] = []  # reasons of refused registrations, not yet logged
        self.gpus_per_node = gpus_per_node
        self.heartbeat_timeout_s = heartbeat_timeout_s
        # every live worker silent at once looks like the coordinator's own link, not the
        # whole cluster: it is waited out this much longer before anyone is declared lost
        self.all_silent_patience_s = all_silent_patience_s
        self.all_silent_since_s: float | None = None  # the coordinator logs when it begins
        self._silent_together: set[int] | None = None  # the episode's members still quiet
        self.processes = processes
        self.workers: dict[int, WorkerRecord] = {}
        self.ready_order: list[str] = []
        self._seen = 0
        self._last_poll_s = time.time()
        self.unknown_exits: list[tuple[int, int]] = []

    # -- registrations -------------------------------------------------------------------
    def poll_registrations(self) -> list[str]:
        """Record new registrations; returns nodes that just became usable."""
        count = self.store.add(keys.WORKER_COUNT, 0)
        became = []
        while self._seen < count:
            key = keys.worker_key(self._seen)
            if not self.store.check([key]):
                break  # counted but not yet written: next poll
            self._seen += 1
            try:
                info = rv.parse_registration(self.store.get(key), self._seen - 1, self.secret)
            except rv.RegistrationRefused as exc:
                self._refuse(self._seen - 1, str(exc))
                continue
            if info.gpu >= self.gpus_per_node:
                self._refuse(
                    info.worker_id, f"{key}: gpu {info.gpu} of {info.node}, nodes have GPUs 0..{self.gpus_per_node - 1}"
                )
                continue
            duplicate = self.worker_for(info.node, info.gpu)
            self.workers[info.worker_id] = WorkerRecord(info)
            if duplicate is not None:
                self.fence(info.worker_id, f"GPU {info.gpu} of {info.node} already has live worker {duplicate}")
                continue
            if info.node not in self.ready_order and self.node_complete(info.node):
                self.ready_order.append(info.node)
                became.append(info.node)
        return became

    def _refuse(self, slot: int, reason: str) -> None:
        """Skip registration `slot` for good; a worker waiting behind it is told to exit."""
        self.refused.append(reason)
        self.store.set(keys.fence_key(slot), f"registration refused: {reason}")

    def worker_for(self, node: str, gpu: int) -> int | None:
        for wid, rec in self.workers.items():
            if rec.alive and rec.info.node == node and rec.info.gpu == gpu:
                return wid
        return None

    def node_complete(self, node: str) -> bool:
        gpus = sorted(rec.info.gpu for rec in self.workers.values() if rec.alive and rec.info.node == node)
        return gpus == list(range(self.gpus_per_node))

    def live_workers(self, node: str | None = None) -> list[int]:
        return [wid for wid, rec in self.workers.items() if rec.alive and (node is None or rec.info.node == node)]

    def ready_nodes(self) -> list[str]:
        return list(self.ready_order)

    # -- liveness ------------------------------------------------------------------------
    def poll_exits(self) -> dict[int, str]:
        """Workers whose process exited (local launcher only): {worker id: reason}."""
        if self.processes is None:
            return {}
        by_pid = {rec.info.pid: wid for wid, rec in self.workers.items() if rec.alive}
        dead = {}
        for pid, code in self.processes.exited().items():
            wid = by_pid.get(pid)
            if wid is None:
                self.unknown_exits.append((pid, code))
                continue
            rec = self.workers[wid]
            dead[wid] = f"worker {wid} ({rec.info.node} gpu {rec.info.gpu}) exited with status {code}"
        return dead

    def poll_heartbeats(self, now: float | None = None) -> dict[int, str]:
        """Live workers whose heartbeat counter has not moved for the timeout. If the
        coordinator itself was not scheduled for a while (a loaded machine), it cannot
        tell, and waits a full timeout more rather than fence healthy workers. If every
        live worker (two or more) falls silent together (the last of them quiet for half
        the timeout when the first reaches it), the likelier cause is the
        coordinator's own link or store, so it waits `all_silent_patience_s` more before
        declaring any of them lost, also those whose beats come back later than the
        others': if they were all gone, no replica would survive to recover from
        anyway, and a link back in time costs the job nothing."""
        now = time.time() if now is None else now
        starved = now - self._last_poll_s > self.heartbeat_timeout_s / 2
        self._last_poll_s = now
        silent = {}
        for wid, rec in self.workers.items():
            if not rec.alive:
                continue
            beats = self.store.add(keys.heartbeat_key(wid), 0)
            if beats != rec.beats or starved:
                rec.beats, rec.seen_s = beats, now
            elif now - rec.seen_s > self.heartbeat_timeout_s:
                silent[wid] = (
                    f"worker {wid} ({rec.info.node} gpu {rec.info.gpu}) missed heartbeats for {now - rec.seen_s:.1f} s"
                )
        return self._unless_all_silent(silent, now)

    def _unless_all_silent(self, silent: dict[int, str], now: float) -> dict[int, str]:
        """Excuse the workers of an all-silent episode for the patience. The episode
        begins when every live worker (two or more) has been quiet for half the timeout
        at once (beats are a poll apart), before any of them reaches the timeout, and
        lasts while any of its members is still quiet: after the coordinator's link
        returns, each worker's connection resumes at its own TCP retransmission backoff,
        seconds apart, and a worker whose beats come back later than another's is no
        more lost than it was. A worker outside the episode is judged as usual."""
        live = {wid: rec for wid, rec in self.workers.items() if rec.alive}
        half_s = self.heartbeat_timeout_s / 2
        if self._silent_together is None:
            together = all(now - rec.seen_s > half_s for rec in live.values())
            if not together or len(live) < 2 or self.all_silent_patience_s <= 0:
                return silent
            self._silent_together = set(live)
            self.all_silent_since_s = now
        self._silent_together = {
            wid for wid in self._silent_together if wid in live and now - live[wid].seen_s > half_s
        }
        if not self._silent_together:
            self._silent_together = self.all_silent_since_s = None
            return silent
        bound_s = self.heartbeat_timeout_s + self.all_silent_patience_s
        lost = {}
        for wid, reason in silent.items():
            quiet_s = now - live[wid].seen_s
            if wid not in self._silent_together:
                lost[wid] = reason
            elif quiet_s > bound_s:
                lost[wid] = f"{reason} (every worker silent at once, waited {quiet_s:.1f} s)"
        return lost

    def mark_dead(self, wid: int, reason: str) -> None:
        rec = self.workers[wid]
        if rec.alive:
            rec.alive, rec.reason = False, reason
            if rec.info.node in self.ready_order:
                self.ready_order.remove(rec.info.node)

    def fence(self, wid: int, reason: str) -> None:
        """Dead for good: never in a directive again; killed by whoever can."""
        self.mark_dead(wid, reason)
        self.store.set(keys.fence_key(wid), reason or "fenced")
        self.kill(wid)

    def kill(self, wid: int, sig: int = signal.SIGKILL) -> bool:
        rec = self.workers[wid]
        return self.processes is not None and self.processes.signal(rec.info.pid, sig)

    def owns(self, wid: int) -> bool:
        return self.processes is not None and self.processes.owns(self.workers[wid].info.pid)
