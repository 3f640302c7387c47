"""A layer's training state: its parameters and AdamW state, as one portable value.

What moves when the plan changes (a layer copied from a surviving replica), what a
checkpoint stores, and what a worker keeps in memory between generations is the same
`LayerState`: every parameter of the layer by name, AdamW's `exp_avg` and `exp_avg_sq`
for each, AdamW's step count, and `ready_step`, the training step this state is ready
for (the number of committed steps it includes). For point-to-point copies a state
flattens into one tensor whose size the receiver knows from its own freshly built layer
(`template`), so nothing but the data travels.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn as nn

STATE_KEYS = ("exp_avg", "exp_avg_sq")


@dataclass(frozen=True)
class LayerState:
    """Layer `layer` after `ready_step` committed steps (`adam_step` AdamW steps)."""

    layer: int
    ready_step: int
    adam_step: int
    params: Mapping[str, torch.Tensor]
    exp_avg: Mapping[str, torch.Tensor]
    exp_avg_sq: Mapping[str, torch.Tensor]

    @property
    def numel(self) -> int:
        return 3 * sum(t.numel() for t in self.params.values()) + 2

    @property
    def dtype(self) -> torch.dtype:
        return next(iter(self.params.values())).dtype

    def clone(self) -> LayerState:
        def copy(d):
            return {k: v.detach().clone() for k, v in d.items()}

        return LayerState(
            self.layer, self.ready_step, self.adam_step, copy(self.params), copy(self.exp_avg), copy(self.exp_avg_sq)
        )

    def to_payload(self) -> dict:
        """For torch.save (plain containers of CPU tensors)."""

        def cpu(d):
            return {k: v.detach().cpu() for k, v in d.items()}

        return {
            "layer": self.layer,
            "ready_step": self.ready_step,
            "adam_step": self.adam_step,
            "params": cpu(self.params),
            "exp_avg": cpu(self.exp_avg),
            "exp_avg_sq": cpu(self.exp_avg_sq),
        }

    @classmethod
    def from_payload(cls, data: Mapping) -> LayerState:
        return cls(
            int(data["layer"]),
            int(data["ready_step"]),
            int(data["adam_step"]),
            dict(data["params"]),
            dict(data["exp_avg"]),
            dict(data["exp_avg_sq"]),
        )


def capture(
    layer: int, named: Mapping[str, nn.Parameter], optimizer: torch.optim.Optimizer, ready_step: int, *, copy: bool
) -> LayerState:
    """The state of one layer's parameters (`named`) in `optimizer`; `copy=False` shares
    the live tensors (for a worker that is about to drop its module anyway)."""
    take = (lambda t: t.detach().clone()) if copy else (lambda t: t.detach())
    params, avg, avg_sq, steps = {}, {}, {}, set()
    for name, p in named.items():
        params[name] = take(p)
        state = optimizer.state.get(p) or {}
        if state:
            avg[name], avg_sq[name] = take(state["exp_avg"]), take(state["exp_avg_sq"])
            steps.add(int(float(state["step"])))
        else:
            avg[name], avg_sq[name] = torch.zeros_like(p.detach()), torch.zeros_like(p.detach())
            steps.add(0)
    if len(steps) != 1:
        raise RuntimeError(f"layer {layer}: its parameters have taken different numbers of AdamW steps {sorted(steps)}")
    return LayerState(layer, ready_step, steps.pop(), params, avg, avg_sq)


def install(state: LayerState, named: Mapping[str, nn.Parameter], optimizer: torch.optim.Optimizer) -> None:
    """Load `state` into freshly built parameters and their AdamW slots (copies: the
    source tensors are never trained in place)."""
    if set(state.params) != set(named):
        raise ValueError(f"layer {state.layer}: state holds {sorted(state.params)}, the layer has {sorted(named)}")
    with torch.no_grad():
        for name, p in named.items():
            src = state.params[name]
            if src.shape != p.shape:
                raise ValueError(f"layer {state.layer} parameter {name}: shape {tuple(src.shape)} != {tuple(p.shape)}")
            p.copy_(src)
            if state.adam_step > 0:
                optimizer.state[p] = {
                    "step": torch.tensor(float(state.adam_step)),
                    "exp_avg": state.exp_avg[name].detach().to(p.device, p.dtype).clone(),
                    "exp_avg_sq": state.exp_avg_sq[name].detach().to(p.device, p.dtype).clone(),
                }
            else:
                optimizer.state.pop(p, None)


def flatten(state: LayerState) -> torch.Tensor:
    """[ready_step, adam_step, params..., exp_avg..., exp_avg_sq...] in sorted name order."""
    names = sorted(state.params)
    ref = state.params[names[0]]
    head = torch.tensor([float(state.ready_step), float(state.adam_step)], dtype=ref.dtype, device=ref.device)
    parts = [head]
    for group in (state.params, state.exp_avg, state.exp_avg_sq):
        parts.extend(group[n].detach().reshape(-1) for n in names)
    return torch.cat(parts)


def unflatten(flat: torch.Tensor, template: LayerState) -> LayerState:
    """The inverse of `flatten`, shaped like `template` (a layer built by the receiver)."""
    if flat.numel() != template.numel:
        raise ValueError(f"layer {template.layer}: received {flat.numel()} values, expected {template.numel}")
    names = sorted(template.params)
    ready_step, adam_step = int(flat[0].item()), int(flat[1].item())
    offset = 2
    groups = []
    for _ in range(3):
        out = {}
        for n in names:
            shape = template.params[n].shape
            size = template.params[n].numel()
            out[n] = flat[offset : offset + size].view(shape).clone()
            offset += size
        groups.append(out)
    return LayerState(template.layer, ready_step, adam_step, *groups)
