"""Restart from the last checkpoint on every failure: the elastic-restart baseline.

What a job gets from a plain elastic launcher (torchrun's elastic agent, say): the job keeps
no replicas and never reconfigures live. Any loss of a working node stops everyone; once at
least `min_nodes` nodes are usable, every worker restarts on the planner's plan for all of
them from the last complete checkpoint, paying `rendezvous_s` on top (the agent's
rendezvous, simulator only: on the real backend it is measured). Nodes that arrive while
the job trains wait for the next restart.

This package is the worked example of docs/designs.md, laid out as the built-in designs
are (`designs/<name>/`): the record, its options and the rules in words here, the policy
in `policy.py`. It lives outside the project's packages and is loaded with
`--design-module examples/designs/restart --design restart`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from designs import REAL, REAL_BACKEND, SIMULATOR, BuildContext, Design, PolicyBuild, option, standard_pause_s
from designs.options import PLANNER
from planner.policies import Action, CheckpointSchedule, RestartFromCheckpoint, Start

from .policy import RestartPolicy


@dataclass(frozen=True)
class RestartOptions:
    min_nodes: int = option(1, doc="wait for this many usable nodes before a restart", where=(PLANNER, REAL), minimum=1)
    rendezvous_s: float = option(
        0.0, unit="s", doc="extra seconds every start and restart takes to rendezvous", where=(PLANNER,), minimum=0
    )


def build(ctx: BuildContext, options: RestartOptions) -> PolicyBuild:
    planner = ctx.planner_for(0)  # no replicas: a single pipeline is a valid plan
    return PolicyBuild(RestartPolicy(planner, ctx.checkpoints, options.min_nodes), options)


def pause_s(costs: Any, options: RestartOptions, action: Action, plan: Any, alive: Collection[str] | None) -> float:
    """The standard prices, plus the rendezvous before every start and restart."""
    seconds = standard_pause_s(costs, options, action, plan, alive)
    if isinstance(action, (Start, RestartFromCheckpoint)):
        seconds += options.rendezvous_s
    return seconds


RESTART = Design(
    name="restart",
    display="Elastic restart",
    summary="elastic restart: every failure restarts all workers from the last checkpoint",
    options=RestartOptions,
    build=build,
    runs_on=(SIMULATOR, REAL_BACKEND),
    pause_s=pause_s,
    default_checkpoints=CheckpointSchedule(every_s=1800.0),
)
