"""Reconfiguration after nodes leave or join (DESIGN 3.5).

On removals, Oobleck's rules: (1) a pipeline that lost nodes but kept at least n0 switches
to the template of its new size; (2) a smaller one borrows nodes, one at a time, from the
largest pipeline that can spare one (ties: the later pipeline; the donor gives its last
node); (3) if none can, the under-sized pipelines merge with each other in order, the last
one with the first healthy pipeline if it is still short (or, where the original gives up
because none is left, with the previous merged one). The batch is then redistributed
and every node that now owns a layer it did not hold receives its parameters and optimizer
state from a surviving replica: the copy plan. If some layer has no surviving replica the
outcome says so, and the caller falls back to the last checkpoint.

On additions (which the original never handled), new nodes join at an iteration boundary:
the planner instantiates over the larger node set, keeps every old pipeline whose size is
still wanted intact (no copies), and accepts the new plan only if its gain over a horizon
beats the copy time and the pause.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import cast

import numpy as np

from .assignment import arrange, layer_positions_of, positions_of
from .candidates import refill_proposals
from .errors import InfeasibleError, PlannerError
from .plan import ExecutionPlan
from .planner import Planner

DEFAULT_JOIN_HORIZON_S = 1800.0  # a join must pay for itself within this long (Oobleck's gain test)


@dataclass(frozen=True)
class LayerCopy:
    """`dst_node` receives `layers` (parameters and optimizer state) from `src_node`."""

    dst_node: str
    src_node: str
    layers: tuple[int, ...]
    param_bytes: int
    optimizer_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.param_bytes + self.optimizer_bytes


@dataclass(frozen=True)
class Reconfiguration:
    """What a membership change leads to. `plan` is None when training cannot go on from
    memory: `lost_layers` (restart from a checkpoint) or too few nodes (wait).

    `lower_bound_bytes`: per new pipeline, the bytes of its layers that none of its nodes
    held, summed (no ordering copies less); `keep_order_bytes`: what the copies would have
    been had every changed pipeline kept its nodes in the rules' order (the figure before
    the exact assignment)."""

    plan: ExecutionPlan | None
    copies: tuple[LayerCopy, ...] = ()
    lost_layers: tuple[int, ...] = ()
    notes: tuple[str, ...] = field(default=())
    lower_bound_bytes: int = 0
    keep_order_bytes: int = 0

    @property
    def copy_bytes(self) -> int:
        return sum(c.total_bytes for c in self.copies)

    @property
    def busiest_node_bytes(self) -> int:
        """The most bytes any one node receives."""
        received: dict[str, int] = {}
        for copy in self.copies:
            received[copy.dst_node] = received.get(copy.dst_node, 0) + copy.total_bytes
        return max(received.values(), default=0)

    @property
    def planned(self) -> ExecutionPlan:
        """`plan`, where the change always has one (a plan `finish` completed)."""
        if self.plan is None:
            raise PlannerError("internal error: a reconfiguration without a plan where one was built")
        return self.plan

    def copy_time_s(self, bw_bytes_per_s: float) -> float:
        """Copies run in parallel; each node's link carries what it sends or receives."""
        if not self.copies:
            return 0.0
        load: dict[tuple[str, str], int] = {}
        for copy in self.copies:
            load[("in", copy.dst_node)] = load.get(("in", copy.dst_node), 0) + copy.total_bytes
            load[("out", copy.src_node)] = load.get(("out", copy.src_node), 0) + copy.total_bytes
        return max(load.values()) / bw_bytes_per_s


class _Except:
    """The plan's nodes but these, as `lost_layers` asks (membership of plan nodes only):
    no 12,500-name set built per removal."""

    __slots__ = ("removed",)

    def __init__(self, removed: set[str]):
        self.removed = removed

    def __contains__(self, node: object) -> bool:
        return node not in self.removed


def lost_layers(plan: ExecutionPlan, survivors: Collection[str] | _Except) -> tuple[int, ...]:
    """Layers with no replica on a surviving node (a pipeline with no losses holds all)."""
    lost: set[int] | None = None
    for pipe in plan.pipelines:
        gone = [k for k, node in enumerate(pipe.nodes) if node not in survivors]
        if not gone:
            return ()
        positions = positions_of(pipe.template)
        missing = {layer for k in gone for layer in positions[k]}
        lost = missing if lost is None else lost & missing
        if not lost:
            return ()
    return tuple(sorted(lost or ()))


