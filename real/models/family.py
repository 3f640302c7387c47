"""Which model a run trains, as the backend needs it: its planner layers, built per stage.

`trained(config)`: tiny-gpt (`real.models.tinygpt`, the default) or a Hugging Face decoder
model named `hf:FAMILY:PRESET|DIR` (`real.models.hf`). Either trains on the run's token
file when it names one (`real.models.tokens`), else on synthetic token sequences over its
vocabulary (`tinygpt.batch`); every rank builds any step's batch by itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from functools import lru_cache

import torch
import torch.nn as nn

from ..config import TINY_GPT, ConfigError, RunConfig, TinyGptSpec
from . import hf, tinygpt, tokens


@dataclass(frozen=True)
class Trained:
    """A model to train: `build(first, end, seed, dtype)` makes layers [first, end)."""

    name: str
    vocab: int
    seq_len: int
    hidden: int
    heads: int
    num_layers: int
    build: Callable[[int, int, int, torch.dtype], nn.Sequential]
    data: tokens.TokenFile | None = None
    # a parameter two layers share: ((layer, name), (layer, name)); each holder keeps a
    # copy and the copies' gradients are summed every step (`real.models.hf`)
    tie: tuple[tuple[int, str], tuple[int, str]] | None = None
    tiny: TinyGptSpec | None = None  # tiny-gpt's sizes (None: a Hugging Face model, named by `name`)

    @property
    def recipe(self) -> tuple[str, dict | None]:
        """What rebuilds this model in another process (`rebuild`): picklable, unlike `build`."""
        return self.name, asdict(self.tiny) if self.tiny is not None else None

    def build_whole(self, seed: int, dtype: torch.dtype) -> nn.Sequential:
        """Every layer, the tied pair as one parameter: the single-process model."""
        layers = self.build(0, self.num_layers, seed, dtype)
        if self.tie is not None:
            (a, name_a), (b, name_b) = self.tie
            path, _, attr = name_b.rpartition(".")
            owner = layers[b].get_submodule(path) if path else layers[b]
            setattr(owner, attr, layers[a].get_parameter(name_a))
        return layers

    def batch(self, seed: int, step: int, num_samples: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets of step `step`'s global batch."""
        if self.data is not None:
            return tokens.batch(self.data, self.seq_len, seed, step, num_samples)
        return tinygpt.batch(self, seed, step, num_samples)

    def layer_params(self) -> list[int]:
        """Parameters of each planner layer (built once, in float32)."""
        return [
            sum(p.numel() for p in self.build(i, i + 1, 0, torch.float32).parameters()) for i in range(self.num_layers)
        ]


def is_hf(model: str) -> bool:
    return model.startswith("hf:")


@lru_cache(maxsize=16)
def model_problem(model: str) -> str | None:
    """Why the real backend cannot train `model`, in one line (None: it can): tiny-gpt,
    or a Hugging Face name whose preset or directory resolves."""
    if model == TINY_GPT:
        return None
    if not is_hf(model):
        return f"{model!r}: real compute trains {TINY_GPT} or hf:FAMILY:PRESET|DIR"
    try:
        hf.parse(model)
    except ConfigError as exc:
        return str(exc)
    return None


def _hf(model: str) -> Trained:
    shape = hf.parse(model)
    return Trained(
        model, shape.vocab, shape.seq_len, shape.hidden, shape.heads, shape.num_layers,
        lambda first, end, seed, dtype: hf.build_layers(shape, first, end, seed, dtype), tie=shape.tie,
    )  # fmt: skip


def rebuild(name: str, tiny: dict | None) -> Trained:
    """The model of a `Trained.recipe` (no token data)."""
    return named(name, TinyGptSpec(**tiny) if tiny is not None else TinyGptSpec())


def trained(config: RunConfig) -> Trained:
    """The model `config` trains with real compute, on the run's data."""
    data = tokens.TokenFile(config.data, config.data_dtype) if config.data else None
    return named(config.model, config.tiny, data)


def named(model: str, spec: TinyGptSpec, data: tokens.TokenFile | None = None) -> Trained:
    """tiny-gpt of `spec` for "tiny-gpt", else the Hugging Face model `model` names."""
    if is_hf(model):
        return replace(_hf(model), data=data)
    return Trained(
        TINY_GPT, spec.vocab, spec.seq_len, spec.hidden, spec.heads, spec.num_layers,
        lambda first, end, seed, dtype: tinygpt.build_layers(spec, first, end, seed, dtype), data, tiny=spec,
    )  # fmt: skip
