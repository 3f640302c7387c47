"""Layer and model profiles: what one layer costs on one GPU for one microbatch.

A profile is the planner's only view of a model. It comes from the real backend's profiler,
from the Oobleck profiler's JSON files (`oobleck_format`), or from the analytic formulas of
`analytic`. All times are seconds, all sizes bytes, for one microbatch of `microbatch_size`
samples on one GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .contention import ContentionProfile
from .errors import ProfileError
from .optimizer_step import OptimizerProfile


def _pairs(mapping: dict[int, float] | tuple[tuple[int, float], ...]) -> tuple[tuple[int, float], ...]:
    items = mapping.items() if isinstance(mapping, dict) else mapping
    return tuple(sorted((int(k), float(v)) for k, v in items))


@dataclass(frozen=True)
class LayerProfile:
    """One layer.

    - `forward_s`, `backward_s`: compute time of one microbatch on one GPU (backward
      includes any activation recomputation).
    - `param_bytes`, `grad_bytes`, `optimizer_bytes`: model state; the memory check charges
      all three, a replica copy moves parameters and optimizer state.
    - `activation_bytes`: what the layer keeps per in-flight microbatch until its backward.
    - `output_bytes`: the tensor it hands to the next layer (pipeline traffic).
    - `workspace_bytes`: transient peak while it computes (0 when unknown).
    - `allreduce_in_node_s`: {d: s}, the intra-node all-reduce a layer sharded over d GPUs
      pays once in forward and once in backward (d = 1 is always 0 and never stored).
    - `allreduce_across_nodes_s`: {k: s}, measured gradient all-reduce across k replicas;
      where absent the planner uses a ring model of the cluster's network.
    """

    name: str
    forward_s: float
    backward_s: float
    param_bytes: int
    grad_bytes: int
    optimizer_bytes: int
    activation_bytes: int
    output_bytes: int
    workspace_bytes: int = 0
    allreduce_in_node_s: tuple[tuple[int, float], ...] = field(default=())
    allreduce_across_nodes_s: tuple[tuple[int, float], ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "allreduce_in_node_s", _pairs(self.allreduce_in_node_s))
        object.__setattr__(self, "allreduce_across_nodes_s", _pairs(self.allreduce_across_nodes_s))

    @property
    def state_bytes(self) -> int:
        return self.param_bytes + self.grad_bytes + self.optimizer_bytes

    @property
    def copy_bytes(self) -> int:
        """Bytes a node must receive to take over this layer: parameters + optimizer state."""
        return self.param_bytes + self.optimizer_bytes

    def in_node_allreduce_s(self, num_gpus: int) -> float | None:
        """Intra-node all-reduce time over `num_gpus`, or None when the profile lacks it."""
        if num_gpus == 1:
            return 0.0
        for d, seconds in self.allreduce_in_node_s:
            if d == num_gpus:
                return seconds
        return None

    def across_nodes_allreduce_s(self, replicas: int) -> float | None:
        for k, seconds in self.allreduce_across_nodes_s:
            if k == replicas:
                return seconds
        return None


@dataclass(frozen=True)
class LinkProfile:
    """One point-to-point link: moving B bytes one way takes latency_s + B / bytes_per_s."""

    latency_s: float
    bytes_per_s: float

    def transfer_s(self, num_bytes: float) -> float:
        return self.latency_s + num_bytes / self.bytes_per_s


@dataclass(frozen=True)
class CommProfile:
    """Pipeline communication (a profile's `communication.json`, f15 interface).

    - `in_node`: the link between stages on the same node; `across_nodes`: between nodes.
    - `hop_overhead_s`: the runtime's own cost per microbatch, per stage boundary, per
      direction, that its 1F1B schedule does not overlap with compute.
    The cost model charges each stage its outgoing sends (`costmodel`)."""

    in_node: LinkProfile
    across_nodes: LinkProfile
    hop_overhead_s: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        validate_comm(self, self.source or "communication profile")

    def link(self, in_node: bool) -> LinkProfile:
        return self.in_node if in_node else self.across_nodes


@dataclass(frozen=True)
class ModelProfile:
    """A model as a sequence of layers profiled at one microbatch size. `communication`,
    when measured, says what its pipeline sends cost (None: the cluster's links);
    `contention`: compute factors by number of busy neighbours (`planner.contention`;
    None: none measured, the layer times hold whatever the workers share); `optimizer`:
    each layer's optimizer step (`planner.optimizer_step`; None: not charged)."""

    name: str
    microbatch_size: int
    layers: tuple[LayerProfile, ...]
    source: str = ""
    contention: ContentionProfile | None = None
    communication: CommProfile | None = None
    optimizer: OptimizerProfile | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        where = self.source or self.name
        if not self.layers:
            raise ProfileError(f"{where}: the model has no layers")
        if self.microbatch_size < 1:
            raise ProfileError(f"{where}: microbatch size must be >= 1, got {self.microbatch_size}")
        for index, layer in enumerate(self.layers):
            validate_layer(layer, f"{where}: layer {index} ({layer.name})")
        if self.contention is not None and self.contention.measured_s:
            measured = len(self.contention.measured_s[0][1])
            if measured != len(self.layers):
                raise ProfileError(
                    f"{where}: contention measured_s lists {measured} layers, the model has {len(self.layers)}"
                )
        if self.communication is not None:
            if not isinstance(self.communication, CommProfile):
                raise ProfileError(f"{where}: communication must be a CommProfile, got {self.communication!r}")
            validate_comm(self.communication, f"{where}: communication")
        if self.optimizer is not None and len(self.optimizer.step_s) != len(self.layers):
            raise ProfileError(
                f"{where}: optimizer step_s lists {len(self.optimizer.step_s)} layers, the model has {len(self.layers)}"
            )

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def state_bytes(self) -> int:
        return sum(layer.state_bytes for layer in self.layers)

    @property
    def copy_bytes(self) -> int:
        return sum(layer.copy_bytes for layer in self.layers)

    def stage_gpu_counts(self, gpus_per_node: int) -> tuple[int, ...]:
        """Stage widths d (powers of two <= gpus_per_node) that every layer has timings for."""
        widths = []
        d = 1
        while d <= gpus_per_node:
            if all(layer.in_node_allreduce_s(d) is not None for layer in self.layers):
                widths.append(d)
            d *= 2
        return tuple(widths)


def validate_layer(layer: LayerProfile, where: str) -> None:
    """Reject negative, non-finite or nonsensical numbers, naming the layer."""
    for name in ("forward_s", "backward_s"):
        value = getattr(layer, name)
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ProfileError(f"{where}: {name} must be a finite number >= 0, got {value!r}")
    if layer.forward_s + layer.backward_s <= 0:
        raise ProfileError(f"{where}: forward and backward times are both zero")
    for name in (
        "param_bytes",
        "grad_bytes",
        "optimizer_bytes",
        "activation_bytes",
        "output_bytes",
        "workspace_bytes",
    ):
        value = getattr(layer, name)
        if not isinstance(value, int) or value < 0:
            raise ProfileError(f"{where}: {name} must be an integer >= 0, got {value!r}")
    for label, pairs in (
        ("allreduce_in_node_s", layer.allreduce_in_node_s),
        ("allreduce_across_nodes_s", layer.allreduce_across_nodes_s),
    ):
        for count, seconds in pairs:
            if count < 1 or not math.isfinite(seconds) or seconds < 0:
                raise ProfileError(f"{where}: {label}[{count}] = {seconds!r} is not a valid time")


def _finite(value: object, where: str, name: str, *, positive: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProfileError(f"{where}: {name} must be a finite number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ProfileError(f"{where}: {name} must be {'> 0' if positive else '>= 0'}, got {value!r}")


def validate_comm(comm: CommProfile, where: str) -> None:
    """Latencies and the hop overhead finite and >= 0, bandwidths finite and > 0."""
    for label in ("in_node", "across_nodes"):
        link = getattr(comm, label)
        if not isinstance(link, LinkProfile):
            raise ProfileError(f"{where}: {label} must be a LinkProfile, got {link!r}")
        _finite(link.latency_s, where, f"{label}.latency_s")
        _finite(link.bytes_per_s, where, f"{label}.bytes_per_s", positive=True)
    _finite(comm.hop_overhead_s, where, "hop_overhead_s")