def changed_pipelines(old: ExecutionPlan, new: ExecutionPlan) -> list[int]:
    """Indices of `new`'s pipelines that are not an old pipeline kept as it was (same
    template size, same nodes in the same order): only their nodes can need copies."""
    kept = old.pipeline_nodes  # a pipeline's node count is its template's (PipelinePlan checks)
    return [i for i, p in enumerate(new.pipelines) if p.nodes not in kept]


def copy_plan(
    planner: Planner, old: ExecutionPlan, new: ExecutionPlan, changed: Sequence[int] | None = None
) -> tuple[LayerCopy, ...]:
    """For each node of `new`, the layers it lacks and which old holder sends them.

    Sources are chosen deterministically, spreading load: among the surviving old holders
    of a layer, the one that has sent the fewest bytes so far (then the earlier in the old
    plan's order). Raises if a needed layer has no surviving holder. Only pipelines that
    changed are visited, so the cost follows the change, not the cluster (`changed`: those
    indices when the caller has them; a listed pipeline that needs nothing adds nothing).
    """
    layers = planner.profile.layers
    alive = new.node_set  # kept by the plan: the policy asks for it at the next event anyway
    old_held = _held_by(old)
    where = old_held.holders()
    sent: dict[str, int] = {}

    def source_of(layer: int) -> str | None:
        """The surviving holder that has sent the fewest bytes, the earliest on ties; the
        scan stops at the first that has sent nothing (it is the minimum), which is where
        it usually stops, so a request costs a few pipelines, not all of them."""
        best, best_sent = None, 0
        for nodes, position in where:
            node = nodes[position[layer]]
            if node not in alive:
                continue
            count = sent.get(node, 0)
            if not count:
                return node
            if best is None or count < best_sent:
                best, best_sent = node, count
        return best

    requests: dict[tuple[str, str], list[int]] = {}
    for index in changed_pipelines(old, new) if changed is None else changed:
        pipe = new.pipelines[index]
        for node, needed in zip(pipe.nodes, positions_of(pipe.template)):
            have = old_held.get(node, ())
            for layer in needed:
                if layer in have:
                    continue
                src = source_of(layer)
                if src is None:
                    raise PlannerError(f"layer {layer} has no surviving replica to copy from")
                sent[src] = sent.get(src, 0) + layers[layer].copy_bytes
                requests.setdefault((node, src), []).append(layer)
    param = [layer.param_bytes for layer in layers]
    optimizer = [layer.optimizer_bytes for layer in layers]
    return tuple(
        LayerCopy(
            dst_node=dst,
            src_node=src,
            layers=tuple(ls),
            param_bytes=sum(map(param.__getitem__, ls)),
            optimizer_bytes=sum(map(optimizer.__getitem__, ls)),
        )
        for (dst, src), ls in requests.items()
    )


class _HeldView:
    """node -> frozenset of layers it holds in a plan, computed per node on demand (a
    12,500-node plan's full map costs more than a reconfiguration may take)."""

    def __init__(self, plan: ExecutionPlan):
        self._pipelines = plan.pipelines
        self._where = plan.pipeline_index
        self._index: dict[str, int] = {}
        self._cache: dict[str, frozenset[int]] = {}
        self._holders: list[tuple[tuple[str, ...], tuple[int, ...]]] | None = None

    def holders(self) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
        """Each pipeline's nodes and, per layer, the position holding it (built once per
        plan: every reconfiguration from it scans them for copy sources)."""
        if self._holders is None:
            self._holders = [(pipe.nodes, layer_positions_of(pipe.template)) for pipe in self._pipelines]
        return self._holders

    def get(self, node: str, default: Collection[int] = ()) -> Collection[int]:
        if node not in self._cache:
            at = self._where.get(node)
            if at is None:
                return default
            pipe = self._pipelines[at]
            if node not in self._index:  # index the node's pipeline once
                for k, name in enumerate(pipe.nodes):
                    self._index[name] = k
            self._cache[node] = frozenset(positions_of(pipe.template)[self._index[node]])
        return self._cache[node]


