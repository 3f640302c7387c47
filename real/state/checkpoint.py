"""Checkpoints: one file per layer, a manifest naming the last complete set, atomic writes.

On disk (`directory`, shared by every worker of a job: local disk for one machine, a
shared file system across machines):

    step<k>/layer<l>.pt     LayerState of layer l ready for step k (parameters + AdamW)
    checkpoint.json         {"step": k, "files": {"<l>": "step<k>/layer<l>.pt"}, ...}

Every file is written under a temporary name and renamed into place (`os.replace` is
atomic), and the manifest is replaced only after every layer file of the new step
exists, so a crash while writing leaves the last good checkpoint intact and readable.
Older step directories are removed once a newer manifest is in place.

Workers write asynchronously: `CheckpointWriter` takes host copies of the layers at a
commit (the only synchronous part; pinned memory for GPU layers, `staging`) and saves them on a background thread, then reports each
layer under `ckpt/<k>/<l>` in the coordinator's store, on its own connection. The
coordinator writes the manifest when every layer of step k is reported.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Mapping

import torch

from ..protocol.manifest import MANIFEST, Manifest, layer_path
from .layer_state import LayerState
from .staging import stage_state


def atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def save_layer(directory: str | Path, state: LayerState) -> str:
    """Write one layer file atomically; returns its path relative to `directory`."""
    rel = layer_path(state.ready_step, state.layer)
    path = Path(directory) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    torch.save(state.to_payload(), tmp)
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return rel


def load_layer(manifest: Manifest, layer: int) -> LayerState:
    state = LayerState.from_payload(torch.load(Path(manifest.directory) / manifest.files[layer], weights_only=True))
    if state.layer != layer or state.ready_step != manifest.step:
        raise RuntimeError(f"checkpoint file {manifest.files[layer]} holds layer {state.layer} at step {state.ready_step}")
    return state


def write_manifest(directory: str | Path, step: int, num_layers: int) -> Manifest:
    """Point the manifest at step `step` (its layer files must all exist), then delete
    the step directories it supersedes."""
    directory = Path(directory)
    files = {l: layer_path(step, l) for l in range(num_layers)}
    missing = [l for l, f in files.items() if not (directory / f).is_file()]
    if missing:
        raise FileNotFoundError(f"checkpoint of step {step} lacks layers {missing}")
    manifest = Manifest(str(directory), step, files, time.time())
    atomic_write_bytes(directory / MANIFEST, (json.dumps(manifest.to_dict(), indent=1) + "\n").encode())
    for old in directory.glob("step*"):
        tail = old.name[4:]
        if old.is_dir() and tail.isdigit() and int(tail) < step:
            shutil.rmtree(old, ignore_errors=True)
    return manifest


class CheckpointWriter:
    """A background thread that saves layer states and reports them (one job at a time:
    a new one waits for the previous, so memory holds at most two copies)."""

    def __init__(self, directory: str | Path, report: Callable[[int, int], None]):
        self.directory = Path(directory)
        self._report = report
        self._jobs: queue.Queue = queue.Queue(maxsize=1)
        self._thread = threading.Thread(target=self._run, name="checkpoint-writer", daemon=True)
        self._thread.start()

    def submit(self, states: Mapping[int, LayerState]) -> None:
        """Queue copies of `states` (the caller's tensors may change right after)."""
        self._jobs.put([stage_state(s) for s in states.values()])  # host copies (pinned for GPU layers)

    def flush(self, timeout_s: float = 60.0) -> None:
        """Wait until everything submitted is written."""
        deadline = time.time() + timeout_s
        while self._jobs.unfinished_tasks and time.time() < deadline:
            time.sleep(0.01)

    def _run(self) -> None:
        while True:
            states = self._jobs.get()
            try:
                for state in states:
                    save_layer(self.directory, state)
                    self._report(state.ready_step, state.layer)
            except Exception as exc:  # a failed write only costs this checkpoint
                print(f"ooblab worker {os.getpid()}: checkpoint write failed: {exc!r}", file=sys.stderr, flush=True)
            finally:
                self._jobs.task_done()
