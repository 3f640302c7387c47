"""GPU and cluster descriptions.

The GPU table gives, per type, the peak dense half-precision tensor throughput (vendor data
sheets), the memory, the intra-node GPU-to-GPU bandwidth and a typical per-node network
bandwidth of cloud instances built on it. Bandwidths are one direction, bytes per second.
They are defaults: every figure can be overridden on the `ClusterSpec`.

Sources (public data sheets / instance pages):
- V100 SXM2 16 GB: 125 TFLOP/s FP16 tensor; NVLink 2, 300 GB/s total (150 GB/s per direction);
  network 10 Gb/s, as on AWS p3.2xlarge, the paper's spot instance (the calibration prices it).
- A100 SXM 40 / 80 GB: 312 TFLOP/s FP16/BF16 dense; NVLink 3, 600 GB/s total; network 24 Gb/s
  (GCP a2-highgpu-1g, the paper's GCP trace) for 40 GB and 400 Gb/s (p4de-class) for 80 GB.
- A40 48 GB: 149.7 TFLOP/s FP16 tensor; PCIe 4 x16 between GPUs (about 32 GB/s); 100 Gb/s.
- H100 SXM 80 GB: 989 TFLOP/s FP16/BF16 dense; NVLink 4, 900 GB/s total; 400 Gb/s.

Pipeline links (`ClusterSpec.pipeline_comm`; `make_cluster`, which every CLI, the simulator
and the real backend use, turns it on; a bare `ClusterSpec` leaves it off): where a profile has no
measured `communication.json`, a stage-boundary send costs latency + bytes / bandwidth over
the intra-node or inter-node bandwidth above, with a latency from NCCL's own cost model
(NVIDIA/nccl src/graph/tuning.cc, the Ring/Simple protocol that large activations use):
base latency 8.4 us plus one hop of 5.7 us over NVLink/PCIe (14.1 us in a node) or 6.6 us
over the network (15.0 us across nodes); no runtime hop overhead. `pipeline_comm=False`
gives the paper's Eq. 1-4, which charge nothing for pipeline traffic.

Default efficiency: 40% of peak, a typical model-FLOPs utilisation of well-tuned
transformer training (Megatron-LM reports 40-52% on A100 for GPT-3-class models); the
analytic profiles divide FLOPs by `peak_flops * efficiency`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .errors import PlannerError

GIB = 1 << 30
GBIT_PER_S = 1e9 / 8  # bytes per second in one Gb/s
DEFAULT_EFFICIENCY = 0.40
DEFAULT_RESERVED_BYTES = 1 * GIB  # CUDA context, allocator slack, communication buffers
DEFAULT_IN_NODE_LATENCY_S = 14.1e-6  # NCCL tuning model: 8.4 us base + 5.7 us NVLink/PCIe hop
DEFAULT_ACROSS_NODES_LATENCY_S = 15.0e-6  # NCCL tuning model: 8.4 us base + 6.6 us network hop


@dataclass(frozen=True)
class GpuSpec:
    """One GPU type: compute, memory, and the links around it."""

    name: str
    peak_flops: float  # dense FP16/BF16 tensor FLOP/s
    memory_bytes: int
    intra_node_bw_bytes_per_s: float  # GPU to GPU inside a node, one direction
    inter_node_bw_bytes_per_s: float  # per node NIC, one direction
    efficiency: float = DEFAULT_EFFICIENCY

    @property
    def effective_flops(self) -> float:
        return self.peak_flops * self.efficiency


GPUS: dict[str, GpuSpec] = {
    g.name: g
    for g in (
        GpuSpec("v100-16gb", 125e12, 16 * GIB, 150e9, 10 * GBIT_PER_S),
        GpuSpec("a100-40gb", 312e12, 40 * GIB, 300e9, 24 * GBIT_PER_S),
        GpuSpec("a100-80gb", 312e12, 80 * GIB, 300e9, 400 * GBIT_PER_S),
        GpuSpec("a40-48gb", 149.7e12, 48 * GIB, 32e9, 100 * GBIT_PER_S),
        GpuSpec("h100-80gb", 989e12, 80 * GIB, 450e9, 400 * GBIT_PER_S),
    )
}
DEFAULT_GPU = "v100-16gb"


def get_gpu(name: str) -> GpuSpec:
    try:
        return GPUS[name]
    except KeyError:
        raise PlannerError(f"unknown GPU type {name!r}; known: {', '.join(sorted(GPUS))}") from None


MAX_GPUS_PER_NODE = 1024  # a bound on a node's GPUs that keeps the planner within memory


@dataclass(frozen=True)
class ClusterSpec:
    """A homogeneous cluster: `num_nodes` nodes of `gpus_per_node` GPUs of one type.

    `pipeline_comm`: whether the cost model charges stage-boundary sends (False, the bare
    default: the paper's Eq. 1-4, bit-identical to the cost model before the term existed;
    `make_cluster` defaults to True)."""

    gpu: GpuSpec
    num_nodes: int
    gpus_per_node: int = 1
    reserved_bytes: int = DEFAULT_RESERVED_BYTES
    pipeline_comm: bool = False

    def __post_init__(self) -> None:
        if self.num_nodes < 1:
            raise PlannerError(f"a cluster needs at least one node, got {self.num_nodes}")
        if self.gpus_per_node < 1:
            raise PlannerError(f"gpus_per_node must be >= 1, got {self.gpus_per_node}")
        if self.gpus_per_node > MAX_GPUS_PER_NODE:
            raise PlannerError(
                f"gpus_per_node {self.gpus_per_node} is past the bound of {MAX_GPUS_PER_NODE}, "
                "which keeps the template search's tables within memory"
            )
        if self.usable_memory_bytes <= 0:
            raise PlannerError(f"reserved_bytes {self.reserved_bytes} leaves no memory on {self.gpu.name}")

    @property
    def usable_memory_bytes(self) -> int:
        """What one GPU can give to model state and activations."""
        return self.gpu.memory_bytes - self.reserved_bytes

    @property
    def inter_node_bw_bytes_per_s(self) -> float:
        return self.gpu.inter_node_bw_bytes_per_s

    @property
    def intra_node_bw_bytes_per_s(self) -> float:
        return self.gpu.intra_node_bw_bytes_per_s

    def with_nodes(self, num_nodes: int) -> ClusterSpec:
        return replace(self, num_nodes=num_nodes)


def make_cluster(
    gpu: str | GpuSpec = DEFAULT_GPU,
    num_nodes: int = 1,
    gpus_per_node: int = 1,
    *,
    inter_node_gbps: float | None = None,
    efficiency: float | None = None,
    reserved_bytes: int = DEFAULT_RESERVED_BYTES,
    pipeline_comm: bool = True,
) -> ClusterSpec:
    """Build a cluster from a GPU name, overriding the network or efficiency if asked."""
    spec = get_gpu(gpu) if isinstance(gpu, str) else gpu
    if inter_node_gbps is not None:
        if inter_node_gbps <= 0:
            raise PlannerError(f"inter-node bandwidth must be positive, got {inter_node_gbps} Gb/s")
        spec = replace(spec, inter_node_bw_bytes_per_s=inter_node_gbps * GBIT_PER_S)
    if efficiency is not None:
        if not 0 < efficiency <= 1:
            raise PlannerError(f"efficiency must be in (0, 1], got {efficiency}")
        spec = replace(spec, efficiency=efficiency)
    return ClusterSpec(spec, num_nodes, gpus_per_node, reserved_bytes, pipeline_comm)


def ring_allreduce_s(num_bytes: float, participants: int, bw_bytes_per_s: float) -> float:
    """Bandwidth term of a ring all-reduce: 2 (p - 1) / p of the data crosses each link."""
    if participants <= 1 or num_bytes <= 0:
        return 0.0
    return 2.0 * (participants - 1) / participants * num_bytes / bw_bytes_per_s