_VIEWS: dict[int, tuple[ExecutionPlan, _HeldView]] = {}  # the last few plans' views, by identity


def _held_by(plan: ExecutionPlan) -> _HeldView:
    """The plan's view, shared by every reconfiguration from it (building one is O(nodes),
    and a run replans from the same base plan at event after event)."""
    hit = _VIEWS.get(id(plan))
    if hit is None or hit[0] is not plan:
        if len(_VIEWS) >= 4:
            del _VIEWS[next(iter(_VIEWS))]
        hit = _VIEWS[id(plan)] = (plan, _HeldView(plan))
    return hit[1]


def layer_bytes_of(planner: Planner) -> np.ndarray:
    return np.array([layer.copy_bytes for layer in planner.profile.layers], np.int64)


def arrange_groups(
    planner: Planner, old: ExecutionPlan, groups: Sequence[Sequence[str]]
) -> tuple[list[list[str]], int, int]:
    """Each group's nodes in the order that copies the fewest bytes onto its template
    (`assignment.arrange`); groups that are an old pipeline as it was stay as they are.
    Returns (groups, keep-order bytes, lower bound bytes)."""
    kept = old.pipeline_nodes
    held = _held_by(old)
    layer_bytes = layer_bytes_of(planner)
    arranged, keep, bound = [], 0, 0
    for group in groups:
        template = planner.template(len(group))
        if tuple(group) in kept or template is None:
            arranged.append(list(group))
            continue
        result = arrange(positions_of(template), list(group), held, layer_bytes)
        arranged.append(list(result.nodes))
        keep += result.keep_order_bytes
        bound += result.lower_bound_bytes
    return arranged, keep, bound


def with_orders(plan: ExecutionPlan, groups: Sequence[Sequence[str]]) -> ExecutionPlan:
    """`plan` with each pipeline's nodes replaced (same templates and microbatches)."""
    return replace(plan, pipelines=tuple(replace(p, nodes=tuple(g)) for p, g in zip(plan.pipelines, groups)))


def finish(planner: Planner, old: ExecutionPlan, new: ExecutionPlan, notes: Sequence[str] = ()) -> Reconfiguration:
    """`new` with its pipelines ordered for the fewest copies from `old`, its copy plan and
    figures. Only the changed pipelines are visited (the cost follows the change)."""
    changed = changed_pipelines(old, new)
    arranged, keep, bound = arrange_groups(planner, old, [new.pipelines[i].nodes for i in changed])
    pipelines = list(new.pipelines)
    reordered = False
    for i, group in zip(changed, arranged):
        if tuple(group) != pipelines[i].nodes:
            pipelines[i] = replace(pipelines[i], nodes=tuple(group))
            reordered = True
    # unchanged orders: `new` itself, with whatever it has already computed and kept
    plan = replace(new, pipelines=tuple(pipelines)) if reordered else new
    # the arrangement reorders nodes within the changed pipelines only: the same ones changed
    copies = copy_plan(planner, old, plan, changed)
    return Reconfiguration(plan, copies, notes=tuple(notes), lower_bound_bytes=bound, keep_order_bytes=keep)


