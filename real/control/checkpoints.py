"""The coordinator's side of checkpoints: which are being written, complete, or failed.

A periodic checkpoint of step k is pending from the commit of step k - 1 (generation g,
attempt 0); an on-demand save (Varuna's, after a failure) is attempt n of the step it
saves. Each is, on every tick, newest first:

- complete once every layer is reported under its own `ckpt/g<g>.a<a>/<k>/` keys: the
  coordinator writes the manifest (durably, keeping the last `checkpoint_keep`), and older
  pending ones are superseded;
- failed when a writer reported a failure (a full or unwritable disk, a stalled writer's
  queue), when the manifest cannot be written, or when it is not complete within
  `checkpoint_timeout_s` (a writer that hangs, or died before reporting). A failed
  checkpoint is counted (`RunOutcome.failed_checkpoints`) and the job goes on: the next
  interval tries again, and a restart uses the newest complete one (`usable`).

Each complete checkpoint, and each restart's load, is priced by the planner's model for
the writers it really had (`checkpoint_accounting`; `RunOutcome.checkpoint_accounts`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import torch.distributed as dist

from planner.checkpoint_cost import storage_from_config
from planner.planner import Planner

from ..config import RunConfig
from ..protocol import keys
from ..protocol import rendezvous as rv
from ..protocol.secret import JobSecret
from ..state.checkpoint import newest_usable, write_manifest
from . import checkpoint_accounting as acct
from .job import JobState, PendingCheckpoint
from .outcome import RunOutcome

POLL_S = 0.005


class CheckpointControl(Protocol):
    config: RunConfig
    planner: Planner
    store: dist.Store
    outcome: RunOutcome
    secret: JobSecret  # orders are signed with it

    def tick(self) -> None: ...


class CheckpointBook:
    """Pending, complete and failed checkpoints of one job (on its `JobState`)."""

    def __init__(self, job: JobState, control: CheckpointControl):
        self.job = job
        self.c = control
        self.storage = storage_from_config(control.planner.cluster.gpu.name, control.config)
        self.layer_bytes = tuple(layer.copy_bytes for layer in control.planner.profile.layers)
        self._writers: dict[PendingCheckpoint, tuple[str, dict[str, tuple[int, ...]], float]] = {}

    @property
    def num_layers(self) -> int:
        return self.c.planner.profile.num_layers

    def _pending(self, p: PendingCheckpoint, kind: str, writers: dict[str, tuple[int, ...]]) -> None:
        self.job.ckpt_pending.append(p)
        self._writers[p] = (kind, writers, time.time())

    def on_commit(self, step: int) -> None:
        """Step `step` is committed: workers checkpoint the state ready for step + 1 when
        it falls on the interval."""
        config, ready = self.c.config, step + 1
        if (
            not config.checkpoint_every
            or ready % config.checkpoint_every
            or ready >= config.steps
            or not config.checkpoint_dir
        ):
            return
        if not any(p.step == ready and p.generation == self.job.gen for p in self.job.ckpt_pending):
            self._pending(
                PendingCheckpoint(self.job.gen, 0, ready, time.time() + config.checkpoint_timeout_s),
                acct.PERIODIC,
                acct.periodic_writers(self.job.current().layout),
            )

    def tick(self) -> None:
        for p in sorted(self.job.ckpt_pending, key=lambda p: (p.step, p.attempt), reverse=True):
            if p not in self.job.ckpt_pending:
                continue  # superseded by a newer one in this pass
            if self._complete(p):
                self.write_manifest(p)
                continue
            reason = self._failure(p)
            if reason is None and time.time() > p.deadline_wall:
                reason = f"not durable within {self.c.config.checkpoint_timeout_s:g} s (a hung or dead writer)"
            if reason is not None:
                self.fail(p, reason)

    def _complete(self, p: PendingCheckpoint) -> bool:
        return self.c.store.check([keys.layer_key(p.generation, p.attempt, p.step, l) for l in range(self.num_layers)])

    def _failure(self, p: PendingCheckpoint) -> str | None:
        key = keys.ckpt_failure_key(p.generation, p.attempt, p.step, 1)
        return self.c.store.get(key).decode() if self.c.store.check([key]) else None

    def fail(self, p: PendingCheckpoint, reason: str) -> None:
        if p in self.job.ckpt_pending:
            self.job.ckpt_pending.remove(p)
        self._writers.pop(p, None)
        self.c.outcome.failed_checkpoints.append(p.step)
        self.c.outcome.event(
            "checkpoint_failed", step=p.step, generation=p.generation, attempt=p.attempt, reason=reason
        )

    def write_manifest(self, p: PendingCheckpoint) -> bool:
        config = self.c.config
        if config.checkpoint_dir is None:  # the coordinator sets one whenever a checkpoint can be ordered
            raise RuntimeError("internal error: a checkpoint is pending without a checkpoint directory")
        try:
            manifest = write_manifest(config.checkpoint_dir, p.step, self.num_layers, config.checkpoint_keep)
        except OSError as exc:  # e.g. an unwritable directory, or workers on other machines wrote to their own disks
            self.fail(p, f"manifest: {type(exc).__name__}: {exc}")
            return False
        self.job.manifest = manifest
        self.job.ckpt_pending = [q for q in self.job.ckpt_pending if q.step > p.step]  # older ones are superseded
        for q in [q for q in self._writers if q not in self.job.ckpt_pending and q != p]:
            del self._writers[q]
        self.c.outcome.checkpoints += 1
        account = self._account(p, manifest)
        self.c.outcome.event("checkpoint", step=p.step, generation=p.generation, attempt=p.attempt, kept=list(manifest.kept),
                             directory=config.checkpoint_dir, **(self._brief(account) if account else {}))  # fmt: skip
        return True

    def _account(self, p: PendingCheckpoint, manifest) -> acct.CheckpointAccount | None:
        entry = self._writers.pop(p, None)
        if entry is None:
            return None
        kind, writers, t0 = entry
        files = {l: Path(manifest.directory) / f for l, f in manifest.files.items()}
        account = acct.write_account(kind, p.step, p.generation, writers, self.layer_bytes, self.storage,
                                     manifest.time_s - t0, files)  # fmt: skip
        self.c.outcome.checkpoint_accounts.append(account)
        return account

    @staticmethod
    def _brief(account: acct.CheckpointAccount) -> dict:
        return {k: getattr(account, k) for k in ("busiest_node_bytes", "predicted_s", "measured_s", "nodes")}

    def load_note(self, layout, recovery: int | None) -> None:
        """Price the load of `job.manifest` onto `layout` (each rank reads its own layers)."""
        m = self.job.manifest
        if m is None:
            return
        account = acct.load_account(m.step, self.job.gen, acct.readers(layout), self.layer_bytes, self.storage,
                                    self.c.planner.cluster.inter_node_bw_bytes_per_s, recovery)  # fmt: skip
        self.c.outcome.checkpoint_accounts.append(account)
        self.c.outcome.event("checkpoint_load", step=m.step, generation=self.job.gen, **self._brief(account))

    def save(self, step: int, writers: Mapping[str, list[int]], node_of: Mapping[str, str]) -> bool:
        """An on-demand checkpoint of `step` by `writers` (worker id -> layers, `node_of`
        worker id -> node); True once its manifest is durable, False (a failed checkpoint)
        otherwise."""
        self.job.save_attempts += 1
        t0 = time.time()
        p = PendingCheckpoint(
            self.job.gen, self.job.save_attempts, step, time.time() + self.c.config.checkpoint_timeout_s
        )
        self._pending(p, acct.SAVE, acct.node_writers(writers, node_of))
        rv.publish_order(
            self.c.store,
            {"kind": "save", "step": step, "writers": dict(writers), "generation": p.generation, "attempt": p.attempt},
            self.c.secret,
        )
        while p in self.job.ckpt_pending:
            self.c.tick()  # ticks this book too: completes or fails p
            if p in self.job.ckpt_pending and self.job.removed:
                self.fail(p, f"nodes {self.job.removed} were lost while saving")
            time.sleep(POLL_S)
        m = self.job.manifest
        return m is not None and m.step == step and m.time_s >= t0

    def after_rollback(self, step: int) -> None:
        """Progress went back to `step`: checkpoints of later steps still being written
        belong to undone work and will never be used (failed: begun, never complete)."""
        for p in [p for p in self.job.ckpt_pending if p.step > step]:
            self.fail(p, f"abandoned: the job rolled back to step {step}")

    def drain(self) -> None:
        """The job is over: let the checkpoints still being written complete or fail (each
        by its deadline) before the workers are told to end."""
        while self.job.ckpt_pending:
            self.tick()
            time.sleep(POLL_S)

    def usable(self) -> None:
        """Make `job.manifest` the newest kept checkpoint whose files are all on disk."""
        manifest, skipped = newest_usable(self.job.manifest)
        for step, missing in skipped:
            self.c.outcome.event("checkpoint_missing", step=step, layers=missing)
        self.job.manifest = manifest

    def restart_note(self, resume: int) -> None:
        """Say which checkpoint a restart uses and which newer ones had failed."""
        failed = sorted({k for k in self.c.outcome.failed_checkpoints if k > resume})
        m = self.job.manifest
        source = m.directory if m is not None and m.step == resume else None
        self.c.outcome.event("restart_from_checkpoint", step=resume, directory=source, failed_since=failed,
                             kept=list(m.kept) if m is not None else [])  # fmt: skip
