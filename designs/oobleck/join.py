"""Oobleck's join at scale: grow the running plan instead of instantiating afresh.

`reconfigure.on_addition` (the project's join rule; the paper never handled additions)
instantiates over every node and keeps the result if it pays for its copies within the
horizon. An instantiation is a template-mix search per distinct node count, seconds each
at 1,024+ nodes, and a spot trace visits hundreds of counts, almost every join passing
(the bound in `join_bound` is within about 1 % of the optimum, a join of one node gains
about 0.1 %). Above `EXACT_JOIN_MAX_NODES` nodes the policy grows the plan it has, the
mirror of the removal rules (which switch templates, borrow and merge without an
instantiation), costing O(pipelines):

- spread: the spares go one at a time to the pipeline whose growth by one node (to the
  template of that size) shortens the plan's exact iteration time most, with the batch
  re-split (pipelines of one size are interchangeable, so one candidate per size: O(sizes)
  per spare; ties: the smaller pipeline, then the later one, as a donor is chosen on
  removal), until none is left or no growth shortens the iteration (the rest stay spare).
  The first version gave each spare to the smallest pipeline, which ignores throughput:
  templates of neighbouring sizes can differ by tens of percent when a pipeline holds
  about a layer per node (GPT-3 175B, 98 layers: 97 nodes run 0.032 s per microbatch, 96
  nodes 0.042 s), so returning nodes went to a 49-node pipeline that gained nothing while
  the 96-node pipelines that removals had left stayed slow, and the gain test declined;
- new pipelines: with at least n0 spares, ceil(s / largest template) new pipelines of
  near-equal sizes from the spares in arrival order (when every one has a template).

The faster of the two (ties: spread) is ordered for the fewest copies and put to the same
gain test as `on_addition`. Restarts and resumptions still instantiate (they happen
rarely and the state is reloaded anyway).
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.errors import PlannerError
from planner.plan import ExecutionPlan
from planner.planner import Planner
from planner.reconfigure import Reconfiguration, finish

from .spread_screen import screen_for

EXACT_JOIN_MAX_NODES = 256  # up to here (plan + spares) a join instantiates afresh, as before


def _start(
    planner: Planner, groups: Sequence[Sequence[str]]
) -> tuple[list[Sequence[str]], dict[int, bool], dict[int, int]] | None:
    """(a copy of the list of groups, size -> a template exists, size -> pipelines of that
    size), or None when some pipeline's size has no template. The groups themselves are
    shared, not copied (a 12,500-node plan has hundreds): a growth replaces its group."""
    groups = list(groups)
    sizes: dict[int, int] = {}
    for g in groups:
        sizes[len(g)] = sizes.get(len(g), 0) + 1
    has = {size: planner.template(size) is not None for size in sizes}
    return (groups, has, sizes) if all(has.values()) else None


def _grow(groups: list[Sequence[str]], sizes: dict[int, int], size: int, node: str) -> None:
    """Give `node` to the later pipeline of `size` nodes (the rule's tie-break)."""
    target = max(i for i, g in enumerate(groups) if len(g) == size)
    groups[target] = (*groups[target], node)
    sizes[size] -= 1
    if not sizes[size]:
        del sizes[size]
    sizes[size + 1] = sizes.get(size + 1, 0) + 1


def _spread(
    planner: Planner, groups: Sequence[Sequence[str]], spares: Sequence[str], largest: int
) -> list[Sequence[str]] | None:
    """Each spare to the one-node growth with the shortest exact iteration time while one
    shortens it (the module's rule, ties: the smaller size, then the later pipeline). All
    growths of a step are timed at once by `MixScreen.seconds` (the floats of
    `Planner.mix_seconds`), so the decisions are `_reference_spread`'s."""
    start = _start(planner, groups)
    if start is None:
        return None  # a pipeline without a template: no exact time to compare against
    groups, has, sizes = start
    screen = screen_for(planner, len(groups))

    def timed(mixes: list[dict[int, int]]) -> list[float]:
        fast = screen.seconds(mixes)
        return fast if fast is not None else [planner.mix_seconds(sorted(m.items())) for m in mixes]

    seconds: float | None = None  # the current mix's, timed with the first step's growths
    used = 0
    for node in spares:
        options: list[tuple[int, dict[int, int]]] = []  # (size grown, mix after), sizes increasing
        for size in sorted(sizes):
            if size >= largest:
                continue
            if size + 1 not in has:
                has[size + 1] = planner.template(size + 1) is not None
            if not has[size + 1]:
                continue
            mix = dict(sizes)
            mix[size] -= 1
            mix[size + 1] = mix.get(size + 1, 0) + 1
            options.append((size, {n: x for n, x in mix.items() if x}))
        if not options:
            if seconds is None:
                timed([sizes])  # as the reference: a mix that cannot be timed raises
            break
        times = timed(([dict(sizes)] if seconds is None else []) + [mix for _, mix in options])
        if seconds is None:
            seconds, times = times[0], times[1:]
        after, size = min(zip(times, (s for s, _ in options)))
        if not after < seconds:
            break
        seconds = after
        _grow(groups, sizes, size, node)
        used += 1
    return groups if used else None


def _reference_spread(
    planner: Planner, groups: Sequence[Sequence[str]], spares: Sequence[str], largest: int
) -> list[Sequence[str]] | None:
    """`_spread` evaluating every growth with `Planner.mix_seconds` (the rule's definition;
    kept for tests and the benchmark)."""
    start = _start(planner, groups)
    if start is None:
        return None  # a pipeline without a template: no exact time to compare against
    groups, has, sizes = start
    seconds = planner.mix_seconds(sorted(sizes.items()))
    used = 0
    for node in spares:
        best: tuple[float, int] | None = None  # (seconds, size grown)
        for size in sorted(sizes):
            if size >= largest:
                continue
            if size + 1 not in has:
                has[size + 1] = planner.template(size + 1) is not None
            if not has[size + 1]:
                continue
            mix = dict(sizes)
            mix[size] -= 1
            mix[size + 1] = mix.get(size + 1, 0) + 1
            after = planner.mix_seconds(sorted((n, x) for n, x in mix.items() if x))
            if after < seconds and (best is None or after < best[0]):
                best = (after, size)
        if best is None:
            break
        seconds, size = best
        _grow(groups, sizes, size, node)
        used += 1
    return groups if used else None


def _new_pipelines(
    planner: Planner, groups: Sequence[Sequence[str]], spares: Sequence[str], largest: int
) -> list[Sequence[str]] | None:
    s = len(spares)
    if s < planner.min_nodes:
        return None
    count = -(-s // largest)
    base, extra = divmod(s, count)
    sizes = [base + (1 if i < extra else 0) for i in range(count)]
    if any(n < planner.min_nodes or planner.template(n) is None for n in sizes):
        return None
    out, start = list(groups), 0
    for n in sizes:
        out.append(list(spares[start : start + n]))
        start += n
    return out


def grow(
    planner: Planner, plan: ExecutionPlan, spares: Sequence[str], *, horizon_s: float, pause_s: float
) -> Reconfiguration:
    """The faster growth of `plan` by `spares` if it pays within `horizon_s` (the gain
    test of `on_addition`), else `plan` kept (with a note)."""
    largest = max(planner.feasible_sizes(len(plan.nodes) + len(spares)))
    groups = [p.nodes for p in plan.pipelines]
    best = None
    for label, grouped in (
        ("spread", _spread(planner, groups, spares, largest)),
        ("new pipelines", _new_pipelines(planner, groups, spares, largest)),
    ):
        if grouped is None:
            continue
        try:  # the candidates' numbers only: the plan is built for the one that wins
            layout = planner.layout(grouped)
        except PlannerError:
            continue
        rate = planner.job.global_batch / layout.iteration_time_s  # the plan's samples_per_s, same float
        if best is None or rate > best[3]:
            best = (label, grouped, layout, rate)
    if best is None:
        return Reconfiguration(
            plan, notes=(f"kept the current plan: no pipeline can take {len(spares)} spare node(s)",)
        )
    label, grouped, layout, rate = best
    joined = sum(map(len, grouped)) - len(plan.nodes)
    if rate * (horizon_s - pause_s) <= plan.samples_per_s * horizon_s:
        # declined whatever its copies cost (they only shorten the horizon): the copy plan,
        # an O(changed pipelines x layers) walk, is not needed to say no
        return Reconfiguration(
            plan,
            notes=(
                f"kept the current plan: {rate:.3g} samples/s with {joined} more node(s) does not beat "
                f"{plan.samples_per_s:.3g} samples/s over {horizon_s:.0f} s even before its copies",
            ),
        )
    grown = planner.plan_of(grouped, layout)
    change = finish(planner, plan, grown, (f"grew from {len(plan.nodes)} to {len(grown.nodes)} nodes ({label})",))
    copy_s = change.copy_time_s(planner.cluster.inter_node_bw_bytes_per_s)
    if change.planned.samples_per_s * (horizon_s - copy_s - pause_s) > plan.samples_per_s * horizon_s:
        return change
    return Reconfiguration(
        plan,
        notes=(
            f"kept the current plan: {change.planned.samples_per_s:.3g} samples/s with {joined} more node(s) after "
            f"{copy_s:.3g} s of copies does not beat {plan.samples_per_s:.3g} samples/s over {horizon_s:.0f} s",
        ),
    )
