"""Hypothesis strategies for small random models and clusters."""

from __future__ import annotations

from hypothesis import strategies as st

from planner.hardware import ClusterSpec, GpuSpec
from planner.profile import CommProfile, LayerProfile, LinkProfile, ModelProfile

MIB = 1 << 20


@st.composite
def layer_profiles(draw, index: int, varied_outputs: bool = False, max_allreduce_s: float = 0.5) -> LayerProfile:
    forward = draw(st.integers(1, 40)) / 10
    backward = draw(st.integers(1, 80)) / 10
    state = draw(st.integers(1, 64)) * MIB
    return LayerProfile(
        name=f"l{index}",
        forward_s=forward,
        backward_s=backward,
        param_bytes=state // 4,
        grad_bytes=state // 4,
        optimizer_bytes=state - 2 * (state // 4),
        activation_bytes=draw(st.integers(0, 8)) * MIB,
        output_bytes=draw(st.integers(0, 8)) * MIB if varied_outputs else MIB,
        workspace_bytes=draw(st.sampled_from([0, 0, 4 * MIB, 16 * MIB])),
        allreduce_in_node_s=tuple((d, draw(st.integers(0, 10)) * max_allreduce_s / 10) for d in (2, 4)),
    )


@st.composite
def models(draw, max_layers: int = 8, varied_outputs: bool = False, max_allreduce_s: float = 0.5) -> ModelProfile:
    """Random models; `varied_outputs` draws each layer's output bytes (else 1 MiB), a large
    `max_allreduce_s` makes sharding dear, so nodes hold several stages."""
    n = draw(st.integers(1, max_layers))
    layers = tuple(draw(layer_profiles(i, varied_outputs, max_allreduce_s)) for i in range(n))
    return ModelProfile("random", 1, layers)


@st.composite
def comm_profiles(draw) -> CommProfile:
    """Links whose sends cost about as much as a layer (0.1-8 s), so they move optima."""

    def link() -> LinkProfile:
        return LinkProfile(draw(st.sampled_from([0.0, 0.05, 0.3])), draw(st.sampled_from([1, 2, 8])) * MIB)

    return CommProfile(link(), link(), draw(st.sampled_from([0.0, 0.1, 0.5])), "random")


def cluster(memory_mib: int, num_nodes: int, gpus_per_node: int) -> ClusterSpec:
    gpu = GpuSpec("test-gpu", 1e12, memory_mib * MIB, 1e10, 1e9)
    return ClusterSpec(gpu, num_nodes, gpus_per_node, reserved_bytes=0)


def comm_cluster(memory_mib: int, num_nodes: int, gpus_per_node: int) -> ClusterSpec:
    """`cluster` with the pipeline-communication term on."""
    gpu = GpuSpec("test-gpu", 1e12, memory_mib * MIB, 1e10, 1e9)
    return ClusterSpec(gpu, num_nodes, gpus_per_node, reserved_bytes=0, pipeline_comm=True)
