"""Where and when the calibration's jobs fail (`calibrate`): how many nodes each kills, at
which steps and times, and which nodes, so that every loss leaves a replica of each layer
where the plan has one and strikes a node the job is running on.
"""

from __future__ import annotations

CHECKPOINT_EVERY = 2  # the calibration runs checkpoint often, to time several checkpoints
CRASH_STEP = 8
MAX_OOBLECK_CRASHES = 3
MIN_CRASH_GAP_S = 12.0  # between the Oobleck calibration's kills: a recovery and steady iterations
JOIN_AFTER_S = 4.0  # the first victim starts again this long after the last kill


def oobleck_crashes(nodes: int) -> int:
    """How many nodes the Oobleck calibration kills: 3 (the median of three pauses), fewer
    so that the job keeps 4 nodes where it can, and always one (the quick setting's 4
    nodes: 1)."""
    return max(1, min(MAX_OOBLECK_CRASHES, nodes - 4))


def varuna_crashes(nodes: int) -> int:
    """How many restarts the Varuna calibration times: as many as `oobleck_crashes` (3 from
    7 nodes on; the quick setting's 4 nodes: 1, so its calibration stays short)."""
    return oobleck_crashes(nodes)


def varuna_crash_steps(crashes: int) -> list[int]:
    """The steps whose backward pass each crash strikes: `CRASH_STEP`, then every 6 steps
    (even steps, so each comes just after a periodic checkpoint at `CHECKPOINT_EVERY` = 2
    and the restart redoes one iteration; 5 steady iterations between restarts)."""
    return [CRASH_STEP + 6 * i for i in range(crashes)]


def crash_times_s(pace_s: float, crashes: int) -> tuple[list[float], float]:
    """(the kills' times since training started, the first victim's return): the first
    after 2 x `CRASH_STEP` predicted iterations (so `CRASH_STEP` real ones run first even
    at twice the predicted pace), then a gap of `MIN_CRASH_GAP_S` or 10 iterations; the
    return as long after the last (`JOIN_AFTER_S` after a single kill, whose live
    recovery on a small job takes about a second: a node that registers during a
    recovery is taken into it, and its copies would lengthen the pause measured)."""
    gap = max(MIN_CRASH_GAP_S, 10 * pace_s)
    first = 2 * CRASH_STEP * pace_s
    kills = [first + i * gap for i in range(crashes)]
    return kills, kills[-1] + (gap if crashes > 1 else JOIN_AFTER_S)


def spread_indices(pipelines: int, count: int) -> list[int]:
    """`count` pipeline indices spread evenly over `pipelines` (1/4, 1/2, 3/4 for three),
    never the first while others are left: a trace removes nodes anywhere, and where the
    lost rank sits set the pause while the failure cascaded around the gradient ring one
    teardown at a time (32 nodes: 5.4 and 9.2 s for the nodes of ranks 0 and 1, 3.6 and
    7.0 s for ranks 16 and 8 at the same moments; `--no-sever` brings that back)."""
    picked = sorted({round((i + 1) * pipelines / (count + 1)) for i in range(count)})
    return [min(i, pipelines - 1) for i in picked] if pipelines > count else list(range(pipelines))[:count]


def plan_victims(config, policy: str, count: int = 1, nodes: tuple[str, ...] | None = None) -> list[str]:
    """The last node of `count` pipelines spread over the plan (`spread_indices`; Oobleck)
    or the last node of the plan (Varuna) the policy starts with on `nodes` (default: all
    the job's): the same call the coordinator makes. With f >= 1 and two or more
    pipelines left, the loss of any one node keeps every layer."""
    from planner.policies import NodesReady
    from real.control.planning import make_planner, resolve_run_profile
    from real.control.policies import make_policy, view

    profile = resolve_run_profile(config)
    c = config.with_(policy=policy)
    ready = tuple(c.node_names()) if nodes is None else nodes
    plan = (
        make_policy(c, make_planner(c, profile), profile)
        .decide(view(list(ready), "waiting", 0, 0, 0.0), NodesReady(ready), None)
        .plan
    )
    if hasattr(plan, "pipelines"):
        if len(plan.pipelines) < count:
            raise RuntimeError(f"the calibration plan has {len(plan.pipelines)} pipelines, fewer than {count} victims")
        return [plan.pipelines[i].nodes[-1] for i in spread_indices(len(plan.pipelines), count)]
    return [plan.nodes[-1]]


def varuna_victims(config, count: int) -> list[str]:
    """The last node of the plan Varuna starts with, then of the plan it restarts on
    after each earlier victim is gone (the same call the coordinator makes on the
    survivors), so that every crash strikes a node the job is running on."""
    victims: list[str] = []
    for _ in range(count):
        left = tuple(n for n in config.node_names() if n not in victims)
        (victim,) = plan_victims(config, "varuna", nodes=left)
        victims.append(victim)
    return victims
