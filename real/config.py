"""Configuration of a real-backend run, as frozen dataclasses that travel as JSON.

`RunConfig` is what `ooblab run` (or `ooblab coordinator`) is asked to do; the coordinator
publishes it to the workers through the store, so workers need nothing but the
coordinator's address, their node name and their GPU index. No torch import here: the CLI
builds and validates configs before any heavy import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from planner.reconfigure import DEFAULT_JOIN_HORIZON_S

COMPUTE_MODES = ("real", "emulated")
DTYPES = ("float32", "float64")
TOKEN_DTYPE_NAMES = ("uint16", "uint32")  # token ids in a --data file (`real.models.tokens`)
DEVICES = ("auto", "cpu", "cuda")
BACKENDS = ("auto", "gloo", "nccl")  # auto: NCCL on CUDA, gloo on CPU (real.worker.devices)
TINY_GPT = "tiny-gpt"


class ConfigError(ValueError):
    """A run configuration that cannot work; the message names the field."""


CHECKPOINT_FAULTS = ("full", "hang", "crash")


@dataclass(frozen=True)
class CheckpointFault:
    """A fault the checkpoint writer injects into its own I/O (tests only; `checkpoint_fault`
    = "STEP:KIND[:NODE],..."): the checkpoint of step STEP (periodic or on-demand), on
    node NODE's workers (all when omitted), at most once per process.

    - `full`: the layer file is written to /dev/full, the kernel's always-full device, so
      the write fails with a real ENOSPC (a disk full);
    - `hang`: the write never returns (a hung file system);
    - `crash`: the worker SIGKILLs itself after its files of STEP are durable and before it
      reports them (a writer killed between its files and the manifest)."""

    step: int
    kind: str
    node: str | None = None


def parse_checkpoint_faults(text: str | None) -> tuple[CheckpointFault, ...]:
    if not text:
        return ()
    faults = []
    for entry in text.split(","):
        parts = entry.strip().split(":")
        if (
            len(parts) not in (2, 3)
            or not parts[0].isdigit()
            or parts[1] not in CHECKPOINT_FAULTS
            or (len(parts) == 3 and not parts[2])
        ):
            raise ConfigError(f"checkpoint_fault entry {entry!r} is not STEP:{'|'.join(CHECKPOINT_FAULTS)}[:NODE]")
        faults.append(CheckpointFault(int(parts[0]), parts[1], parts[2] if len(parts) == 3 else None))
    return tuple(faults)


@dataclass(frozen=True)
class TinyGptSpec:
    """The testbed's small GPT: embedding, `blocks` pre-LayerNorm transformer blocks and a
    head (final LayerNorm + untied output projection); `blocks + 2` planner layers."""

    vocab: int = 256
    seq_len: int = 32
    hidden: int = 64
    heads: int = 4
    blocks: int = 4

    def __post_init__(self) -> None:
        for name in ("vocab", "seq_len", "hidden", "heads", "blocks"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"tiny-gpt {name} must be a positive integer, got {value!r}")
        if self.hidden % self.heads:
            raise ConfigError(f"tiny-gpt hidden size {self.hidden} is not a multiple of heads {self.heads}")
        if self.vocab < 2:
            raise ConfigError(f"tiny-gpt vocabulary must have at least 2 tokens, got {self.vocab}")

    @property
    def num_layers(self) -> int:
        return self.blocks + 2


@dataclass(frozen=True)
class RunConfig:
    """One job on the real backend.

    - `model`: "tiny-gpt" (real or emulated compute), a Hugging Face model
      "hf:FAMILY:PRESET|DIR" (real compute, `real.models.hf`), or, for emulated compute
      only, a built-in analytic model name or an Oobleck-format profile directory.
    - `profile_dir`: a measured profile of the model (`ooblab profile [--model hf:...]`) to
      plan from; without it the model is planned from an analytic estimate
      (`planning.estimate_tiny_gpt`, `planning.estimate_trained`).
    - `data`, `data_dtype`: a flat binary of token ids to train on (`real.models.tokens`);
      `text`, `tokenizer`: a text file and a local tokenizer directory instead, tokenised
      into such a binary in the run directory before any worker starts (`real.models.text`).
    - `pipelines`: node counts of the pipelines (e.g. (3, 4)) to force a grouping through
      `Planner.build_plan`; None lets the planner instantiate.
    - `gpu`: the planner's GPU type for memory and links; None: a CPU "GPU" of
      `gpu_memory_gb` (tiny-gpt) or v100-16gb (other models), as `ooblab plan` does.
    - `timeout_s`: every process group's timeout (collectives, rendezvous).
    - `device`, `backend`: where workers compute and how they talk (`real.worker.devices`:
      one CUDA device per local rank; "gloo" on CUDA lets ranks share a device).
    - Failures (part 2): `policy` names the design (`designs.registry`) that decides what a
      membership change leads to ("oobleck": live reconfiguration from in-memory replicas;
      "varuna": checkpoint, stop everything, restart), `design_options` its options other
      than those with a field here (`fault_tolerance`, `join_horizon_s`); `checkpoint_every` steps (0: never) into `checkpoint_dir` (default: the
      run directory's `checkpoints/`), keeping the last `checkpoint_keep` complete ones; a
      checkpoint not durable within `checkpoint_timeout_s` of its commit counts as failed
      (a worker also waits at most that long, and at most half the group timeout, for its
      writer's queue); `checkpoint_fault` injects writer faults (tests, `CheckpointFault`);
      `inject` ("STEP:WORKER:KIND[:POINT],...", link faults included,
      see `real.failures`) and `trace` (a trace file or generator spec, replayed
      `time_scale` times faster from the start of training) make failures and joins;
      `heartbeat_timeout_s` declares a silent worker hung; `wait_for_nodes_s` bounds how
      long the job waits for nodes when too few are left; `respawn` lets a local launcher
      replace a worker that cannot tear down cleanly (and Varuna restart processes);
      `sever_on_failure`: on the coordinator's word after a failure, a gloo worker shuts
      its generation's sockets, so every survivor fails at once (`real.worker.sever`);
      False leaves the failure to cascade one rank's teardown at a time, as before.
    - In-memory copies (a design with `RealHooks.memory_copies`, GEMINI): `memory_dir` is
      where each node keeps them, `<memory_dir>/<node>` on that node (default: a fresh
      directory in /dev/shm, i.e. RAM, else the system's temporary directory).
    - Checkpoint storage for the accounting (`real.control.checkpoint_accounting`: each
      checkpoint's predicted seconds by `planner.checkpoint_cost`, next to the measured
      ones): `storage_gb_per_s` (write, per node), `restart_load_gb_per_s` (read, per
      node), `storage_cap_gb_per_s` (the whole storage system), `checkpoint_fixed_s`;
      None: `planner.checkpoint_cost.storage_for` the planner's GPU type, as the
      simulator's fields of the same names. They price checkpoints; they slow nothing.
    """

    nodes: int = 2
    gpus_per_node: int = 1
    fault_tolerance: int = 1
    model: str = TINY_GPT
    tiny: TinyGptSpec = field(default_factory=TinyGptSpec)
    data: str | None = None  # a flat binary of token ids (`real.models.tokens`); None: synthetic sequences
    data_dtype: str = "uint16"
    # a UTF-8 text file and a local tokenizer directory: tokenised into `data` before the
    # workers start (`real.models.text`)
    text: str | None = None
    tokenizer: str | None = None
    compute: str = "real"
    steps: int = 10
    global_batch: int = 16
    microbatch_size: int = 1
    pipelines: tuple[int, ...] | None = None
    profile_dir: str | None = None
    gpu: str | None = None
    gpu_memory_gb: float = 16.0
    inter_node_gbps: float | None = None
    dtype: str = "float32"
    seed: int = 0
    lr: float = 3e-3
    weight_decay: float = 0.01
    timeout_s: float = 60.0
    heartbeat_interval_s: float = 0.5
    heartbeat_timeout_s: float = 10.0
    startup_timeout_s: float = 300.0
    threads_per_worker: int | None = None
    device: str = "auto"
    backend: str = "auto"
    save_params_dir: str | None = None
    policy: str = "oobleck"
    design_options: dict[str, Any] = field(default_factory=dict)
    checkpoint_every: int = 10
    checkpoint_dir: str | None = None
    checkpoint_keep: int = 2
    checkpoint_timeout_s: float = 30.0
    checkpoint_fault: str | None = None
    inject: str | None = None
    trace: str | None = None
    time_scale: float = 1.0
    join_horizon_s: float = DEFAULT_JOIN_HORIZON_S
    wait_for_nodes_s: float = 120.0
    respawn: bool = True
    sever_on_failure: bool = True
    storage_gb_per_s: float | None = None
    restart_load_gb_per_s: float | None = None
    storage_cap_gb_per_s: float | None = None
    checkpoint_fixed_s: float | None = None
    memory_dir: str | None = None

    def __post_init__(self) -> None:
        ints = ("nodes", "gpus_per_node", "steps", "global_batch", "microbatch_size")
        for name in ints:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if self.fault_tolerance < 0:
            raise ConfigError(f"f must be >= 0, got {self.fault_tolerance}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed must be a whole number >= 0, got {self.seed!r}")
        if self.compute not in COMPUTE_MODES:
            raise ConfigError(f"compute must be one of {COMPUTE_MODES}, got {self.compute!r}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.device not in DEVICES:
            raise ConfigError(f"device must be one of {DEVICES}, got {self.device!r}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.backend == "nccl" and self.device == "cpu":
            raise ConfigError("backend 'nccl' needs device 'cuda' (or 'auto' on a machine with CUDA), not 'cpu'")
        if self.compute == "real" and self.model != TINY_GPT:
            if not self.model.startswith("hf:"):
                raise ConfigError(
                    f"real compute runs the built-in {TINY_GPT!r} or a Hugging Face model (hf:gpt2:tiny, "
                    f"hf:llama:DIR); {self.model!r} can run with --compute emulated"
                )
        if (self.data is not None or self.text is not None) and self.compute != "real":
            raise ConfigError("--data and --text feed real compute; emulated layers take no tokens")
        if (self.text is None) != (self.tokenizer is None):
            raise ConfigError("--text and --tokenizer go together: a text file and the local tokenizer to read it with")
        if self.data_dtype not in TOKEN_DTYPE_NAMES:
            raise ConfigError(f"data_dtype must be {' or '.join(TOKEN_DTYPE_NAMES)}, got {self.data_dtype!r}")
        if self.global_batch % self.microbatch_size:
            raise ConfigError(
                f"global batch {self.global_batch} is not a multiple of the microbatch size {self.microbatch_size}"
            )
        if self.pipelines is not None:
            if not self.pipelines or any(not isinstance(n, int) or n < 1 for n in self.pipelines):
                raise ConfigError(f"pipelines must be positive node counts, got {self.pipelines!r}")
            if self.trace is None and sum(self.pipelines) != self.nodes:
                raise ConfigError(
                    f"pipelines {list(self.pipelines)} use {sum(self.pipelines)} nodes, the job has {self.nodes}"
                )
        # the name is checked against the registry where the design is built (the
        # coordinator): workers never need it, nor the modules an external design comes from
        if not isinstance(self.policy, str) or not self.policy:
            raise ConfigError(f"policy must name a design, got {self.policy!r}")
        if not isinstance(self.design_options, Mapping) or not all(isinstance(k, str) for k in self.design_options):
            raise ConfigError(f"design_options must map option names to values, got {self.design_options!r}")
        if not isinstance(self.checkpoint_every, int) or self.checkpoint_every < 0:
            raise ConfigError(
                f"checkpoint_every must be a whole number of steps >= 0 (0: never), got {self.checkpoint_every!r}"
            )
        if not isinstance(self.checkpoint_keep, int) or self.checkpoint_keep < 1:
            raise ConfigError(
                f"checkpoint_keep must be a whole number of checkpoints >= 1, got {self.checkpoint_keep!r}"
            )
        parse_checkpoint_faults(self.checkpoint_fault)
        for name in (
            "timeout_s",
            "checkpoint_timeout_s",
            "heartbeat_interval_s",
            "heartbeat_timeout_s",
            "startup_timeout_s",
            "gpu_memory_gb",
            "lr",
            "time_scale",
            "join_horizon_s",
            "wait_for_nodes_s",
        ):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)!r}")
        for name in ("storage_gb_per_s", "restart_load_gb_per_s", "storage_cap_gb_per_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"{name} must be positive (or unset), got {value!r}")
        if self.checkpoint_fixed_s is not None and not self.checkpoint_fixed_s >= 0:
            raise ConfigError(f"checkpoint_fixed_s must be >= 0 (or unset), got {self.checkpoint_fixed_s!r}")
        if self.heartbeat_timeout_s <= self.heartbeat_interval_s:
            raise ConfigError("heartbeat_timeout_s must exceed heartbeat_interval_s")
        if self.threads_per_worker is not None and self.threads_per_worker < 1:
            raise ConfigError(f"threads_per_worker must be >= 1, got {self.threads_per_worker}")

    @property
    def teardown_timeout_s(self) -> float:
        """How long the coordinator waits for a survivor to tear down and report after a
        failure: a survivor blocked in a rendezvous notices only at the group timeout."""
        return self.timeout_s + self.heartbeat_timeout_s + 5.0

    @property
    def checkpoint_queue_timeout_s(self) -> float:
        """How long a worker waits for room in its writer's queue before it counts that
        checkpoint as failed: never long enough to time out its peers' collectives."""
        return min(self.checkpoint_timeout_s, self.timeout_s / 2)

    @property
    def num_workers(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_names(self) -> list[str]:
        return [f"node{i}" for i in range(self.nodes)]

    def with_(self, **changes: Any) -> RunConfig:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["pipelines"] = list(self.pipelines) if self.pipelines is not None else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown run settings {sorted(unknown)}")
        values = dict(data)
        if "tiny" in values and isinstance(values["tiny"], Mapping):
            values["tiny"] = TinyGptSpec(**values["tiny"])
        if values.get("pipelines") is not None:
            values["pipelines"] = tuple(values["pipelines"])
        return cls(**values)
