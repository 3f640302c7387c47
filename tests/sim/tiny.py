"""A tiny model and cluster whose plans can be worked out by hand, and trace helpers.

Every layer: forward 1 s, backward 2 s (a stage of k layers weighs 3k s), 1 GB of state, all
of it gradients (so copies and checkpoints move 0 bytes and cost only their fixed parts),
no activations. With 2.5 GB per GPU a node holds at most two layers; the network is so fast
that gradient all-reduces take nanoseconds.
"""

from __future__ import annotations

from typing import Any

from designs.varuna.policy import VarunaPolicy
from designs.varuna.search import VarunaSearch
from planner.checkpoint_cost import StorageSpec
from planner.hardware import ClusterSpec, GpuSpec
from planner.profile import LayerProfile, ModelProfile
from sim.timing import IterationCost, PlannerCosts, PlannerTiming
from traces.model import Trace

GB = 10**9


def tiny_profile(num_layers: int = 4) -> ModelProfile:
    layers = tuple(
        LayerProfile(
            f"l{i}", 1.0, 2.0, param_bytes=0, grad_bytes=GB, optimizer_bytes=0, activation_bytes=0, output_bytes=0
        )
        for i in range(num_layers)
    )
    return ModelProfile("tiny", 1, layers, source="tests")


def tiny_cluster(num_nodes: int, memory_bytes: int = 5 * GB // 2) -> ClusterSpec:
    gpu = GpuSpec("tiny-gpu", 1e12, memory_bytes, 1e18, 1e18)
    return ClusterSpec(gpu, num_nodes, 1, reserved_bytes=0)


def make_trace(rows, name: str = "hand") -> Trace:
    """(time_s, kind, node) rows; several nodes may share a row as a list."""
    events = []
    for time_s, kind, nodes in rows:
        for node in [nodes] if isinstance(nodes, str) else nodes:
            events.append((float(time_s), kind, node))
    return Trace.from_tuples(events, name)


def nodes(count: int, prefix: str = "n") -> list[str]:
    return [f"{prefix}{i}" for i in range(1, count + 1)]


def tiny_timing(design: str, costs: PlannerCosts, batch: int = 8, layer_bytes: int = 0, **extra: Any) -> PlannerTiming:
    """The planner calibration's timing of `design` on the tiny model: its four layers of
    `layer_bytes` each, one GPU a node, a network so fast that transfers take nanoseconds;
    `extra`: more `PlannerTiming` arguments (storage, layout, options)."""
    return PlannerTiming(
        design,
        global_batch=batch,
        layer_bytes=[layer_bytes] * 4,
        inter_node_bw_bytes_per_s=1e18,
        gpus_per_node=1,
        costs=costs,
        **extra,
    )


def tiny_varuna(num_nodes: int, costs: PlannerCosts, batch: int = 8) -> tuple[VarunaPolicy, PlannerTiming]:
    """Varuna on the tiny model over up to `num_nodes` nodes (microbatches of 1), timed
    with `costs` and a 2 s checkpoint: the set-up of the restart tests."""
    search = VarunaSearch(
        lambda b: tiny_profile() if b == 1 else None, tiny_cluster(num_nodes), batch, max_microbatch=1
    )
    timing = tiny_timing("varuna", costs, batch, storage=StorageSpec(fixed_s=2.0))
    return VarunaPolicy(search, 1, max_nodes=num_nodes), timing


def resumed_at(sim: Any) -> list[float]:
    """When each pause of a simulation ended with the job running again."""
    return [e.time_s for e in sim.events if e.kind == "decision" and e.detail["event"] == "PauseEnded"]


class FixedTiming:
    """A timing whose every iteration costs `cost` and every timed action `pause_s`: the
    engine's hand cases, with no plan to time."""

    gpus_per_node = 1

    def __init__(self, cost: IterationCost, pause_s: float, samples_per_iteration: int, calibration: str = "test"):
        self.cost = cost
        self.pause = pause_s
        self.samples_per_iteration = samples_per_iteration
        self.calibration = calibration

    def iteration(self, plan: Any) -> IterationCost:
        return self.cost

    def pause_s(self, action: Any, plan: Any, alive: Any = None) -> float:
        return self.pause

    def idle_gpus(self, plan: Any) -> int:
        return 0
