"""ReCycle's adapted 1F1B schedule: a failed worker's microbatches run on its stage's peers.

Gandhi et al., "ReCycle: Resilient Training of Large DNNs using Pipeline Adaptation",
SOSP'24 (section 4): with W data-parallel pipelines of D stages, a failed worker (pipeline p,
stage s) stops nothing; the microbatches of pipeline p at stage s are rerouted to the stage-s
workers of the other pipelines, which run them in the bubbles of their own 1F1B schedules.
Decoupled back-propagation splits each backward into the input gradient (on the critical
path: the previous stage waits for it) and the weight gradient (needed only by the
optimizer step), so weight gradients can wait for idle time.

`makespan` times one iteration of that schedule by list scheduling the whole grid:

- ops per microbatch m of pipeline p at stage s: forward F, input-gradient backward B, and
  (with `weight_share` > 0) weight-gradient backward Wg, of `forward_s[s]`,
  `backward_s[s] x (1 - weight_share)` and `backward_s[s] x weight_share` seconds;
- F(p, m, s) needs F(p, m, s - 1), B(p, m, s) needs F(p, m, s) and B(p, m, s + 1), each
  `comm_s` after the op on the neighbouring stage; Wg(p, m, s) needs B(p, m, s);
- a failed slot's microbatches go round robin to the live stage-s peers (microbatch m of
  pipeline p to peer (m + p) mod peers, so several failures in one stage spread);
- each worker, whenever it is free, starts the ready op of highest priority: B, then F,
  then Wg; among equals the lowest microbatch, its own pipeline's first. An F waits while the
  worker holds D - s forwards of that pipeline whose B has not run (1F1B's in-flight bound,
  per pipeline a worker serves).

With one stage nothing waits across workers and the busiest worker's total is the makespan
(computed directly; a test checks it against the list schedule).
Healthy and weight_share = 0 this is plain 1F1B: (N + D - 1)(f + b) for uniform stages (a test
checks it, and small failed cases against schedules worked by hand). The policy uses the
ratio of the failed schedule to the healthy one, so the planner's own iteration time stays
the reference.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from planner.errors import PlannerError

F, B, WG = 1, 0, 2  # kinds, also their priority (lower first)


def hosts(pipelines: int, depth: int, failed: Iterable[tuple[int, int]]) -> dict[tuple[int, int, int], int]:
    """(pipeline, stage, microbatch-index mod peers) routing: for each failed slot (p, s),
    `peers(s)` in order; raises when a stage has no live worker."""
    failed = set(failed)
    out: dict[tuple[int, int, int], int] = {}
    for p, s in sorted(failed):
        peers = [q for q in range(pipelines) if (q, s) not in failed]
        if not peers:
            raise PlannerError(f"stage {s} has no live worker: the pipelines cannot cover it")
        for j, q in enumerate(peers):
            out[(p, s, j)] = q
        out[(p, s, -1)] = len(peers)
    return out


def host_of(route: dict[tuple[int, int, int], int], p: int, s: int, m: int) -> int:
    count = route.get((p, s, -1))
    if count is None:
        return p
    return route[(p, s, (m + p) % count)]


def _one_stage(route: dict[tuple[int, int, int], int], op_s: float, pipelines: int, microbatches: int) -> float:
    """One stage (pure data parallelism): no op waits for another worker, so each live
    worker runs its microbatches back to back and the busiest one sets the makespan."""
    load: dict[int, int] = {}
    for p in range(pipelines):
        for m in range(microbatches):
            q = host_of(route, p, 0, m)
            load[q] = load.get(q, 0) + 1
    return max(load.values()) * op_s


def makespan(
    forward_s: Sequence[float],
    backward_s: Sequence[float],
    *,
    pipelines: int,
    microbatches: int,
    failed: Iterable[tuple[int, int]] = (),
    weight_share: float = 0.0,
    comm_s: float = 0.0,
) -> float:
    """Seconds of one iteration of the adapted schedule (see the module docstring)."""
    depth = len(forward_s)
    if depth < 1 or len(backward_s) != depth or pipelines < 1 or microbatches < 1:
        raise PlannerError("internal: a schedule needs stages, pipelines and microbatches")
    if not 0 <= weight_share < 1:
        raise PlannerError(f"internal: weight_share must be in [0, 1), got {weight_share}")
    route = hosts(pipelines, depth, failed)
    if depth == 1 and comm_s == 0:
        return _one_stage(route, forward_s[0] + backward_s[0], pipelines, microbatches)
    kinds = (F, B, WG) if weight_share > 0 else (F, B)
    dur = {
        F: list(forward_s),
        B: [b * (1 - weight_share) for b in backward_s],
        WG: [b * weight_share for b in backward_s],
    }
    # op = (kind, p, m, s); its worker = (host, s)
    deps: dict[tuple, int] = {}
    ready_t: dict[tuple, float] = {}
    worker_of: dict[tuple, tuple[int, int]] = {}
    for p in range(pipelines):
        for m in range(microbatches):
            for s in range(depth):
                for kind in kinds:
                    op = (kind, p, m, s)
                    worker_of[op] = (host_of(route, p, s, m), s)
                    if kind == F:
                        deps[op] = 1 if s > 0 else 0
                    elif kind == B:
                        deps[op] = 1 + (1 if s < depth - 1 else 0)
                    else:
                        deps[op] = 1
                    ready_t[op] = 0.0
    released: dict[tuple[int, int], list[tuple]] = {}
    inflight: dict[tuple[int, int, int], int] = {}  # (worker host, stage, pipeline) -> F done, B not
    busy: dict[tuple[int, int], bool] = {}
    events: list[tuple[float, int, int, tuple]] = []  # (time, order, 0 finish / 1 wake, op or worker)
    seq = 0

    def release(op: tuple, t: float) -> None:
        nonlocal seq
        w = worker_of[op]
        released.setdefault(w, []).append(op)
        heapq.heappush(events, (t, seq, 1, w))
        seq += 1

    for op, count in deps.items():
        if count == 0:
            release(op, 0.0)

    def try_start(w: tuple[int, int], t: float) -> None:
        nonlocal seq
        if busy.get(w):
            return
        limit = depth - w[1]
        best, best_key = None, None
        for op in released.get(w, ()):
            kind, p, m, s = op
            if ready_t[op] > t:
                continue
            if kind == F and inflight.get((w[0], s, p), 0) >= limit:
                continue
            key = (kind, m, p != w[0], p)
            if best_key is None or key < best_key:
                best, best_key = op, key
        if best is None:
            return
        released[w].remove(best)
        busy[w] = True
        kind, p, _, s = best
        if kind == F:
            inflight[(w[0], s, p)] = inflight.get((w[0], s, p), 0) + 1
        elif kind == B:
            inflight[(w[0], s, p)] -= 1
        heapq.heappush(events, (t + dur[kind][s], seq, 0, best))
        seq += 1

    done = 0
    end = 0.0
    while events:
        t, _, what, item = heapq.heappop(events)
        if what == 1:
            try_start(item, t)
            continue
        kind, p, m, s = item
        w = worker_of[item]
        busy[w] = False
        done += 1
        end = max(end, t)
        succ: list[tuple[tuple, float]] = []
        if kind == F:
            if s + 1 < depth:
                succ.append(((F, p, m, s + 1), t + comm_s))
            succ.append(((B, p, m, s), t))
        elif kind == B:
            if s > 0:
                succ.append(((B, p, m, s - 1), t + comm_s))
            if weight_share > 0:
                succ.append(((WG, p, m, s), t))
        for op, at in succ:
            ready_t[op] = max(ready_t[op], at)
            deps[op] -= 1
            if deps[op] == 0:
                release(op, ready_t[op])
        try_start(w, t)
    if done != len(deps):
        raise PlannerError(f"internal: the adapted schedule stalled with {len(deps) - done} ops left")
    return end
