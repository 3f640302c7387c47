"""Hugging Face decoder models cut into the planner's layers: GPT-2, and Llama with the
families of its shape (Mistral, Qwen2: `LLAMA_LIKE`).

`hf:FAMILY:PRESET` names a randomly initialised model of a preset size (`PRESETS`), and
`hf:FAMILY:DIR` one whose shape is read from a local `DIR/config.json`, with the trained
weights in DIR's safetensors files where it has them (`hf_weights`); nothing is ever
downloaded: a name that would need the model hub is refused in one line saying how to
pass a local directory. transformers is the optional extra `[hf]`.

Planner layers, as tiny-gpt's: 0 = the embeddings (GPT-2: tokens and positions; Llama:
tokens), 1..L = the decoder blocks, L + 1 = the final norm and the output projection. A
block is the transformers class itself (`GPT2Block`, `LlamaDecoderLayer`,
`MistralDecoderLayer`, `Qwen2DecoderLayer`); their rotary embedding has no weights, so each
block computes its own. Attention is full causal attention: a sliding window shorter than
the sequence (Mistral's and Qwen2's option) is refused, as transformers applies it through
the whole model's mask, which a block alone does not get. Each layer is initialised from
its own generator (`seed`, layer index; GPT-2's scheme: weights N(0, 0.02), biases 0, norm
gains 1), so a stage builds only its layers and gets exactly the weights a single-process
model has.

The Llama-shaped families' RMSNorm is `RMSNorm` below, transformers' computation in the
input's precision where that is finer than float32: theirs casts to float32 (an upcast for
half precision), which in float64 rounds every normalised hidden state to float32, so that
two summation orders (a pipeline's microbatches, one process's whole batch) differing in
the 16th digit flip some float32 roundings: a 4-worker `hf:llama:small` job trained 8 steps
then differed from one process by 3.6e-7 in its parameters (8.6e-10 in its losses), GPT-2
(whose LayerNorm keeps float64) by 2.4e-12. In float32, bfloat16 and float16 it computes
exactly what transformers' does. Their rotary embedding also computes in float32, but from
positions alone, so every rank computes the same values and nothing diverges.

Tied embeddings (`tie_word_embeddings`: GPT-2's presets, the others' untied as Llama 2 and
3 are; a config.json that does not say gets its transformers config class's default,
`DEFAULT_TIED`: tied for GPT-2 only):
the head's projection starts as a copy of the token embedding, and every step the two
copies' gradients are summed over every rank holding either (`real.worker.gradsync`) before
each owner's optimizer step. Equal start, equal gradients and AdamW's element-wise update
keep the copies equal: the model trains as the single-process model whose head and
embedding are one tensor (`TIE` names the pair; `real.models.reference` ties them).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from planner.input_files import MIB, InputFileError, read_json, shown

from ..config import ConfigError
from . import hf_weights

# the Llama-shaped families: their transformers module and class prefix (decoder layer,
# rotary embedding, RMSNorm, config and causal-LM classes alike, checkpoints named alike)
LLAMA_LIKE = {"llama": ("llama", "Llama"), "mistral": ("mistral", "Mistral"), "qwen2": ("qwen2", "Qwen2")}
FAMILIES = ("gpt2", *LLAMA_LIKE)
# a config.json that does not say `tie_word_embeddings` gets its config class's default
DEFAULT_TIED = {"gpt2": True, "llama": False, "mistral": False, "qwen2": False}
INIT_STD = 0.02
# bounds on a config.json's sizes: beyond them a build would exhaust memory, not fail cleanly
MAX_SIZE = 10_000_000  # any one size (vocabulary, positions, width, heads, blocks)
MAX_PARAMETERS = 2_000_000_000  # 32 GB of float32 weights, gradients and Adam's two moments
BYTES_PER_PARAMETER = 16
# the tied pair: (layer, parameter) of the token embedding, then of the head's projection
TIE_EMBEDDING, TIE_HEAD = "tokens.weight", "logits.weight"


@dataclass(frozen=True)
class HfShape:
    """The sizes a decoder model is built from."""

    family: str
    vocab: int
    seq_len: int
    hidden: int
    heads: int
    blocks: int
    kv_heads: int | None = None  # Llama's grouped-query heads (None: as many as heads)
    intermediate: int | None = None  # Llama's MLP width (None: 4 x hidden, rounded as Llama's)
    tied: bool = False  # the head's projection is the token embedding (`tie_word_embeddings`)
    weights: str | None = None  # a directory of safetensors weights (`hf_weights`; None: from the seed)

    @property
    def num_layers(self) -> int:
        return self.blocks + 2

    @property
    def tie(self) -> tuple[tuple[int, str], tuple[int, str]] | None:
        """((layer, parameter) of the embedding, of the head) when tied, else None."""
        return ((0, TIE_EMBEDDING), (self.num_layers - 1, TIE_HEAD)) if self.tied else None


PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(vocab=128, seq_len=16, hidden=32, heads=4, blocks=2),
    "small": dict(vocab=512, seq_len=64, hidden=128, heads=4, blocks=4),
    # tiny-gpt's validated shape: compute, not the per-message runtime, sets the pace
    "base": dict(vocab=256, seq_len=128, hidden=256, heads=4, blocks=4),
}


def parse(name: str) -> HfShape:
    """`hf:FAMILY:PRESET` or `hf:FAMILY:DIR` (a local directory holding config.json)."""
    parts = name.split(":", 2)
    if len(parts) != 3 or parts[0] != "hf" or parts[1] not in FAMILIES:
        raise ConfigError(
            f"model {name!r}: expected hf:FAMILY:PRESET or hf:FAMILY:DIR, FAMILY one of {', '.join(FAMILIES)}"
        )
    family, what = parts[1], parts[2]
    if what in PRESETS:
        return HfShape(family, **PRESETS[what], tied=family == "gpt2")
    directory = Path(what)
    if not (directory / "config.json").is_file():
        raise ConfigError(
            f"model {name!r}: {what!r} is neither a preset ({', '.join(PRESETS)}) nor a local directory with a "
            "config.json; nothing is downloaded: save the model's files (config.json) to a directory and pass hf:"
            f"{family}:DIR"
        )
    try:
        cfg = read_json(directory / "config.json", what="a model's config.json", cap_bytes=MIB)
    except InputFileError as exc:
        raise ConfigError(f"model {name!r}: {exc}") from None
    shape = _from_config_json(family, cfg, name)
    return shape if hf_weights.find(directory) is None else replace(shape, weights=str(directory))


def _size(cfg: dict[str, Any], key: str, name: str, *, minimum: int = 1) -> int:
    """A size from config.json: a whole number in [minimum, MAX_SIZE] (2.7 is not 2)."""
    value = cfg[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_SIZE:
        raise ConfigError(
            f"model {name!r}: config.json {key} must be a whole number in [{minimum}, {MAX_SIZE:,}], got {shown(value)}"
        )
    return value


def parameters(shape: HfShape) -> int:
    """About how many parameters `shape` builds: the embeddings and head, and per block the
    attention's four projections (fewer with grouped-query heads) and the MLP."""
    kv = shape.kv_heads or shape.heads
    attention = 2 * shape.hidden * shape.hidden + 2 * shape.hidden * (shape.hidden * kv // shape.heads)
    mlp = (3 if shape.family != "gpt2" else 2) * shape.hidden * (shape.intermediate or 4 * shape.hidden)
    return (
        shape.vocab * shape.hidden * (1 if shape.tied else 2)
        + shape.seq_len * shape.hidden
        + shape.blocks * (attention + mlp)
    )


def _from_config_json(family: str, cfg: Any, name: str) -> HfShape:
    if not isinstance(cfg, dict):
        raise ConfigError(f"model {name!r}: config.json must hold a JSON object, got {type(cfg).__name__}")
    if family == "gpt2":
        keys: tuple[str, ...] = ("vocab_size", "n_positions", "n_embd", "n_head", "n_layer")
    else:
        keys = ("vocab_size", "max_position_embeddings", "hidden_size", "num_attention_heads", "num_hidden_layers")
    missing = [k for k in keys if k not in cfg]
    if missing:
        raise ConfigError(f"model {name!r}: config.json lacks {', '.join(missing)} for a {family} model")
    vocab, seq_len, hidden, heads, blocks = (_size(cfg, k, name, minimum=2 if k == "vocab_size" else 1) for k in keys)
    if hidden % heads:
        raise ConfigError(f"model {name!r}: config.json's hidden size {hidden} is not a multiple of its {heads} heads")
    kv_heads = _size(cfg, "num_key_value_heads", name) if cfg.get("num_key_value_heads") is not None else None
    if kv_heads is not None and heads % kv_heads:
        raise ConfigError(
            f"model {name!r}: config.json's {heads} heads are not a multiple of its {kv_heads} key-value heads"
        )
    intermediate = _size(cfg, "intermediate_size", name) if cfg.get("intermediate_size") is not None else None
    tied = bool(cfg.get("tie_word_embeddings", DEFAULT_TIED[family]))
    window = cfg.get("sliding_window") if family == "mistral" or cfg.get("use_sliding_window") else None
    if window is not None and int(window) < seq_len:
        raise ConfigError(
            f"model {name!r}: sliding-window attention ({window} of {seq_len} positions) is not built here; "
            "set sliding_window to null or to the sequence length in config.json"
        )
    if family != "gpt2":
        shape = HfShape(family, vocab, seq_len, hidden, heads, blocks, kv_heads, intermediate, tied)
    else:
        shape = HfShape(family, vocab, seq_len, hidden, heads, blocks, tied=tied)
    count = parameters(shape)
    if count > MAX_PARAMETERS:
        raise ConfigError(
            f"model {name!r}: config.json describes about {count:,} parameters, past the {MAX_PARAMETERS:,} this "
            f"backend trains (each worker holds its layers with their gradients and optimizer state, "
            f"{BYTES_PER_PARAMETER} bytes a parameter in float32, on the CPU)"
        )
    return shape


def _transformers():
    try:
        import transformers
    except ImportError:
        raise ConfigError("Hugging Face models need transformers: pip install -e '.[hf]'") from None
    return transformers


def hf_config(shape: HfShape) -> Any:
    """The transformers config of `shape`: no dropout (runs are deterministic), the head
    tied as `shape` says, PyTorch's scaled-dot-product attention (causal when no mask is
    given)."""
    tf = _transformers()
    if shape.family == "gpt2":
        return _with_sdpa(tf.GPT2Config(
            vocab_size=shape.vocab, n_positions=shape.seq_len, n_embd=shape.hidden, n_head=shape.heads,
            n_layer=shape.blocks, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=shape.tied,
        ))  # fmt: skip
    prefix = LLAMA_LIKE[shape.family][1]
    window = {"sliding_window": None} if shape.family == "mistral" else {}  # full causal attention
    return _with_sdpa(getattr(tf, f"{prefix}Config")(
        vocab_size=shape.vocab, max_position_embeddings=shape.seq_len, hidden_size=shape.hidden,
        num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads or shape.heads,
        intermediate_size=shape.intermediate or 4 * shape.hidden, num_hidden_layers=shape.blocks,
        attention_dropout=0.0, tie_word_embeddings=shape.tied, **window,
    ))  # fmt: skip


def _with_sdpa(config: Any) -> Any:
    config._attn_implementation = "sdpa"
    return config


def _llama_like(shape: HfShape, what: str) -> Any:
    """The transformers class `{Prefix}{what}` of a Llama-shaped family (`LLAMA_LIKE`)."""
    import importlib

    module, prefix = LLAMA_LIKE[shape.family]
    return getattr(importlib.import_module(f"transformers.models.{module}.modeling_{module}"), f"{prefix}{what}")


class Embeddings(nn.Module):
    def __init__(self, shape: HfShape, config: Any):
        super().__init__()
        self.tokens = nn.Embedding(shape.vocab, shape.hidden)
        self.positions = nn.Embedding(shape.seq_len, shape.hidden) if shape.family == "gpt2" else None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(ids)
        if self.positions is not None:
            x = x + self.positions(torch.arange(ids.shape[1], device=ids.device))[None]
        return x


class RMSNorm(nn.Module):
    """transformers' Llama-family RMSNorm (same `weight`, same `variance_epsilon`) computing
    in the input's dtype where that is finer than float32 (module docstring)."""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        compute = x.to(torch.promote_types(x.dtype, torch.float32))
        variance = compute.pow(2).mean(-1, keepdim=True)
        return self.weight * (compute * torch.rsqrt(variance + self.variance_epsilon)).to(x.dtype)


class Block(nn.Module):
    """One transformers decoder block; Llama's also computes its rotary embedding."""

    def __init__(self, shape: HfShape, config: Any, index: int):
        super().__init__()
        if shape.family == "gpt2":
            from transformers.models.gpt2.modeling_gpt2 import GPT2Block

            self.block: nn.Module = GPT2Block(config, layer_idx=index)
            self.rotary: nn.Module | None = None
        else:
            block = _llama_like(shape, "DecoderLayer")(config, layer_idx=index)
            block.input_layernorm = RMSNorm(shape.hidden, config.rms_norm_eps)
            block.post_attention_layernorm = RMSNorm(shape.hidden, config.rms_norm_eps)
            self.block = block
            self.rotary = _llama_like(shape, "RotaryEmbedding")(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.rotary is None:
            out = self.block(x)
        else:
            positions = torch.arange(x.shape[1], device=x.device)[None]
            out = self.block(x, position_ids=positions, position_embeddings=self.rotary(x, positions))
        return out[0] if isinstance(out, tuple) else out


class Head(nn.Module):
    def __init__(self, shape: HfShape, config: Any):
        super().__init__()
        if shape.family == "gpt2":
            self.norm: nn.Module = nn.LayerNorm(shape.hidden, eps=config.layer_norm_epsilon)
        else:
            self.norm = RMSNorm(shape.hidden, config.rms_norm_eps)
        self.logits = nn.Linear(shape.hidden, shape.vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits(self.norm(x))


def _init(module: nn.Module, generator: torch.Generator) -> None:
    """GPT-2's scheme, drawn in a fixed order from the layer's own generator."""
    with torch.no_grad():
        for name, param in module.named_parameters():
            if name.endswith("bias"):
                param.zero_()
            elif param.dim() == 1:  # LayerNorm / RMSNorm gains
                param.fill_(1.0)
            else:
                param.normal_(0.0, INIT_STD, generator=generator)


def build_layer(shape: HfShape, index: int, seed: int, dtype: torch.dtype = torch.float32) -> nn.Module:
    """Planner layer `index` with its deterministic initial weights."""
    if not 0 <= index < shape.num_layers:
        raise IndexError(f"{shape.family} model has layers 0..{shape.num_layers - 1}, asked for {index}")
    config = hf_config(shape)
    if index == 0:
        layer: nn.Module = Embeddings(shape, config)
    elif index == shape.num_layers - 1:
        layer = Head(shape, config)
    else:
        layer = Block(shape, config, index - 1)
    if shape.weights is not None:  # trained weights: the seed sets the data only
        files = _weight_files(shape.weights)
        hf_weights.load_layer(layer, shape.family, index, shape.num_layers, shape.tied, files)
        return layer.to(dtype)
    _init(layer, torch.Generator().manual_seed(seed * 1_000_003 + index))
    if shape.tied and isinstance(layer, Head):  # the head starts as the embedding's copy
        embedding = build_layer(shape, 0, seed, torch.float64)
        assert isinstance(embedding, Embeddings)
        with torch.no_grad():
            layer.logits.weight.copy_(embedding.tokens.weight)
    return layer.to(dtype)


@lru_cache(maxsize=8)
def _weight_files(directory: str) -> hf_weights.WeightFiles:
    files = hf_weights.find(Path(directory))
    if files is None:
        raise ConfigError(f"{directory}: its weights are gone")
    return files


def build_layers(shape: HfShape, first: int, end: int, seed: int, dtype: torch.dtype = torch.float32) -> nn.Sequential:
    """Layers [first, end) as one module (a pipeline stage, or the whole model)."""
    return nn.Sequential(*(build_layer(shape, i, seed, dtype) for i in range(first, end)))


def as_transformers_model(shape: HfShape, layers: nn.Sequential) -> nn.Module:
    """The transformers causal-LM model (`GPT2LMHeadModel`, `LlamaForCausalLM`) holding the
    same weights as `layers` (all of them): the single-process model users know, to check
    that the planner's cut computes what it computes (tied as `shape` says)."""
    tf = _transformers()
    config = hf_config(shape)
    kind = tf.GPT2LMHeadModel if shape.family == "gpt2" else getattr(tf, f"{LLAMA_LIKE[shape.family][1]}ForCausalLM")
    model = kind(config)
    embeddings, *blocks, head = list(layers)
    assert isinstance(embeddings, Embeddings) and isinstance(head, Head), "internal: not a whole model's layers"
    inner: Any = model.transformer if shape.family == "gpt2" else model.model
    with torch.no_grad():
        if shape.family == "gpt2":
            inner.wte.weight.copy_(embeddings.tokens.weight)
            assert embeddings.positions is not None
            inner.wpe.weight.copy_(embeddings.positions.weight)
            inner.ln_f.load_state_dict(head.norm.state_dict())
            stack = inner.h
        else:
            inner.embed_tokens.weight.copy_(embeddings.tokens.weight)
            inner.norm.load_state_dict(head.norm.state_dict())
            stack = inner.layers
        for mine, theirs in zip(blocks, stack):
            assert isinstance(mine, Block)
            theirs.load_state_dict(mine.block.state_dict())
        if not shape.tied:
            model.lm_head.weight.copy_(head.logits.weight)
    if shape.tied and model.lm_head.weight is not (model.get_input_embeddings().weight):
        raise RuntimeError("internal error: transformers did not tie the head to the embedding")
    return model.to(next(layers.parameters()).dtype).eval()
