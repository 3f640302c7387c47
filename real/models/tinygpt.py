"""tiny-gpt: the small GPT the testbed trains for real, layer by layer.

Planner layers: 0 = embedding (tokens + positions), 1..blocks = pre-LayerNorm transformer
blocks (causal self-attention, 4h GELU MLP), blocks + 1 = head (final LayerNorm and an
untied output projection, so no parameter is shared across stages). No dropout: runs are
deterministic. Each layer is initialised from its own seed (`seed`, layer index), so a
stage can build just its layers and get exactly the weights a single-process model has.

Data (`batch`): sequences t_k = (start + stride k) mod V with a seeded random start and
stride per sample, from a generator seeded by (seed, step): every rank can build any
step's global batch by itself, no downloads, and the model has something to learn.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import TinyGptSpec

INIT_STD = 0.02
DTYPES = {"float32": torch.float32, "float64": torch.float64}  # RunConfig.dtype -> torch
MAX_STRIDE = 7


class Embedding(nn.Module):
    def __init__(self, spec: TinyGptSpec):
        super().__init__()
        self.tokens = nn.Embedding(spec.vocab, spec.hidden)
        self.positions = nn.Embedding(spec.seq_len, spec.hidden)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.tokens(ids) + self.positions(positions)[None]


class Block(nn.Module):
    def __init__(self, spec: TinyGptSpec):
        super().__init__()
        h = spec.hidden
        self.heads = spec.heads
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h)
        self.fc = nn.Linear(h, 4 * h)
        self.out = nn.Linear(4 * h, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        shape = (b, s, self.heads, h // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, h))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Head(nn.Module):
    def __init__(self, spec: TinyGptSpec):
        super().__init__()
        self.ln = nn.LayerNorm(spec.hidden)
        self.logits = nn.Linear(spec.hidden, spec.vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits(self.ln(x))


def _init(module: nn.Module, generator: torch.Generator) -> None:
    """GPT-2 style: weights N(0, 0.02), biases 0, LayerNorm gains 1 (drawn in a fixed
    order from the layer's own generator)."""
    with torch.no_grad():
        for name, param in module.named_parameters():
            if name.endswith("bias"):
                param.zero_()
            elif name.split(".")[0].startswith("ln"):
                param.fill_(1.0)
            else:
                param.normal_(0.0, INIT_STD, generator=generator)


def build_layer(spec: TinyGptSpec, index: int, seed: int, dtype: torch.dtype = torch.float32) -> nn.Module:
    """Planner layer `index` of tiny-gpt with its deterministic initial weights."""
    if not 0 <= index < spec.num_layers:
        raise IndexError(f"tiny-gpt has layers 0..{spec.num_layers - 1}, asked for {index}")
    if index == 0:
        layer: nn.Module = Embedding(spec)
    elif index == spec.num_layers - 1:
        layer = Head(spec)
    else:
        layer = Block(spec)
    generator = torch.Generator().manual_seed(seed * 1_000_003 + index)
    _init(layer, generator)
    return layer.to(dtype)


def build_layers(
    spec: TinyGptSpec, first: int, end: int, seed: int, dtype: torch.dtype = torch.float32
) -> nn.Sequential:
    """Layers [first, end) as one module (a pipeline stage, or the whole model)."""
    return nn.Sequential(*(build_layer(spec, i, seed, dtype) for i in range(first, end)))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over every token of the (micro)batch."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class TokenShape(Protocol):
    """What the synthetic data needs of a model: its vocabulary and sequence length."""

    @property
    def vocab(self) -> int: ...

    @property
    def seq_len(self) -> int: ...


def batch(spec: TokenShape, seed: int, step: int, num_samples: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets [num_samples, seq_len] (int64) of step `step`'s global batch."""
    generator = torch.Generator().manual_seed(seed * 7_919 + step + 1)
    start = torch.randint(0, spec.vocab, (num_samples, 1), generator=generator)
    stride = torch.randint(1, MAX_STRIDE + 1, (num_samples, 1), generator=generator)
    positions = torch.arange(spec.seq_len + 1)[None]
    tokens = (start + stride * positions) % spec.vocab
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def layer_param_count(spec: TinyGptSpec, index: int) -> int:
    return sum(p.numel() for p in build_layer(spec, index, 0).parameters())
