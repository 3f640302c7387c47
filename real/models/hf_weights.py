"""Trained weights of a Hugging Face model, read per planner layer from local safetensors files.

`hf:FAMILY:DIR` takes its weights from DIR when DIR holds them as `save_pretrained` writes
them: `model.safetensors`, or shards listed by `model.safetensors.index.json`. A stage
reads only its own layers' tensors (`safe_open` reads a tensor without the rest of the
file), so no rank loads the whole model. Only safetensors are read: a `pytorch_model.bin`
is a pickle, which would run code from the file; a directory with only that is refused in
one line saying how to convert it.

Tensor names are transformers' own: GPT-2's `transformer.wte`, `transformer.h.{i}.*`,
`transformer.ln_f.*` (the prefix is absent in the original OpenAI conversions, and accepted
so), Llama's `model.embed_tokens`, `model.layers.{i}.*`, `model.norm`; both `lm_head.weight`
when the head is untied. A tied head reads the token embedding (transformers writes the
shared tensor once). Every parameter of the layer must be in the files with its shape, or
the error names the tensor; tensors the layers do not hold (GPT-2's stored attention mask)
are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..config import ConfigError

SINGLE, INDEX = "model.safetensors", "model.safetensors.index.json"


def _safe_open() -> Any:
    """safetensors' reader (it comes with the [hf] extra's transformers)."""
    try:
        from safetensors import safe_open
    except ImportError:
        raise ConfigError("Hugging Face weights need safetensors: pip install -e '.[hf]'") from None
    return safe_open


@dataclass(frozen=True)
class WeightFiles:
    """Which file of `directory` holds each tensor name."""

    directory: str
    where: Mapping[str, str]  # tensor name -> file name in `directory`

    def read(self, names: Mapping[str, str]) -> dict[str, torch.Tensor]:
        """{key: the tensor `names[key]`} read from the files, one open per file."""
        safe_open = _safe_open()
        missing = sorted(n for n in names.values() if n not in self.where)
        if missing:
            raise ConfigError(f"{self.directory}: the weights lack {', '.join(missing)}")
        out: dict[str, torch.Tensor] = {}
        by_file: dict[str, list[str]] = {}
        for key, name in names.items():
            by_file.setdefault(self.where[name], []).append(key)
        for file, keys in by_file.items():
            with safe_open(str(Path(self.directory) / file), framework="pt") as handle:
                for key in keys:
                    out[key] = handle.get_tensor(names[key])
        return out


def find(directory: Path) -> WeightFiles | None:
    """The safetensors weights in `directory` (None: it holds none, the model starts from
    its seed); a ConfigError for an index that is not one or weights only as a pickle."""
    if (directory / INDEX).is_file():
        try:
            index = json.loads((directory / INDEX).read_text())
            where = dict(index["weight_map"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise ConfigError(f"{directory / INDEX}: not a safetensors index (no weight_map)") from None
        absent = sorted({f for f in where.values() if not (directory / f).is_file()})
        if absent:
            raise ConfigError(f"{directory / INDEX}: lists {', '.join(absent)}, which {directory} lacks")
        return WeightFiles(str(directory), where)
    if (directory / SINGLE).is_file():
        with _safe_open()(str(directory / SINGLE), framework="pt") as handle:
            return WeightFiles(str(directory), {name: SINGLE for name in handle.keys()})
    pickles = sorted(p.name for p in directory.glob("*.bin"))
    if pickles:
        raise ConfigError(
            f"{directory}: weights only as {', '.join(pickles)} (a pickle, not read: it can run code); save them "
            "as safetensors: model.save_pretrained(DIR, safe_serialization=True)"
        )
    return None


def tensor_names(
    family: str, layer: int, num_layers: int, params: list[str], tied: bool, files: WeightFiles
) -> dict[str, str]:
    """{parameter of planner layer `layer`: its tensor name in the files}."""
    names = files.where
    if family == "gpt2":
        prefix = "transformer." if any(n.startswith("transformer.") for n in names) else ""
        embedding = f"{prefix}wte.weight"
        fixed = {"tokens.weight": embedding, "positions.weight": f"{prefix}wpe.weight"}
        block, norm = f"{prefix}h.", f"{prefix}ln_f."
    else:
        embedding = "model.embed_tokens.weight"
        fixed = {"tokens.weight": embedding}
        block, norm = "model.layers.", "model.norm."
    out = {}
    for param in params:
        if layer == 0:
            out[param] = fixed[param]
        elif layer == num_layers - 1:
            if param == "logits.weight":
                out[param] = embedding if tied else "lm_head.weight"
            else:
                out[param] = norm + param.removeprefix("norm.")
        else:
            out[param] = f"{block}{layer - 1}." + param.removeprefix("block.")
    return out


def load_layer(
    module: torch.nn.Module, family: str, layer: int, num_layers: int, tied: bool, files: WeightFiles
) -> None:
    """Copy planner layer `layer`'s parameters into `module` from the files, shapes checked."""
    params = dict(module.named_parameters())
    names = tensor_names(family, layer, num_layers, list(params), tied, files)
    tensors = files.read(names)
    with torch.no_grad():
        for key, param in params.items():
            tensor = tensors[key]
            if tuple(tensor.shape) != tuple(param.shape):
                raise ConfigError(
                    f"{files.directory}: {names[key]} has shape {tuple(tensor.shape)}, the model built from its "
                    f"config.json needs {tuple(param.shape)}"
                )
            param.copy_(tensor)
