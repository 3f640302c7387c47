"""The built-in cost profiles' values (`sim.cost_profiles` reads them), each with its source.

- `paper`: the planner calibration's defaults, which come from the Oobleck artifact and
  the fits in docs/simulator.md: every priced cluster term of `sim.cost_terms` that has a
  default, at that default and with its source, so naming it changes no result. Storage
  bandwidths are left to the GPU type's defaults (the artifact's fits for the V100, 2 GB/s
  otherwise).
- `h100-datacenter`: a large H100 training cluster as the field reports it: failures
  noticed in a minute, hangs only at the collective's timeout, relaunches that requeue the
  job and grow with its size, a blocking checkpoint copy, a storage system with an
  aggregate bandwidth, and warm spares.
"""

from __future__ import annotations

from .cost_terms import paper_values

_PAPER = paper_values()  # the terms' own defaults and sources

_H100 = {
    "node_startup_s": (
        65.0,
        "s",
        "ByteRobust (arXiv 2509.16293) Table 7: an in-place restart on standby machines takes 46-65 s at 2k-16k GPUs; the largest",
        ("gpus", 2048, 16384),
    ),
    "reconfigure_overhead_s": (
        30.0,
        "s",
        "MegaScale (arXiv 2402.15627) section 3.5: communicator initialisation under 30 s beyond 10,000 GPUs",
        ("gpus", 2048, 12288),
    ),
    "quorum_rejoin_s": (
        30.0,
        "s",
        "MegaScale (arXiv 2402.15627) section 3.5: communicator initialisation under 30 s beyond 10,000 GPUs; torchft's "
        "Manager rebuilds its process group on a group's return as on its leave (as reconfigure_overhead_s)",
        ("gpus", 2048, 12288),
    ),
    "restart_fixed_s": (
        441.3,
        "s",
        "ByteRobust (arXiv 2509.16293) Table 7: least-squares line through requeued restarts of 454/545/635/768 s "
        "at 2,048/4,096/8,192/16,384 GPUs (each within 30 s); they include the checkpoint load, which ooblab adds again",
        ("gpus", 2048, 16384),
    ),
    "restart_per_process_s": (
        0.0207,
        "s",
        "ByteRobust (arXiv 2509.16293) Table 7: the slope of that line",
        ("gpus", 2048, 16384),
    ),
    "checkpoint_fixed_s": (
        10.0,
        "s",
        "ByteRobust (arXiv 2509.16293) Table 8: a Megatron checkpoint save blocks training 6.77-13.02 s; about the middle",
    ),
    "storage_gb_per_s": (2.0, "GB/s", "assumed: a node's share of a parallel file system, as for p4d/p5 instances"),
    "restart_load_gb_per_s": (2.0, "GB/s", "assumed: as the write bandwidth"),
    "storage_cap_gb_per_s": (
        2000.0,
        "GB/s",
        "Llama 3 (arXiv 2407.21783) section 3.3.1: the Tectonic file system sustains 2 TB/s (7 TB/s peak)",
    ),
    "price_per_node_hour": (98.32, "$/node-h", "assumed: AWS p5.48xlarge (8 x H100 80 GB) on-demand list price"),
    "detect_s": (0.0, "s", "assumed: a removal with no cause is a planned one or a preemption with notice"),
    "detect_crash_s": (
        60.0,
        "s",
        "ByteRobust (arXiv 2509.16293) section 2.2: explicit failures are detected in about 60 s",
    ),
    "detect_network_s": (
        60.0,
        "s",
        "ByteRobust (arXiv 2509.16293) Table 3: NIC and port checks take 30 s, a switch 30 s twice",
    ),
    "detect_hang_s": (
        600.0,
        "s",
        "ByteRobust (arXiv 2509.16293) Table 3: without inspection a hang waits for the 10-minute PyTorch collective "
        "timeout (section 2.3: 30-60 minutes with NCCL's)",
    ),
}


# name -> (description, {key: (value, unit, source[, (over, low, high): the sizes the source
# measured it at])}, base: the built-in it inherits what it leaves out from, or None);
# `sim.cost_profiles.BUILTIN` checks and holds them as profiles, in this order
DATA: dict[str, tuple[str, dict[str, tuple], str | None]] = {
    "paper": ("the planner calibration's defaults: the Oobleck artifact's cluster and fits", _PAPER, None),
    "h100-datacenter": (
        "a large H100 cluster as published: failures noticed in a minute, requeued restarts growing with "
        "the job, blocking checkpoint copies, an aggregate storage bandwidth, warm spares",
        _H100,
        "paper",  # the share of a relaunch a removal does not cut short: the paper's 0
    ),
}
