"""From a run configuration to the planner's inputs and its plan (no torch here).

- The profile: a measured tiny-gpt profile (`ooblab profile`, Oobleck format), else an
  analytic estimate of tiny-gpt on a CPU core (`estimate_tiny_gpt`: FLOPs / `cpu_flops`,
  exact parameter bytes, good enough for quick planning, not for predictions); for emulated
  compute also any built-in analytic model or profile directory the planner reads.
- One-GPU stages only: the backend cannot shard a layer over a node's GPUs, so in-node
  all-reduce times beyond d = 1 are dropped before planning and the planner's templates use
  one GPU per stage (`ModelProfile.stage_gpu_counts`). With g > 1 a node then holds g
  consecutive one-GPU stages.
- The cluster: for tiny-gpt a CPU "GPU" of `gpu_memory_gb` (the planner's memory check
  still applies), otherwise the planner's GPU table (default v100-16gb, as `ooblab plan`).
- Every JSON file of a profile directory is read and checked before planning
  (`check_profile_files`), including those the planner itself does not use (Oobleck's
  `model_args.json`), so a corrupt file is reported rather than silently ignored.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from planner.catalog import resolve_profile
from planner.errors import PlannerError, ProfileError
from planner.hardware import GBIT_PER_S, GpuSpec, make_cluster
from planner.oobleck_format import load_oobleck_profile
from planner.plan import ExecutionPlan, JobSpec
from planner.planner import Planner
from planner.profile import LayerProfile, ModelProfile

from ..config import TINY_GPT, RunConfig, TinyGptSpec
from ..models.family import Trained, is_hf, trained
from ..models.tokens import check as check_tokens

DEFAULT_MODEL_GPU = "v100-16gb"
CPU_FLOPS = 5e9  # one core's sustained FLOP/s in the analytic estimate
CPU_LINK_BYTES_PER_S = 1e9  # loopback gloo, roughly, for the all-reduce model
DTYPE_BYTES = {"float32": 4, "float64": 8}


def tiny_gpt_layer_params(spec: TinyGptSpec) -> list[int]:
    """Parameters per planner layer of tiny-gpt (matches `real.tinygpt`, checked in tests).

    Embedding: token V h + position s h. Block: LayerNorms 4 h, QKV 3 h^2 + 3 h, projection
    h^2 + h, MLP 8 h^2 + 5 h: 12 h^2 + 13 h. Head: LayerNorm 2 h + output V h (no bias).
    """
    v, s, h = spec.vocab, spec.seq_len, spec.hidden
    return [v * h + s * h] + [12 * h * h + 13 * h] * spec.blocks + [2 * h + v * h]


def estimate_tiny_gpt(
    spec: TinyGptSpec, microbatch_size: int, dtype: str = "float32", cpu_flops: float = CPU_FLOPS
) -> ModelProfile:
    """Analytic tiny-gpt profile: Megatron FLOP counts (as `planner.analytic`) over
    `cpu_flops`; state, activations and outputs as `_transformer_profile` has them."""
    b, s, h = microbatch_size, spec.seq_len, spec.hidden
    flops = [2 * b * s * h] + [24 * b * s * h * h + 4 * b * s * s * h] * spec.blocks + [2 * b * s * h * spec.vocab]
    return _transformer_profile(TINY_GPT, spec, microbatch_size, dtype, tiny_gpt_layer_params(spec), flops, cpu_flops)


def estimate_trained(
    model: Trained, microbatch_size: int, dtype: str = "float32", cpu_flops: float = CPU_FLOPS
) -> ModelProfile:
    """Analytic profile of any model the backend trains (a Hugging Face one), from its
    layers' parameter counts: 2 FLOPs per parameter and token forward (plus the attention
    scores, 4 b s^2 h, in a block); the rest as tiny-gpt's (`_transformer_profile`)."""
    params = model.layer_params()
    tokens = microbatch_size * model.seq_len
    attention = 4 * tokens * model.seq_len * model.hidden
    flops = [2 * tokens * model.hidden] + [2 * tokens * p + attention for p in params[1:-1]] + [2 * tokens * params[-1]]
    return _transformer_profile(model.name, model, microbatch_size, dtype, params, flops, cpu_flops)


def _transformer_profile(
    name: str, shape: Any, microbatch_size: int, dtype: str, params: list[int], flops: list[int], cpu_flops: float
) -> ModelProfile:
    """The analytic profile of a decoder model (embedding, blocks, head) from each layer's
    parameters and forward FLOPs (`shape`: its seq_len, hidden, heads and vocab): backward =
    2 x forward (no recomputation), AdamW state = 2 x parameters in the training dtype,
    activations kept s b h (34 + 5 a s / h) / 2 elements per block."""
    if dtype not in DTYPE_BYTES:
        raise PlannerError(f"unknown dtype {dtype!r}")
    e = DTYPE_BYTES[dtype]
    b, s, h, a, v = microbatch_size, shape.seq_len, shape.hidden, shape.heads, shape.vocab
    blocks = len(params) - 2
    hidden_bytes = b * s * h * e
    keep = [8 * b * s] + [int(s * b * h * (34 + 5 * a * s / h) / 2 * e)] * blocks + [hidden_bytes + b * s * v * e]
    out = [hidden_bytes] * (blocks + 1) + [e]
    names = ["embedding"] + [f"block{i}" for i in range(blocks)] + ["head"]
    layers = tuple(
        LayerProfile(
            name=layer,
            forward_s=f / cpu_flops,
            backward_s=2 * f / cpu_flops,
            param_bytes=p * e,
            grad_bytes=p * e,
            optimizer_bytes=2 * p * e,
            activation_bytes=k,
            output_bytes=o,
        )
        for layer, f, p, k, o in zip(names, flops, params, keep, out)
    )
    return ModelProfile(name, microbatch_size, layers, source=f"estimate:{name}@cpu")


