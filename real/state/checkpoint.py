"""Checkpoint files: one file per layer, a manifest naming the newest complete set, durable.

On disk (`directory`, shared by every worker of a job: local disk for one machine, a
shared file system across machines):

    step<k>/layer<l>.pt     LayerState of layer l ready for step k (parameters + AdamW)
    checkpoint.json         {"step": k, "files": {...}, "kept": [k', k], ...}

Durability, in order: every file is written under a temporary name, fsynced, renamed into
place (`os.replace` is atomic) and its directory fsynced (so the rename itself survives a
power cut; a new step directory's entry is fsynced in its parent too). The manifest is
written the same way, and only after every layer file of its step exists: a crash at any
point leaves the last good checkpoint intact and readable. The last `keep` complete
checkpoints stay on disk (the manifest lists them in `kept`); older step directories, and
incomplete ones older than the newest, are removed once the new manifest is durable.

The background writer (`writer.CheckpointWriter`, which takes host copies at a commit, pinned
for GPU layers: `staging`) and the coordinator's bookkeeping
(`real.control.checkpoints`) are built on these functions.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import torch

from ..protocol.manifest import MANIFEST, Manifest, layer_path, read_manifest
from .layer_state import LayerState

DEV_FULL = "/dev/full"  # the kernel's always-full device: writes fail with ENOSPC


def fsync_dir(path: Path) -> None:
    """Make the entries of directory `path` (creations, renames) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _mkdir_durable(path: Path) -> None:
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        fsync_dir(path.parent)


def atomic_write(path: Path, write: Callable[[IO[bytes]], object], *, sink: str | None = None) -> None:
    """Write `path` durably: `write(handle)` into a temporary file, fsync it, rename it
    into place, fsync the directory. `sink` (fault injection) writes there instead."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        with open(sink or tmp, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def save_layer(directory: str | Path, state: LayerState, *, sink: str | None = None) -> str:
    """Write one layer file durably; returns its path relative to `directory`."""
    directory = Path(directory)
    rel = layer_path(state.ready_step, state.layer)
    path = directory / rel
    _mkdir_durable(directory)
    _mkdir_durable(path.parent)
    atomic_write(path, lambda handle: torch.save(state.to_payload(), handle), sink=sink)
    return rel


def load_layer(manifest: Manifest, layer: int) -> LayerState:
    state = LayerState.from_payload(torch.load(Path(manifest.directory) / manifest.files[layer], weights_only=True))
    if state.layer != layer or state.ready_step != manifest.step:
        raise RuntimeError(
            f"checkpoint file {manifest.files[layer]} holds layer {state.layer} at step {state.ready_step}"
        )
    return state


def missing_files(manifest: Manifest) -> list[int]:
    """Layers whose file of `manifest` is not on disk."""
    return [l for l, f in manifest.files.items() if not (Path(manifest.directory) / f).is_file()]


def write_manifest(directory: str | Path, step: int, num_layers: int, keep: int = 2) -> Manifest:
    """Point the manifest at step `step` (its layer files must all exist), keeping the
    `keep` newest complete checkpoints, then delete the step directories it drops."""
    directory = Path(directory)
    files = files_of(step, num_layers)
    missing = [l for l, f in files.items() if not (directory / f).is_file()]
    if missing:
        raise FileNotFoundError(f"checkpoint of step {step} lacks layers {missing}")
    previous = read_manifest(directory)
    earlier = sorted(k for k in (previous.kept or (previous.step,)) if k < step) if previous is not None else []
    complete = [k for k in earlier if not missing_files(Manifest(str(directory), k, files_of(k, num_layers)))]
    kept = tuple(complete[-(keep - 1) :] if keep > 1 else []) + (step,)
    manifest = Manifest(str(directory), step, files, time.time(), kept)
    atomic_write(
        directory / MANIFEST, lambda handle: handle.write((json.dumps(manifest.to_dict(), indent=1) + "\n").encode())
    )
    for old in directory.glob("step*"):
        tail = old.name[4:]
        if old.is_dir() and tail.isdigit() and int(tail) < step and int(tail) not in kept:
            shutil.rmtree(old, ignore_errors=True)
    return manifest


def files_of(step: int, num_layers: int) -> dict[int, str]:
    return {l: layer_path(step, l) for l in range(num_layers)}


def newest_usable(manifest: Manifest | None) -> tuple[Manifest | None, list[tuple[int, list[int]]]]:
    """The newest checkpoint `manifest` keeps whose files are all on disk, and the newer
    ones skipped, each with its missing layers."""
    if manifest is None:
        return None, []
    skipped: list[tuple[int, list[int]]] = []
    for candidate in [manifest, *manifest.older()]:
        missing = missing_files(candidate)
        if not missing:
            return candidate, skipped
        skipped.append((candidate.step, missing))
    return None, skipped