def regroup_after_removal(groups: Sequence[Sequence[str]], n0: int) -> tuple[list[Sequence[str]], list[str]]:
    """Oobleck's rules 1-3 on node groups; returns (groups, notes). The given groups are
    never changed: a group is copied before it borrows or lends, and the rest are passed
    through as they are (at 12,500 nodes a removal touches a few of hundreds)."""
    pipelines: list[Sequence[str]] = list(groups)
    owned = [False] * len(pipelines)

    def own(i: int) -> list[str]:
        if not owned[i]:
            pipelines[i] = list(pipelines[i])
            owned[i] = True
        return cast(list[str], pipelines[i])  # a list once owned

    notes: list[str] = []
    kept: list[int] = []  # indices: a lender is copied after it may have been kept
    need_merge = False
    for index in range(len(pipelines)):
        if not pipelines[index]:
            notes.append(f"pipeline {index} lost all its nodes")
            continue
        if len(pipelines[index]) < n0:
            group = own(index)
            while len(group) < n0:
                donor_index = max(range(len(pipelines)), key=lambda i: (len(pipelines[i]), i))
                if len(pipelines[donor_index]) <= n0:
                    need_merge = True
                    break
                donor = own(donor_index)
                while len(donor) > n0 and len(group) < n0:
                    node = donor.pop()
                    group.append(node)
                    notes.append(f"pipeline {index} borrowed node {node} from pipeline {donor_index}")
        kept.append(index)
    result = [pipelines[i] for i in kept]
    if need_merge:
        short = [own(i) for i in kept if len(pipelines[i]) < n0]  # owned already: they were short
        healthy = [g for g in result if len(g) >= n0]
        merged: list[list[str]] = []
        while short:
            group = short.pop(0)
            while len(group) < n0 and short:
                group.extend(short.pop(0))
            if len(group) < n0:
                if healthy:
                    group.extend(healthy.pop(0))
                elif merged:  # Oobleck gives up here; the previous merged group can take it
                    merged[-1].extend(group)
                    notes.append(f"merged the leftover nodes into a pipeline of {len(merged[-1])} nodes: {merged[-1]}")
                    continue
                else:
                    raise InfeasibleError(f"{len(group)} nodes cannot form a pipeline of n0 = {n0}")
            notes.append(f"merged into a pipeline of {len(group)} nodes: {group}")
            merged.append(group)
        result = [*healthy, *merged]
    return result, notes


