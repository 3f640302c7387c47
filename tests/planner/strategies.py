"""Hypothesis strategies for small random models and clusters."""

from __future__ import annotations

from hypothesis import strategies as st

from planner.hardware import ClusterSpec, GpuSpec
from planner.profile import LayerProfile, ModelProfile

MIB = 1 << 20


@st.composite
def layer_profiles(draw, index: int) -> LayerProfile:
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
        output_bytes=MIB,
        workspace_bytes=draw(st.sampled_from([0, 0, 4 * MIB, 16 * MIB])),
        allreduce_in_node_s=tuple((d, draw(st.integers(0, 10)) / 20) for d in (2, 4)),
    )


@st.composite
def models(draw, max_layers: int = 8) -> ModelProfile:
    n = draw(st.integers(1, max_layers))
    return ModelProfile("random", 1, tuple(draw(layer_profiles(i)) for i in range(n)))


def cluster(memory_mib: int, num_nodes: int, gpus_per_node: int) -> ClusterSpec:
    gpu = GpuSpec("test-gpu", 1e12, memory_mib * MIB, 1e10, 1e9)
    return ClusterSpec(gpu, num_nodes, gpus_per_node, reserved_bytes=0)
