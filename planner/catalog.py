"""Turn a user's model argument (a built-in name or a profile directory) into a profile."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from .analytic import MODEL_SHAPES, analytic_profile
from .contention import load_contention
from .errors import PlannerError
from .hardware import GpuSpec
from .oobleck_format import load_oobleck_profile
from .profile import ModelProfile


def resolve_profile(model: str, gpu: str | GpuSpec, microbatch_size: int) -> ModelProfile:
    """A directory is read as an Oobleck-format profile (the GPU then only sets memory and
    links), with its `contention.json` when it has one; a built-in name gets an analytic
    profile on that GPU."""
    path = Path(model)
    if path.is_dir():
        profile = load_oobleck_profile(path, microbatch_size)
        contention = load_contention(path)
        return profile if contention is None else replace(profile, contention=contention)
    if model in MODEL_SHAPES:
        return analytic_profile(model, gpu, microbatch_size)
    raise PlannerError(
        f"model {model!r} is neither a profile directory nor a built-in model ({', '.join(MODEL_SHAPES)})"
    )
