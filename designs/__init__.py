"""Fault-tolerance designs as plug-ins (DESIGN 3.6): one module per design, one registry.

A design declares its name, options, policy, planner-calibration costs and where it runs
(`designs.base.Design`); the simulator and the real backend build it from the registry
(`designs.registry`) and never branch on its name. This package imports only `planner`.
"""

from .base import (
    REAL_BACKEND,
    SIMULATOR,
    ActionCosts,
    ArtifactContext,
    ArtifactHooks,
    BuildContext,
    Design,
    MemoryCopies,
    PolicyBuild,
    RealHooks,
    standard_pause_s,
)
from .options import ARTIFACT, PLANNER, REAL, DesignError, NoOptions, OptionSpec, option

__all__ = [
    "ActionCosts",
    "ARTIFACT",
    "ArtifactContext",
    "ArtifactHooks",
    "BuildContext",
    "Design",
    "DesignError",
    "MemoryCopies",
    "NoOptions",
    "option",
    "OptionSpec",
    "PLANNER",
    "PolicyBuild",
    "REAL",
    "REAL_BACKEND",
    "RealHooks",
    "SIMULATOR",
    "standard_pause_s",
]
