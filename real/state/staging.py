"""Host staging of layer states: checkpoints and host-routed layer copies (DESIGN 5).

A checkpoint's copy of a CUDA worker's layers goes to page-locked (pinned) host memory:
the device-to-host copies run asynchronously at full bus speed and the commit waits for
them once, then the writer thread serialises host tensors without touching the GPU (and
without holding a second copy in GPU memory). A layer copy between CUDA workers on gloo
(which moves host memory only) goes through a pinned host buffer on both sides. On the
CPU there is nothing to pin: a staged copy is a plain clone, and the wire is the tensor.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from .layer_state import LayerState


def _synchronize(tensors) -> None:
    devices = {t.device for t in tensors if t.is_cuda}
    for device in devices:
        torch.cuda.synchronize(device)


def host_copies(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Copies of `tensors` in host memory, pinned for CUDA sources (waits for the copies:
    the sources may change right after)."""
    out = {}
    for name, t in tensors.items():
        t = t.detach()
        if t.is_cuda:
            copy = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)
            copy.copy_(t, non_blocking=True)
        else:
            copy = t.clone()
        out[name] = copy
    _synchronize(tensors.values())
    return out


def stage_state(state: LayerState) -> LayerState:
    """`state` copied to host memory (pinned when it lives on a GPU): what a checkpoint
    writes, safe from the training that goes on."""
    return LayerState(state.layer, state.ready_step, state.adam_step,
                      host_copies(state.params), host_copies(state.exp_avg), host_copies(state.exp_avg_sq))  # fmt: skip


def to_wire(flat: torch.Tensor, host_staged: bool) -> torch.Tensor:
    """What to send: `flat` itself, or its pinned host copy when the backend moves host
    memory only."""
    if not host_staged or not flat.is_cuda:
        return flat
    return host_copies({"flat": flat})["flat"]


def wire_buffer(numel: int, dtype: torch.dtype, device: torch.device, host_staged: bool) -> torch.Tensor:
    """A receive buffer: on `device`, or pinned host memory when host-staged."""
    if host_staged and device.type == "cuda":
        return torch.empty(numel, dtype=dtype, device="cpu", pin_memory=True)
    return torch.empty(numel, dtype=dtype, device=device)


def from_wire(buffer: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A received buffer on the worker's device."""
    return buffer if buffer.device == device else buffer.to(device)
