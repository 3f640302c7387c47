"""`ooblab profile`: measure tiny-gpt layer by layer on this machine and write the
planner's profile format (layers, the all-reduce curve, pipeline communication)."""

from __future__ import annotations

import json
import sys
from typing import Any

from ..config import (
    TINY_GPT,
    ConfigError,
    TinyGptSpec,
)
from .cli_errors import internal_error, request_error


def handle_profile(args) -> int:
    try:
        from ..models.family import named  # torch: only once the command runs

        if args.model != TINY_GPT and not args.model.startswith("hf:"):
            raise ConfigError(
                f"ooblab profile measures {TINY_GPT!r} or a Hugging Face model (hf:gpt2:tiny, ...); got {args.model!r}"
            )
        spec = TinyGptSpec(args.vocab, args.seq_len, args.hidden, args.heads, args.blocks)
        model = named(args.model, spec)  # a Hugging Face name is checked here: one line, nothing measured
        from .profiler import ProfilerSettings, profile_model

        settings = ProfilerSettings(
            microbatch_size=args.microbatch,
            dtype=args.dtype,
            device=args.device,
            repeats=args.repeats,
            warmup=args.warmup,
            max_participants=args.max_participants,
            threads=args.threads,
        )
        neighbours = _neighbour_counts(args.busy_neighbours, args.reference_neighbours)
        from planner.output_dirs import check_output_dir

        check_output_dir(args.out, "--out")  # before minutes of measuring (an OutputError is a ValueError)
    except (ConfigError, ValueError) as exc:  # the model's shape and the profiler's settings: the user's
        return request_error("profile", exc)
    try:  # past here any error, a ValueError included, is the profiler's or the format writer's own
        if neighbours is None:
            profile = profile_model(model, settings)
        else:
            from .contention import HOP_SETTINGS, profile_with_contention

            hops = None if args.skip_comm else HOP_SETTINGS  # --skip-comm: no communication measured at all
            profile = profile_with_contention(model, settings, neighbours, args.reference_neighbours, hops=hops)
        from planner.contention import write_contention
        from planner.oobleck_format import write_oobleck_profile

        directory = write_oobleck_profile(profile, args.out)
        if profile.contention is not None:
            write_contention(profile.contention, directory)
    except Exception:
        return internal_error("profile", None)
    factors = {str(k): v for k, v in profile.contention.compute_factor} if profile.contention else None
    comm = None
    if not args.skip_comm:
        from .comm_fit import FitError
        from .profiler import measure_and_write_communication

        try:
            comm = measure_and_write_communication(directory, settings)
        except FitError as exc:  # the machine was too noisy for the fit: a measurement outcome, not a bug
            print(
                f"ooblab profile: failed: communication measurement: {exc} (the layers are written; --skip-comm skips it)",
                file=sys.stderr,
            )
            return 1
        except Exception:
            return internal_error("profile", None)
    if args.json:
        printed: dict[str, Any] = {"directory": str(directory), "layers": [_layer_json(l) for l in profile.layers]}
        if factors is not None:
            printed["compute_factor"] = factors
        if comm is not None:
            printed["communication"] = {**comm.to_dict(), "fit": comm.details()}
        print(json.dumps(printed, indent=2))
    else:
        total_ms = sum(l.forward_s + l.backward_s for l in profile.layers) * 1e3
        print(
            f"profiled {profile.num_layers} layers of {model.name} (forward + backward {total_ms:.2f} ms per microbatch) into {directory}"
        )
        if profile.contention is not None:
            print(profile.contention.summary())
        if comm is not None:
            print(comm.summary())
    return 0


def _neighbour_counts(text: str | None, reference: int) -> list[int] | None:
    """--busy-neighbours "0,1,2,3" as counts (None: not asked); the reference must be >= 0."""
    if reference < 0:
        raise ConfigError(f"--reference-neighbours must be >= 0, got {reference}")
    if text is None:
        if reference:
            raise ConfigError("--reference-neighbours applies with --busy-neighbours")
        return None
    parts = [part.strip() for part in text.split(",")]
    if not parts or not all(part.isdigit() for part in parts):
        raise ConfigError(f"--busy-neighbours must be whole numbers >= 0 separated by commas, got {text!r}")
    return sorted({int(part) for part in parts})


def _layer_json(layer) -> dict:
    return {
        "name": layer.name,
        "forward_s": layer.forward_s,
        "backward_s": layer.backward_s,
        "param_bytes": layer.param_bytes,
        "optimizer_bytes": layer.optimizer_bytes,
        "activation_bytes": layer.activation_bytes,
        "output_bytes": layer.output_bytes,
        "allreduce_across_nodes_s": {str(k): v for k, v in layer.allreduce_across_nodes_s},
    }
