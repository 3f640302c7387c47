"""The single-process reference: tiny-gpt trained plainly over the same global batches.

One process, the whole model, the whole global batch at once (or the part of it a step of
replica groups trained on): loss = mean token
cross-entropy over the global batch, backward, AdamW. A correct pipelined run (any plan,
any split of microbatches) must end with the same parameters; `compare` measures how far
apart two sets of parameters are, and `gather_params` reassembles a pipeline's model from
the files the workers save (`StageRunner.save`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..config import RunConfig
from .family import trained
from .tinygpt import DTYPES, lm_loss


@dataclass(frozen=True)
class ReferenceRun:
    params: dict[str, torch.Tensor]  # "<layer>.<name>" -> tensor
    losses: list[float]


def train_reference(
    config: RunConfig, step_ranges: Mapping[int, Sequence[tuple[int, int]]] | None = None
) -> ReferenceRun:
    """Train the run's model for `config.steps` steps in this process. `step_ranges[k]`, when
    given for step k, names the (first microbatch, count) ranges of the step's global
    batch it trains on (a step over some replica groups); other steps take it whole."""
    spec = trained(config)
    model = spec.build_whole(config.seed, DTYPES[config.dtype])
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    losses = []
    b = config.microbatch_size
    for step in range(config.steps):
        inputs, targets = spec.batch(config.seed, step, config.global_batch)
        if step_ranges is not None and step in step_ranges:
            rows = [r for first, count in step_ranges[step] for r in range(first * b, (first + count) * b)]
            inputs, targets = inputs[rows], targets[rows]
        optimizer.zero_grad(set_to_none=False)
        loss = lm_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    params = {
        f"{index}.{name}": tensor.detach().clone()
        for index, layer in enumerate(model)
        for name, tensor in layer.state_dict().items()
    }
    return ReferenceRun(params, losses)


def gather_params(directory: str | Path) -> dict[int, dict[str, torch.Tensor]]:
    """{pipeline: {"<layer>.<name>": tensor}} from the ranks' saved files."""
    pipelines: dict[int, dict[str, torch.Tensor]] = {}
    files = sorted(Path(directory).glob("rank*.pt"))
    if not files:
        raise FileNotFoundError(f"no rank*.pt parameter files in {directory}")
    for path in files:
        saved = torch.load(path, weights_only=True)
        pipelines.setdefault(int(saved["pipeline"]), {}).update(saved["state"])
    return pipelines


def max_relative_difference(params: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]) -> float:
    """max over tensors of max|p - p_ref| / max|p_ref|: each tensor's error relative to its
    own scale (element-wise ratios blow up on entries that happen to be near zero)."""
    missing = set(reference) ^ set(params)
    if missing:
        raise KeyError(f"parameter sets differ in {sorted(missing)[:5]}")
    worst = 0.0
    for name, ref in reference.items():
        ref64 = ref.double()
        scale = float(ref64.abs().max())
        diff = float((params[name].double() - ref64).abs().max())
        worst = max(worst, diff / scale if scale > 0 else diff)
    return worst