def on_removal(
    planner: Planner, plan: ExecutionPlan, removed: Sequence[str], *, throughput_tolerance: float | None = None
) -> Reconfiguration:
    """Reconfigure `plan` after the nodes in `removed` are gone.

    By default the plan is Oobleck's (rules 1-3) with each changed pipeline's nodes in the
    order that copies least. With `throughput_tolerance` t (a fraction in [0, 1)), the
    refills of `candidates` compete too: among the options whose throughput is at least
    (1 - t) x the fastest option's, the one that copies the fewest bytes wins (ties: the
    faster, then Oobleck's rules first)."""
    if throughput_tolerance is not None and not 0 <= throughput_tolerance < 1:
        raise PlannerError(f"throughput tolerance must be a fraction in [0, 1), got {throughput_tolerance}")
    removed_set = set(removed)
    unknown = removed_set.difference(plan.node_set)
    if unknown:
        raise PlannerError(f"removed nodes {sorted(unknown)} are not in the plan")
    lost = lost_layers(plan, _Except(removed_set))
    if lost:
        return Reconfiguration(None, lost_layers=lost, notes=(f"no surviving replica of layers {list(lost)}",))
    n0 = planner.min_nodes
    left = len(plan.nodes) - len(removed_set)
    if left < n0:
        return Reconfiguration(None, notes=(f"{left} nodes left, one pipeline needs n0 = {n0}",))
    # only the pipelines that lost nodes are filtered; the rest go to the rules as they are
    where = plan.pipeline_index
    touched = {where[n] for n in removed_set}
    kept_groups: list[Sequence[str]] = [
        [n for n in p.nodes if n not in removed_set] if i in touched else p.nodes for i, p in enumerate(plan.pipelines)
    ]
    groups, notes = regroup_after_removal(kept_groups, n0)
    notes = list(notes)
    if any(planner.template(size) is None for size in {len(g) for g in groups}):
        sizes = sorted(len(g) for g in groups)
        notes.append(f"no template for some of the regrouped sizes {sizes}: re-instantiating over {left} nodes")
        new_plan = planner.instantiate(
            [n for n in plan.nodes if n not in removed_set],
            min_pipelines=max(1, min(planner.job.fault_tolerance + 1, left // n0)),
        )
    else:
        new_plan = planner.build_plan(groups)
    if new_plan.num_pipelines <= planner.job.fault_tolerance:
        notes.append(
            f"only {new_plan.num_pipelines} pipeline(s) left: tolerates {new_plan.num_pipelines - 1} failure(s), not f = {planner.job.fault_tolerance}"
        )
    chosen = finish(planner, plan, new_plan, notes)
    if throughput_tolerance is None:
        return chosen
    return _cheapest_within(planner, plan, removed_set, chosen, throughput_tolerance)


def _cheapest_within(
    planner: Planner, old: ExecutionPlan, removed: set[str], rules: Reconfiguration, tolerance: float
) -> Reconfiguration:
    """Oobleck's plan against the refills: the fewest bytes within the tolerance."""
    proposals = refill_proposals(
        old, removed, planner.min_nodes, planner.template, _held_by(old), layer_bytes_of(planner)
    )
    options = [("Oobleck's rules", rules)]
    for proposal in proposals:
        options.append((proposal.label, finish(planner, old, planner.build_plan(proposal.groups))))
    fastest = max(option.planned.samples_per_s for _, option in options)
    floor = (1 - tolerance) * fastest
    eligible = [(label, option) for label, option in options if option.planned.samples_per_s >= floor]
    label, best = min(eligible, key=lambda item: (item[1].copy_bytes, -item[1].planned.samples_per_s))
    compared = "; ".join(
        f"{name}: {option.copy_bytes / 2**30:.1f} GiB, {option.planned.samples_per_s:.4g} samples/s"
        for name, option in options
    )
    note = f"chose {label} (tolerance {tolerance:g} of the fastest option's {fastest:.4g} samples/s) among {compared}"
    return replace(best, notes=(*best.notes, note))


def _regroup_for_growth(plan: ExecutionPlan, target_sizes: Sequence[int], added: Sequence[str]) -> list[list[str]]:
    """Node groups of the wanted sizes that keep old pipelines whole where sizes match."""
    wanted = list(target_sizes)
    kept: list[list[str]] = []
    spare: list[str] = []
    for pipeline in sorted(plan.pipelines, key=lambda p: -len(p.nodes)):
        size = len(pipeline.nodes)
        if size in wanted:
            wanted.remove(size)
            kept.append(list(pipeline.nodes))
        else:
            spare.extend(pipeline.nodes)
    spare.extend(added)
    built = []
    for size in wanted:
        built.append(spare[:size])
        spare = spare[size:]
    return sorted(kept + built, key=len)


def on_addition(
    planner: Planner,
    plan: ExecutionPlan | None,
    added: Sequence[str],
    *,
    horizon_s: float = DEFAULT_JOIN_HORIZON_S,
    pause_s: float = 0.0,
    current_nodes: Sequence[str] | None = None,
) -> Reconfiguration:
    """Take `added` nodes in if the bigger plan pays for itself within `horizon_s`.

    Gain test: new throughput x (horizon - copy time - pause) > old throughput x horizon.
    With no running plan (`plan` None) the nodes are simply instantiated over, if enough.
    `current_nodes` (default: the plan's) are the nodes already present, including spares.
    """
    present = list(current_nodes if current_nodes is not None else (plan.nodes if plan else ()))
    nodes = present + [n for n in added if n not in present]
    n0 = planner.min_nodes
    if len(nodes) < n0:
        return Reconfiguration(None, notes=(f"{len(nodes)} nodes, one pipeline needs n0 = {n0}: waiting",))
    want = max(1, min(planner.job.fault_tolerance + 1, len(nodes) // n0))
    fresh = planner.instantiate(nodes, min_pipelines=want)
    if plan is None:
        return Reconfiguration(fresh, notes=(f"instantiated over {len(nodes)} nodes",))
    sizes = [len(p.nodes) for p in fresh.pipelines]
    grown = planner.build_plan(_regroup_for_growth(plan, sizes, [n for n in nodes if n not in plan.nodes]))
    candidate = finish(planner, plan, grown, (f"grew from {len(plan.nodes)} to {len(nodes)} nodes",))
    grown = candidate.planned
    copy_s = candidate.copy_time_s(planner.cluster.inter_node_bw_bytes_per_s)
    if grown.samples_per_s * (horizon_s - copy_s - pause_s) > plan.samples_per_s * horizon_s:
        return candidate
    return Reconfiguration(
        plan,
        notes=(
            f"kept the current plan: {grown.samples_per_s:.3g} samples/s after {copy_s:.3g} s of copies "
            f"does not beat {plan.samples_per_s:.3g} samples/s over {horizon_s:.0f} s",
        ),
    )
