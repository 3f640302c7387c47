"""One rank's training step: its stage under torch.distributed.pipelining, then the
weighted gradient synchronisation and AdamW.

The stage module is built from the plan's layer range (tiny-gpt layers, or emulated layers
from the profile), loaded with the layers' states when the generation resumes from
memory, a peer or a checkpoint (`real.state`), wrapped in a `PipelineStage` on the
pipeline's own process group and run with `Schedule1F1B` over the pipeline's m_i
microbatches. 1F1B needs m_i >= S; a pipeline the plan gives fewer microbatches than
stages runs `ScheduleGPipe` instead (same result, recorded in the run's events).

A CUDA worker on gloo (`devices`: several ranks sharing one GPU) computes on its GPU,
but gloo moves host memory only: its stage is wrapped in a `HostBridge` and the pipeline
stage lives on the host (activations and gradients cross to the GPU and back inside
the module, where autograd sees the copies), and its layer copies are host-staged.

A step is committed between the gradient synchronisation and the optimizer step
(`real.commit`): the caller's `commit` acks the step and returns its verdict; only a
committed step touches the parameters. In emulated mode the optimizer step is followed by
a sleep of the profile's step time for the stage's layers (`optimizer.json`, when the
profile has one), as the simulator charges it (`sim.optimizer_cost`). Failure points
(`real.probe`) sit in the first forward and backward of the step, in the all-reduce and
in the optimizer step.

Losses: the schedule's loss of one microbatch is its mean token cross-entropy times
m_i / M / m_i = 1 / M (the plan's gradient weight spread over the pipeline's microbatches,
`scale_grads=False`), so after `GradientSync` each gradient is that of the mean loss over
the global batch. The reported loss sum undoes the scale.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from torch import nn

from ..config import RunConfig
from ..models.emulated import (
    EmulatedLayerTimes,
    EmulatedStage,
    emulated_input,
    emulated_loss,
    sleep_until,
)
from ..models.family import trained
from ..models.tinygpt import DTYPES, lm_loss
from ..protocol.commit import COMMITTED
from ..state.layer_state import LayerState, capture, install
from .gradsync import GradientSync
from .groups import Generation
from .probe import FailureProbe


class StepAborted(RuntimeError):
    """The coordinator aborted the step (another rank failed): no optimizer step ran."""


def schedule_name(num_microbatches: int, num_stages: int) -> str:
    return "1F1B" if num_microbatches >= num_stages else "GPipe"


class HostBridge(nn.Module):
    """`module` on `device`, seen from the host: inputs move to the device, outputs come
    back (differentiably, so gradients take the same way in reverse). The module is held,
    not registered: `PipelineStage` moves its submodule to the stage's (host) device, and
    must not take the layers off the GPU (their gradients still reach them: autograd
    follows the graph, not the module tree)."""

    def __init__(self, module: nn.Module, device: torch.device):
        super().__init__()
        self._held = (module,)  # a tuple: nn.Module registers Module attributes, not tuples
        self.device = device

    @property
    def inner(self) -> nn.Module:
        return self._held[0]

    def forward(self, *args):
        moved = [a.to(self.device) if isinstance(a, torch.Tensor) else a for a in args]
        out = self.inner(*moved)
        return out.to("cpu") if isinstance(out, torch.Tensor) else out


class StageRunner:
    """Rank `generation.rank`'s stage, schedule, optimizer and gradient synchronisation."""

    def __init__(
        self,
        config: RunConfig,
        generation: Generation,
        device: torch.device,
        emulation: Sequence[EmulatedLayerTimes] | None = None,
        probe: FailureProbe | None = None,
        ready_step: int = 0,
    ):
        from torch.distributed.pipelining import (
            PipelineStage,
            Schedule1F1B,
            ScheduleGPipe,
        )

        self.config = config
        self.layout = generation.layout
        self.assignment = generation.stage
        self.pipeline = self.layout.pipelines[self.assignment.pipeline]
        self.device = device
        a = self.assignment
        self.module: nn.Module
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
        if config.compute == "emulated":
            if emulation is None or len(emulation) != self.layout.num_layers:
                raise ValueError("emulated compute needs the profile's times for every layer")
            emulated = EmulatedStage(
                emulation[a.first_layer : a.end_layer], self.layout.microbatch_size, last=a.is_last
            ).to(device)
            self.module = emulated
            self.layer_named = {a.first_layer + i: {"weight": emulated.weights[i]} for i in range(len(a.layers))}
            emulated_allreduce_s = (
                sum(self.layout.layer_allreduce_s[l] for l in a.layers) if self.layout.layer_allreduce_s else 0.0
            )
            self.emulated_optimizer_s = sum(t.optimizer_step_s for t in emulation[a.first_layer : a.end_layer])
            loss_fn = emulated_loss
        else:
            self.model = trained(config)  # also what builds every step's batch
            layers = self.model.build(a.first_layer, a.end_layer, config.seed, DTYPES[config.dtype]).to(device)
            self.module = layers
            self.layer_named = {a.first_layer + i: dict(layer.named_parameters()) for i, layer in enumerate(layers)}
            emulated_allreduce_s = 0.0
            self.emulated_optimizer_s = 0.0
            loss_fn = lm_loss
        # a tied pair's copies held here: out of the layer buckets, summed by the tie's group
        tie = getattr(self, "model", None) and self.model.tie
        tied = [self.layer_named[layer][name] for layer, name in tie or () if layer in self.layer_named]
        self.layer_params = {
            layer: [p for p in named.values() if all(p is not t for t in tied)]
            for layer, named in self.layer_named.items()
        }
        self._loss_fn = loss_fn
        self.probe = probe or FailureProbe(None, "", 0, ())
        self.ready_step = ready_step
        if self.probe:
            self.module.register_forward_pre_hook(lambda module, args: self.probe("forward"))
            self.module.register_forward_hook(self._hook_backward)
        self.loss_scale = self.pipeline.gradient_weight / self.pipeline.num_microbatches
        self.host_staged = device.type == "cuda" and generation.backend == "gloo"
        self.io_device = torch.device("cpu") if self.host_staged else device
        staged = HostBridge(self.module, device) if self.host_staged else self.module
        self.stage = PipelineStage(staged, a.stage, a.num_stages, self.io_device, group=generation.pipeline_group)
        self.schedule_name = schedule_name(self.pipeline.num_microbatches, a.num_stages)
        schedule_cls = Schedule1F1B if self.schedule_name == "1F1B" else ScheduleGPipe
        self.schedule = schedule_cls(
            self.stage, self.pipeline.num_microbatches, loss_fn=self._scaled_loss, scale_grads=False
        )
        self.optimizer = torch.optim.AdamW(self.module.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.sync = GradientSync(
            self.layout, a.rank, generation.sync_groups, self.layer_params, emulated_allreduce_s,
            issued=(lambda: self.probe("allreduce")) if self.probe else None,
            tied=tied, tie_group=generation.tie_group,
        )  # fmt: skip

    def _hook_backward(self, module, args, output) -> None:
        if isinstance(output, torch.Tensor) and output.requires_grad:
            output.register_hook(lambda grad: self.probe("backward"))

    def release(self) -> None:
        """Drop the pipeline stage, schedule and gradient sync (they reference the
        generation's process groups); the module and optimizer stay."""
        for name in ("schedule", "stage", "sync"):
            if hasattr(self, name):
                delattr(self, name)

    def load(self, states: Mapping[int, LayerState]) -> None:
        """Install layer states (each must be ready for this stage's `ready_step`)."""
        for layer, state in states.items():
            if state.ready_step != self.ready_step:
                raise ValueError(
                    f"layer {layer} is ready for step {state.ready_step}, the stage resumes at {self.ready_step}"
                )
            install(state, self.layer_named[layer], self.optimizer)

    def states(self, *, copy: bool) -> dict[int, LayerState]:
        """Every layer's parameters and AdamW state, ready for `ready_step`."""
        return {
            layer: capture(layer, named, self.optimizer, self.ready_step, copy=copy)
            for layer, named in self.layer_named.items()
        }

    def _scaled_loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self._loss_fn(output, target) * self.loss_scale

    def _inputs(self, step: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """This pipeline's slice of step `step`'s global batch (inputs for the first stage,
        targets for the last)."""
        b = self.layout.microbatch_size
        lo = self.pipeline.first_microbatch * b
        hi = lo + self.pipeline.num_microbatches * b
        if self.config.compute == "emulated":
            data = emulated_input(hi - lo).to(self.io_device)
            return data, data
        inputs, targets = self.model.batch(self.config.seed, step, self.layout.global_batch)
        return inputs[lo:hi].to(self.io_device), targets[lo:hi].to(self.io_device)

    def step(self, step: int, commit: Callable[[float | None], str] | None = None) -> tuple[float | None, str]:
        """One training iteration: schedule, gradient sync, `commit` (given the loss sum,
        returns the step's verdict; default: always committed), optimizer step. Returns
        the sum of this pipeline's microbatch losses on its last stage (None elsewhere) and
        the verdict; raises StepAborted (parameters untouched) when it is "abort"."""
        if step != self.ready_step:
            raise RuntimeError(f"asked to run step {step}, the stage is ready for step {self.ready_step}")
        self.probe.step = step
        self.optimizer.zero_grad(set_to_none=False)
        losses: list[torch.Tensor] = []
        inputs, targets = self._inputs(step) if (self.assignment.is_first or self.assignment.is_last) else (None, None)
        args = (inputs,) if self.assignment.is_first else ()
        target = targets if self.assignment.is_last else None
        self.schedule.step(
            *args, target=target, losses=losses if self.assignment.is_last else None, return_outputs=False
        )
        self.sync()
        loss_sum = None
        if self.assignment.is_last:
            if len(losses) != self.pipeline.num_microbatches:
                raise RuntimeError(f"expected {self.pipeline.num_microbatches} microbatch losses, got {len(losses)}")
            loss_sum = float(torch.stack([l.detach() for l in losses]).double().sum()) / self.loss_scale
        verdict = commit(loss_sum) if commit is not None else "ok"
        if verdict not in COMMITTED:
            raise StepAborted(f"step {step} was aborted (verdict {verdict!r})")
        self.probe("optimizer")
        self.optimizer.step()
        if self.emulated_optimizer_s > 0:  # the profile's step for these layers, as the simulator charges it
            sleep_until(time.perf_counter() + self.emulated_optimizer_s)
        self.ready_step = step + 1
        return loss_sum, verdict

    def save(self, directory: str | Path) -> Path:
        """This rank's layers as {"<layer>.<name>": tensor} in `directory/rank<r>.pt`."""
        a = self.assignment
        state = {}
        if self.config.compute == "emulated":
            for layer, params in self.layer_params.items():
                state[f"{layer}.weight"] = params[0].detach().cpu().clone()
        else:
            assert isinstance(self.module, nn.Sequential)  # real compute builds its layers as one
            for i, layer in enumerate(self.module):
                for name, tensor in layer.state_dict().items():
                    state[f"{a.first_layer + i}.{name}"] = tensor.detach().cpu().clone()
        path = Path(directory) / f"rank{a.rank}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"pipeline": a.pipeline, "stage": a.stage, "layers": list(a.layers), "state": state}, path)
        return path
