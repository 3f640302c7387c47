"""Which device and backend a worker uses (pure: the CUDA device count is an argument).

One worker per GPU: local rank (the GPU index on its node) g uses CUDA device g. NCCL
refuses two ranks of one communicator on one device ("Duplicate GPU detected"), so with
NCCL a local rank beyond the visible devices is an error, said before any group exists.
Gloo can share: local rank g runs on device g mod count, which is how one machine with one
GPU runs several ranks of real compute on CUDA. Gloo moves only host memory point to
point, so a CUDA worker on gloo stages its pipeline activations and layer copies through
host memory (`StageRunner`'s host bridge, `state.staging`); its gradient all-reduce
takes CUDA tensors (gloo stages those itself).

Backends: "auto" is NCCL on CUDA and gloo on CPU; "gloo" and "nccl" force one (NCCL needs
CUDA). Emulated compute sleeps, so "auto" keeps it on CPU unless CUDA is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import BACKENDS


class DeviceError(RuntimeError):
    """This worker cannot get the device or backend it was asked for."""


@dataclass(frozen=True)
class DeviceChoice:
    kind: str  # "cpu" | "cuda"
    index: int | None
    backend: str  # "gloo" | "nccl"

    @property
    def name(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"

    @property
    def host_staged(self) -> bool:
        """Point-to-point traffic must go through host memory (CUDA tensors on gloo)."""
        return self.kind == "cuda" and self.backend == "gloo"


def select_device(device: str, backend: str, compute: str, local_rank: int, cuda_devices: int) -> DeviceChoice:
    """The device of local rank `local_rank` given `cuda_devices` visible CUDA devices.
    `device`: "auto" | "cpu" | "cuda"; `backend`: one of BACKENDS."""
    if backend not in BACKENDS:
        raise DeviceError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if local_rank < 0:
        raise DeviceError(f"local rank must be >= 0, got {local_rank}")
    want_cuda = device == "cuda" or (device == "auto" and (compute == "real" or backend == "nccl") and cuda_devices > 0)
    if want_cuda and cuda_devices < 1:
        raise DeviceError("device 'cuda' requested but CUDA is not available on this worker")
    if not want_cuda:
        if backend == "nccl":
            raise DeviceError("backend 'nccl' needs CUDA, and this worker runs on the CPU")
        return DeviceChoice("cpu", None, "gloo")
    chosen = "nccl" if backend == "auto" else backend
    if chosen == "nccl":
        if local_rank >= cuda_devices:
            raise DeviceError(
                f"NCCL needs one CUDA device per rank: local rank {local_rank} on a node with {cuda_devices} visible device(s) "
                "(two NCCL ranks cannot share a device; use --backend gloo to share it)"
            )
        return DeviceChoice("cuda", local_rank, "nccl")
    return DeviceChoice("cuda", local_rank % cuda_devices, "gloo")
