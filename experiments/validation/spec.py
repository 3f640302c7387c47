"""What one validation compares: a trace, a model, a node count, a compute mode.

`ValidationSpec` holds every choice; `prepare_trace` turns the trace argument into the
trace both sides replay (rescaled onto the node count when its peak differs, which the
report says), `prepare_model` makes the profile both sides plan with:

- `synthetic` (emulated compute; the default): 8 layers of 10 ms forward + 20 ms backward
  per microbatch, 64 KiB activations, 1 MiB of parameters each; about 0.5 s per
  iteration on 8 nodes, so a trace compressed to a few minutes holds tens of iterations
  per phase, and the emulated workers sleep most of the time (a 2-core machine can host
  16 of them).
- a built-in planner model or an Oobleck profile directory (emulated compute): its
  profile, as the backend resolves it (one-GPU stages).
- `tiny-gpt` (real or emulated compute; shape `TINY_SHAPE`), or a Hugging Face model
  (`hf:FAMILY:PRESET|DIR`, real compute; `real.models.hf`): profiled on this machine
  first (`real.launch.profiler`, one thread, as a worker runs, beside N - 1 processes computing
  the same layers: `contended`), then planned from that; the same layers timed beside
  0..N - 1 busy neighbours (`contention.json`) let the simulator scale each phase's compute
  by its live worker count.

Both sides read the same profile directory, so they start from the same plan.

Pipeline communication: the synthetic and tiny-gpt profiles carry the
communication figures of this machine (`communication.json` in the profile directory:
point-to-point latency and bandwidth over gloo loopback, the per-hop overhead of the real
1F1B schedule; `real.launch.comm_profile`), which the emulated and real runs pay for real.
`measured_communication` measures them once per output directory (kept in the profile
directory, like the calibration's overheads.json) or takes them from a measured file
(`ValidationSpec.communication`: a `communication.json` or a profile directory holding
one, e.g. measured on a quiet machine). Built-in analytic models and other profile
directories get none (the planner then uses the cluster's links and no hop overhead).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.oobleck_format import CommSample
    from planner.profile import CommProfile

SYNTHETIC = "synthetic"
TINY_GPT = "tiny-gpt"
COMPUTE = ("emulated", "real")
POLICIES = ("oobleck", "varuna")  # the default pair
DESIGNS = (*POLICIES, "replica_groups")  # what a validation can run
# tiny-gpt as validated: big enough that compute, not the per-message runtime, sets the
# pace (about 30-60 ms per block and microbatch on one core)
TINY_SHAPE = dict(vocab=256, seq_len=128, hidden=256, heads=4, blocks=4)


class ValidationError(ValueError):
    """A validation that cannot be set up; the message says which setting is wrong."""


@dataclass(frozen=True)
class ValidationSpec:
    trace: str = "fixed:interval=1h,nodes=8,removals=3"
    model: str = SYNTHETIC
    window: str | None = None  # "START:END" (durations, e.g. "10h:12h"): a slice of the trace
    nodes: int = 8
    compute: str = "emulated"
    fault_tolerance: int = 1
    global_batch: int = 16
    policies: tuple[str, ...] = POLICIES
    target_duration_s: float = 90.0  # the compressed trace's length (sets the time scale)
    time_scale: float | None = None  # explicit compression instead of target_duration_s
    # steady training after the last event and its recovery (default: 15% of the trace,
    # >= 8 s, >= the longest simulated recovery)
    tail_s: float | None = None
    checkpoint_every: int = 10  # steps, both policies, both sides
    gpu: str = "v100-16gb"  # the planner's GPU type (memory, links) on both sides
    heartbeat_timeout_s: float = 10.0
    seed: int = 0
    label: str = ""
    communication: str | None = None  # a measured communication.json (or its profile directory) instead of measuring
    # calibrate the loaded pipeline sends (`loaded_hops`, emulated compute, 8 nodes and up)
    # and simulate with them; off by default: in two runs it helped at 32 nodes and
    # overshot at 16 (CHANGELOG.md, 2026-12-03 evening)
    loaded_sends: bool = False

    def __post_init__(self) -> None:
        if self.compute not in COMPUTE:
            raise ValidationError(f"compute must be one of {', '.join(COMPUTE)}, got {self.compute!r}")
        if self.compute == "real" and self.model != TINY_GPT and not self.model.startswith("hf:"):
            raise ValidationError(
                f"real compute runs {TINY_GPT!r} or a Hugging Face model (hf:gpt2:small, hf:llama:DIR), got model "
                f"{self.model!r} (use --compute emulated)"
            )
        for name in ("nodes", "global_batch", "checkpoint_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(f"{name} must be a whole number >= 1, got {value!r}")
        if self.nodes < 2:
            raise ValidationError(f"nodes must be >= 2 (a failure needs a survivor), got {self.nodes}")
        for name in ("fault_tolerance", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValidationError(f"{name} must be a whole number >= 0, got {value!r}")
        if not isinstance(self.loaded_sends, bool):
            raise ValidationError(f"loaded_sends must be true or false, got {self.loaded_sends!r}")
        if self.loaded_sends and self.compute != "emulated":
            raise ValidationError(
                "loaded_sends calibrates emulated compute; real compute's contention profile holds its loaded hop"
            )
        # the calibration's Oobleck jobs run f + 1 pipelines of at least a node and a microbatch
        # each: refused here, not after the first minute of measuring
        pipelines = self.fault_tolerance + 1
        if pipelines > self.nodes or pipelines > self.global_batch:
            what = f"{self.nodes} nodes" if pipelines > self.nodes else f"a global batch of {self.global_batch}"
            raise ValidationError(
                f"f = {self.fault_tolerance} needs {pipelines} pipelines of at least one node and one sample each; "
                f"{what} cannot feed them (the calibration runs Oobleck at this f)"
            )
        bad = [p for p in self.policies if p not in DESIGNS]
        if bad or not self.policies:
            raise ValidationError(f"policies must be among {', '.join(DESIGNS)}, got {list(self.policies)}")
        for name in ("target_duration_s", "time_scale", "tail_s", "heartbeat_timeout_s"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValidationError(f"{name} must be a positive number, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["policies"] = list(self.policies)
        return data


@dataclass(frozen=True)
class PreparedTrace:
    trace: Any  # traces.Trace, rebased to start at 0, at most `nodes` live
    time_scale: float
    span_s: float  # the original trace's span in trace seconds (a rescale may end earlier)
    note: str  # what was done to it, for the report

    @property
    def replay_s(self) -> float:
        """How long the compressed trace lasts."""
        return self.span_s / self.time_scale


def prepare_trace(spec: ValidationSpec, shared: Path | None = None) -> PreparedTrace:
    """Load (or generate) the trace, rebase it to 0, rescale it onto [lo, nodes] when its
    peak differs from `nodes`, and choose the time scale."""
    import numpy as np

    from traces import TraceError, from_spec, parse_duration_s, rescale, window
    from traces.model import Trace

    try:
        trace = from_spec(spec.trace, rng=np.random.default_rng(spec.seed))
        if spec.window:
            start_text, sep, end_text = spec.window.partition(":")
            if not sep:
                raise TraceError(f"window {spec.window!r} is not START:END (e.g. 10h:12h)")
            trace = window(trace, parse_duration_s(start_text), parse_duration_s(end_text))
    except TraceError as exc:
        raise ValidationError(f"trace {spec.trace!r}: {exc}") from None
    if len(trace) == 0 or trace.duration_s <= 0:
        raise ValidationError(f"trace {spec.trace!r} spans no time")
    start = trace.start_s
    horizon_s = None if trace.horizon_s is None else trace.horizon_s - start
    trace = Trace(tuple(replace(e, time_s=e.time_s - start) for e in trace.events), trace.name, horizon_s)
    counts = trace.live_counts()["live_nodes"]
    peak, low = int(counts.max()), int(counts[counts.index[-1]] if len(counts) == 1 else counts.min())
    span_s = trace.duration_s  # rescaling drops trailing events that change nothing; keep the span
    note = f"{len(trace)} events over {span_s:g} s, {low}-{peak} nodes"
    if peak != spec.nodes:
        lo = max(1, min(spec.nodes, round(low * spec.nodes / peak)))
        trace = rescale(trace, lo, spec.nodes, rng=np.random.default_rng(spec.seed))
        note += f"; rescaled onto {lo}-{spec.nodes} nodes"
    scale = spec.time_scale or span_s / spec.target_duration_s
    note += f"; replayed {scale:g}x faster ({span_s / scale:.1f} s)"
    return PreparedTrace(trace, scale, span_s, note)


def synthetic_profile(layers: int = 8, forward_s: float = 0.010, backward_s: float = 0.020):
    from planner.profile import LayerProfile, ModelProfile

    layer = lambda i: LayerProfile(f"layer{i}", forward_s, backward_s, 1 << 20, 1 << 20, 2 << 20, 1 << 16, 1 << 16)  # noqa: E731
    return ModelProfile(
        f"{SYNTHETIC}-{layers}x{(forward_s + backward_s) * 1e3:g}ms",
        1,
        tuple(layer(i) for i in range(layers)),
        source=SYNTHETIC,
    )


def measured_communication(
    directory: Path, source: str | Path | None = None, progress: Callable[[str], None] = print
) -> tuple[CommProfile, tuple[CommSample, ...]]:
    """The pipeline-communication figures (and their samples) the validation's profile
    carries, read by the planner's own reader (`planner.oobleck_format.read_communication`):
    from `source` (a file, or a profile directory with one) when given, else the one kept
    in the profile `directory`, else measured here and kept there (about 30 s: three
    processes start torch, then a few seconds of transfers and 1F1B runs; up to three
    times while the measurement comes out noisy, `comm_profile.measure_quietest`)."""
    from planner.oobleck_format import COMMUNICATION_FILE, read_communication

    if source is not None:
        try:
            return read_communication(source)
        except (OSError, ValueError) as exc:  # ProfileError is a ValueError
            raise ValidationError(f"communication {str(source)!r}: {exc}") from None
    kept = Path(directory) / COMMUNICATION_FILE
    if kept.exists():
        try:
            return read_communication(kept)
        except ValueError as exc:
            raise ValidationError(f"the kept {exc} (delete it to measure again)") from None
    from real.launch.comm_profile import measure_quietest

    progress("measuring pipeline communication on this machine (p2p transfers, per-hop overhead of 1F1B) ...")
    measured = measure_quietest(progress=progress)
    measured.write(directory)
    progress(measured.summary())
    return measured.comm, measured.samples


@dataclass(frozen=True)
class PreparedModel:
    run_fields: dict  # RunConfig fields that name the model
    profile_dir: Path  # what the simulator plans with
    note: str


def prepare_model(spec: ValidationSpec, directory: Path, progress=print) -> PreparedModel:
    from planner.oobleck_format import write_oobleck_profile

    directory = Path(directory)
    target = directory / "profile"
    if spec.model == TINY_GPT or spec.model.startswith("hf:"):
        from planner.contention import FILE_NAME, write_contention
        from real.config import TinyGptSpec
        from real.launch.profiler import ProfilerSettings
        from real.models.family import named

        from .contended import profile_contended

        tiny = TinyGptSpec(**TINY_SHAPE)
        try:
            model = named(spec.model, tiny)  # a Hugging Face name is checked here, before any measurement
        except ValueError as exc:  # real.config.ConfigError
            raise ValidationError(str(exc)) from None
        _carry_communication(spec, target, progress)  # first: a bad given file is named before minutes of profiling
        if not (target / "mb1.json").exists() or not (target / FILE_NAME).exists():  # once per output directory
            progress(
                f"profiling {spec.model} on this machine, beside {spec.nodes - 1} busy neighbours, "
                f"then beside 0..{spec.nodes - 1} (layers, then the pipeline hop) ..."
            )
            settings = ProfilerSettings(max_participants=max(2, spec.nodes))
            profile = profile_contended(model, settings, spec.nodes)
            write_oobleck_profile(profile, target)
            if profile.contention is None:
                raise RuntimeError("internal error: the contended profile came back without its contention sweep")
            write_contention(profile.contention, target)
            progress(profile.contention.summary())
        if spec.model == TINY_GPT:
            shape = ", ".join(f"{k} {v}" for k, v in TINY_SHAPE.items())
            fields: dict[str, Any] = {"model": TINY_GPT, "profile_dir": str(target), "tiny": tiny}
        else:
            shape = f"{model.num_layers - 2} blocks, hidden {model.hidden}, sequence {model.seq_len}"
            fields = {"model": spec.model, "profile_dir": str(target)}
        return PreparedModel(
            fields,
            target,
            f"{spec.model} ({shape}), profiled here beside {spec.nodes - 1} busy neighbours, "
            f"compute scaled per live worker count (contention.json)",
        )
    if spec.model == SYNTHETIC:
        write_oobleck_profile(synthetic_profile(), target)
        _carry_communication(spec, target, progress)
        return PreparedModel({"model": str(target)}, target, f"{synthetic_profile().name} (synthetic)")
    from planner.errors import PlannerError
    from real.config import RunConfig
    from real.control.planning import resolve_run_profile

    try:
        profile = resolve_run_profile(RunConfig(model=spec.model, compute="emulated", gpu=spec.gpu))
    except PlannerError as exc:
        raise ValidationError(f"model {spec.model!r}: {exc}") from None
    write_oobleck_profile(profile, target)
    return PreparedModel({"model": str(target)}, target, f"{spec.model} ({profile.source})")


def _carry_communication(spec: ValidationSpec, target: Path, progress: Callable[[str], None]) -> None:
    """`target/communication.json`: the given file's figures (copied in, through the
    planner's writer), or this machine's (measured once, then kept)."""
    from planner.oobleck_format import write_communication

    comm, samples = measured_communication(target, spec.communication, progress)
    if spec.communication is not None:
        write_communication(comm, target, samples)
