"""Policies built in one place, for the simulator and the real backend alike (DESIGN 3.6).

Both engines resolve their own inputs (a `Planner`, a `VarunaSearch`, a Bamboo layout)
and their own defaults, then ask here for the policy object, so a policy's constructor
and its defaults (the join horizon, Bamboo's rollback) are written down once.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import PlannerError
from ..planner import Planner
from ..profile import ModelProfile
from ..reconfigure import DEFAULT_JOIN_HORIZON_S
from .bamboo import BambooPolicy
from .bamboo_cost import BambooLayout
from .decisions import CheckpointSchedule, Policy
from .oobleck import OobleckPolicy
from .varuna import VarunaPolicy
from .varuna_search import VarunaSearch

POLICY_NAMES = ("oobleck", "bamboo", "varuna")


@dataclass(frozen=True)
class PolicyOptions:
    """What a policy is told besides its planner: when to checkpoint, and per policy its
    knobs (`join_horizon_s`, `reconfigure_pause_s`: Oobleck; `max_nodes`: Varuna;
    `bamboo_depth`: Bamboo)."""

    checkpoints: CheckpointSchedule
    gpus_per_node: int = 1
    join_horizon_s: float = DEFAULT_JOIN_HORIZON_S
    reconfigure_pause_s: float = 0.0
    max_nodes: int | None = None
    bamboo_depth: int | None = None


def build_policy(
    name: str,
    options: PolicyOptions,
    *,
    planner: Planner | None = None,
    search: VarunaSearch | None = None,
    bamboo_layout: BambooLayout | None = None,
    profile: ModelProfile | None = None,
) -> Policy:
    """The policy `name` on its inputs: Oobleck needs `planner`, Varuna `search`, Bamboo
    `options.bamboo_depth` (and may take its `bamboo_layout` and `profile`)."""
    if name == "oobleck":
        if planner is None:
            raise PlannerError("the oobleck policy needs a planner")
        return OobleckPolicy(
            planner,
            checkpoints=options.checkpoints,
            join_horizon_s=options.join_horizon_s,
            reconfigure_pause_s=options.reconfigure_pause_s,
        )
    if name == "varuna":
        if search is None:
            raise PlannerError("the varuna policy needs a configuration search")
        extra = {} if options.max_nodes is None else {"max_nodes": options.max_nodes}
        return VarunaPolicy(search, options.gpus_per_node, checkpoints=options.checkpoints, **extra)
    if name == "bamboo":
        if options.bamboo_depth is None:
            raise PlannerError("the bamboo policy needs a pipeline depth")
        return BambooPolicy(
            options.bamboo_depth,
            layout=bamboo_layout,
            profile=profile,
            fatal_rollback=True,
            checkpoints=options.checkpoints,
        )
    raise PlannerError(f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")