def one_gpu_stages(profile: ModelProfile) -> ModelProfile:
    """The profile without in-node all-reduce times, so the planner only makes stages the
    backend can execute (one GPU each)."""
    if all(not layer.allreduce_in_node_s for layer in profile.layers):
        return profile
    layers = tuple(replace(layer, allreduce_in_node_s=()) for layer in profile.layers)
    return replace(profile, layers=layers)


def check_profile_files(directory: str | Path) -> None:
    """Every `*.json` of a profile directory parses; `model_args.json` is an object.
    Raises ProfileError naming the file (the planner checks the contents it uses)."""
    directory = Path(directory)
    if not directory.is_dir():
        return  # not a directory: the planner reports it (or it names a built-in model)
    for path in sorted(directory.glob("*.json")):
        try:
            value = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ProfileError(
                f"{path}: not a readable JSON file ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
            ) from None
        if path.name == "model_args.json" and not isinstance(value, dict):
            raise ProfileError(f"{path}: expected an object of the model's arguments, got {type(value).__name__}")


def resolve_run_profile(config: RunConfig) -> ModelProfile:
    """The profile the planner (and, in emulated mode, the sleeping layers) use."""
    for directory in (config.profile_dir, config.model):
        if directory:
            check_profile_files(directory)
    model = trained(config) if config.compute == "real" else None
    if model is not None and model.data is not None:  # before any worker starts: one line naming the problem
        check_tokens(model.data, model.vocab, model.seq_len)
    if model is not None and is_hf(config.model):
        if config.profile_dir:  # measured by `ooblab profile --model hf:...`
            profile = load_oobleck_profile(config.profile_dir, config.microbatch_size, name=model.name)
            if profile.num_layers != model.num_layers:
                raise PlannerError(
                    f"{config.profile_dir} profiles {profile.num_layers} layers, {model.name} has {model.num_layers}"
                )
        else:
            profile = estimate_trained(model, config.microbatch_size, config.dtype)
    elif config.model == TINY_GPT:
        if config.profile_dir:
            profile = load_oobleck_profile(config.profile_dir, config.microbatch_size, name=TINY_GPT)
            if profile.num_layers != config.tiny.num_layers:
                raise PlannerError(
                    f"{config.profile_dir} profiles {profile.num_layers} layers, tiny-gpt with "
                    f"{config.tiny.blocks} blocks has {config.tiny.num_layers}"
                )
        else:
            profile = estimate_tiny_gpt(config.tiny, config.microbatch_size, config.dtype)
    else:
        if config.profile_dir:
            raise PlannerError("--profile applies to tiny-gpt; pass a profile directory as --model instead")
        profile = resolve_profile(config.model, config.gpu or DEFAULT_MODEL_GPU, config.microbatch_size)
    return one_gpu_stages(profile)


def run_cluster(config: RunConfig):
    """The planner's cluster for this run."""
    if config.gpu is None and (config.model == TINY_GPT or is_hf(config.model)):
        gbps = config.inter_node_gbps or CPU_LINK_BYTES_PER_S / GBIT_PER_S
        spec = GpuSpec(
            "cpu",
            peak_flops=CPU_FLOPS,
            memory_bytes=int(config.gpu_memory_gb * 2**30),
            intra_node_bw_bytes_per_s=CPU_LINK_BYTES_PER_S,
            inter_node_bw_bytes_per_s=gbps * GBIT_PER_S,
            efficiency=1.0,
        )
        return make_cluster(spec, config.nodes, config.gpus_per_node, reserved_bytes=0)
    return make_cluster(
        config.gpu or DEFAULT_MODEL_GPU, config.nodes, config.gpus_per_node, inter_node_gbps=config.inter_node_gbps
    )


def make_planner(config: RunConfig, profile: ModelProfile | None = None) -> Planner:
    profile = profile or resolve_run_profile(config)
    job = JobSpec(config.global_batch, config.microbatch_size, config.fault_tolerance)
    return Planner(profile, run_cluster(config), job)


def make_plan(planner: Planner, config: RunConfig, node_names: list[str]) -> ExecutionPlan:
    """The planner's plan over `node_names`: `instantiate` (fastest, >= f + 1 pipelines)
    or, with `config.pipelines`, `build_plan` over consecutive groups of those sizes."""
    if len(node_names) != config.nodes:
        raise PlannerError(f"{len(node_names)} nodes registered, the job expects {config.nodes}")
    if config.pipelines is None:
        return planner.instantiate(node_names)
    if len(config.pipelines) < config.fault_tolerance + 1:
        raise PlannerError(
            f"{len(config.pipelines)} pipeline(s) cannot tolerate f = {config.fault_tolerance} failures (need f + 1)"
        )
    groups, start = [], 0
    for size in config.pipelines:
        groups.append(node_names[start : start + size])
        start += size
    return planner.build_plan(groups)
