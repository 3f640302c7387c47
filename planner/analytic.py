"""Analytic layer profiles of standard transformers, so that everything runs without a GPU.

A model is an embedding layer, `num_blocks` transformer blocks and an output head (the
layering Oobleck's profiler uses: GPT-2 XL's 48 blocks make 50 layers). With microbatch b,
sequence s, hidden h, heads a, vocabulary V and P parameters per layer:

FLOPs of one forward pass (Narayanan et al., SC'21; one multiply-add = 2 FLOPs)
- block: 24 b s h^2 (QKV, projection, 4h MLP) + 4 b s^2 h (scores and weighted values)
- GPT head: 2 b s h V (logits); BERT head: 2 b s h^2 (transform) + 2 b s h V (decoder)
- embedding: 2 b s h (a lookup plus position add: memory bound, charged as a tiny compute)
Backward is 2x forward; with activation recomputation (the default, needed for the large
models to fit) the forward is run again before backward, so backward = 3x forward.
Time = FLOPs / (peak_flops * efficiency) of the GPU (`hardware`).

Parameters
- block: 12 h^2 + 13 h; GPT embedding: V h + s h; GPT head: V h + 2 h (final LayerNorm and an
  untied output projection, as pipeline stages hold their own copy);
  BERT embedding: V h + s h + 2 h + 2 h; BERT head: h^2 + 3 h + V h + V.
Model state, mixed-precision Adam (Rajbhandari et al., ZeRO): fp16 parameters 2 P, fp16
gradients 2 P, fp32 master weights + two moments 12 P: 16 bytes per parameter.

Activations (fp16)
- with recomputation a layer keeps only its input per in-flight microbatch: 2 b s h bytes
  (the embedding keeps its int64 token ids: 8 b s); recomputing a block briefly needs all
  its activations, s b h (34 + 5 a s / h) bytes (Korthikanti et al., MLSys'23), charged as
  workspace; the head's workspace is its logits in fp16 and fp32, 6 b s V.
- without recomputation a block keeps s b h (34 + 5 a s / h) per in-flight microbatch.
- every layer sends 2 b s h bytes to the next (the head sends a scalar loss).

Tensor parallelism inside a node (a stage on d GPUs, Megatron-style): each block all-reduces
its 2 b s h activation twice per pass, embedding and head once; a ring all-reduce over d
GPUs moves 2 (d - 1) / d of the data over the intra-node link.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import PlannerError
from .hardware import GpuSpec, get_gpu, ring_allreduce_s
from .profile import LayerProfile, ModelProfile

FP16 = 2
MAX_STAGE_GPUS = 16  # in-node all-reduce times are tabulated for d = 2, 4, 8, 16


@dataclass(frozen=True)
class TransformerShape:
    """Published shape of a transformer (Brown et al. 2020 Table 2.1; Devlin et al. 2019;
    Radford et al. 2019)."""

    name: str
    family: str  # "gpt" or "bert"
    num_blocks: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int

    @property
    def block_params(self) -> int:
        h = self.hidden
        return 12 * h * h + 13 * h

    @property
    def embedding_params(self) -> int:
        h = self.hidden
        extra = 4 * h if self.family == "bert" else 0
        return self.vocab * h + self.seq_len * h + extra

    @property
    def head_params(self) -> int:
        h, v = self.hidden, self.vocab
        if self.family == "bert":
            return h * h + 3 * h + v * h + v
        return v * h + 2 * h

    @property
    def num_params(self) -> int:
        return self.embedding_params + self.num_blocks * self.block_params + self.head_params


MODEL_SHAPES: dict[str, TransformerShape] = {
    s.name: s
    for s in (
        TransformerShape("gpt3-350m", "gpt", 24, 1024, 16, 2048, 50257),
        TransformerShape("gpt3-1.3b", "gpt", 24, 2048, 24, 2048, 50257),
        TransformerShape("gpt3-2.7b", "gpt", 32, 2560, 32, 2048, 50257),
        TransformerShape("gpt3-6.7b", "gpt", 32, 4096, 32, 2048, 50257),
        TransformerShape("gpt3-13b", "gpt", 40, 5140, 40, 2048, 50257),
        TransformerShape("gpt3-175b", "gpt", 96, 12288, 96, 2048, 50257),
        TransformerShape("bert-large", "bert", 24, 1024, 16, 512, 30522),
        TransformerShape("gpt2-xl", "gpt", 48, 1600, 25, 1024, 50257),
    )
}


def get_shape(name: str) -> TransformerShape:
    try:
        return MODEL_SHAPES[name]
    except KeyError:
        raise PlannerError(f"unknown model {name!r}; built-in models: {', '.join(MODEL_SHAPES)}") from None


def _layer(
    name: str,
    flops: float,
    params: int,
    activation_bytes: int,
    output_bytes: int,
    workspace_bytes: int,
    tp_allreduces: int,
    tp_bytes: int,
    gpu: GpuSpec,
    backward_factor: float,
) -> LayerProfile:
    forward_s = flops / gpu.effective_flops
    in_node = {}
    d = 2
    while d <= MAX_STAGE_GPUS:
        in_node[d] = tp_allreduces * ring_allreduce_s(tp_bytes, d, gpu.intra_node_bw_bytes_per_s)
        d *= 2
    return LayerProfile(
        name=name,
        forward_s=forward_s,
        backward_s=backward_factor * forward_s,
        param_bytes=FP16 * params,
        grad_bytes=FP16 * params,
        optimizer_bytes=12 * params,
        activation_bytes=activation_bytes,
        output_bytes=output_bytes,
        workspace_bytes=workspace_bytes,
        allreduce_in_node_s=tuple(in_node.items()),
    )


def analytic_profile(
    model: str | TransformerShape,
    gpu: str | GpuSpec,
    microbatch_size: int = 1,
    *,
    recompute: bool = True,
) -> ModelProfile:
    """Profile of a built-in (or given) transformer shape on a GPU type."""
    shape = get_shape(model) if isinstance(model, str) else model
    spec = get_gpu(gpu) if isinstance(gpu, str) else gpu
    if microbatch_size < 1:
        raise PlannerError(f"microbatch size must be >= 1, got {microbatch_size}")
    b, s, h, a, v = microbatch_size, shape.seq_len, shape.hidden, shape.heads, shape.vocab
    hidden_bytes = FP16 * b * s * h
    full_block_activation = s * b * h * (34 + 5 * a * s // h)
    backward_factor = 3.0 if recompute else 2.0

    def layer(name, flops, params, keep, out, workspace, allreduces):
        return _layer(name, flops, params, keep, out, workspace, allreduces, hidden_bytes, spec, backward_factor)

    layers = [layer("embedding", 2 * b * s * h, shape.embedding_params, 8 * b * s, hidden_bytes, 0, 1)]
    block_flops = 24 * b * s * h * h + 4 * b * s * s * h
    for index in range(shape.num_blocks):
        if recompute:
            keep, workspace = hidden_bytes, full_block_activation
        else:
            keep, workspace = full_block_activation, 0
        layers.append(layer(f"block{index}", block_flops, shape.block_params, keep, hidden_bytes, workspace, 2))
    head_flops = 2 * b * s * h * v + (2 * b * s * h * h if shape.family == "bert" else 0)
    logits_bytes = 6 * b * s * v
    head_keep, head_workspace = (hidden_bytes, logits_bytes) if recompute else (hidden_bytes + logits_bytes, 0)
    layers.append(layer("head", head_flops, shape.head_params, head_keep, 4, head_workspace, 1))
    return ModelProfile(
        name=shape.name,
        microbatch_size=microbatch_size,
        layers=tuple(layers),
        source=f"analytic:{shape.name}@{spec.name}" + ("" if recompute else ",no-recompute"),
    )
