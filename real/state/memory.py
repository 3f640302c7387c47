"""A node's CPU memory for in-memory copies: what survives its processes, not the node.

GEMINI keeps checkpoints in the CPU memory of the machines, outside the training
processes, so a restart of every process finds them again. Here a node's memory is a
directory (`RunConfig.memory_dir`/<node>, tmpfs by default: RAM), shared by the node's
worker processes and outliving each of them:

    g<g>-s<k>/layer<l>.pt    the flattened state (`layer_state.flatten`) of layer l, ready
                             for step k, from the copy generation g took

Files appear atomically (written under a temporary name, then renamed), so a reader never
sees half a layer; nothing is fsynced (it is memory). The node's workers prune copies
older than the newest complete one (`prune`); the coordinator removes a lost node's
directory in a local run (its memory is gone with it).
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from pathlib import Path

import torch

_COPY = re.compile(r"^g(\d+)-s(\d+)$")


class NodeMemory:
    """The copies in node `node`'s memory, under `root`/`node`."""

    def __init__(self, root: str | Path, node: str):
        self.path = Path(root) / node

    def _dir(self, generation: int, step: int) -> Path:
        return self.path / f"g{generation}-s{step}"

    def put(self, generation: int, step: int, layer: int, flat: torch.Tensor) -> None:
        directory = self._dir(generation, step)
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / f"layer{layer}.pt"
        tmp = directory / f".layer{layer}.tmp-{os.getpid()}-{threading.get_ident()}"
        torch.save(flat.detach().cpu(), tmp)
        os.replace(tmp, final)

    def get(self, generation: int, step: int, layer: int) -> torch.Tensor:
        path = self._dir(generation, step) / f"layer{layer}.pt"
        try:
            return torch.load(path, weights_only=True)
        except FileNotFoundError:
            raise RuntimeError(
                f"layer {layer}'s copy of step {step} (generation {generation}) is not in {self.path}'s memory"
            ) from None

    def copies(self) -> list[tuple[int, int]]:
        """(generation, step) of every copy present, oldest first."""
        if not self.path.is_dir():
            return []
        found = [m for m in (_COPY.match(p.name) for p in self.path.iterdir()) if m]
        return sorted((int(m.group(1)), int(m.group(2))) for m in found)

    def prune(self, generation: int, step: int) -> None:
        """Drop every copy older than (generation, step): an earlier generation's (its
        timeline was abandoned or superseded) or an earlier step of the same one."""
        for g, k in self.copies():
            if (g, k) < (generation, step):
                shutil.rmtree(self._dir(g, k), ignore_errors=True)

    def clear(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
