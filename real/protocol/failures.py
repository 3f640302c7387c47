"""Failure injection schedules: `--inject STEP:WORKER:crash|hang[:POINT],...` (pure Python).

An entry names when, whom and what:

- when: a training step (`3`: while running step 3, counted from 0) or a time (`2.5s`:
  seconds after training started);
- whom: a node (`node2`: its GPU 0) or one GPU of it (`node2/1`); a failure takes the
  whole node out (its other GPUs' workers are fenced with it);
- what: `crash` (SIGKILL), `hang` (SIGSTOP: only the heartbeat deadline or an operation's
  timeout reveals it), `stall` (the worker's main thread stops for good while its
  heartbeat goes on: a worker that cannot tear down cleanly; step-based only), or
  `join` (the node, taken out by an earlier entry, is started again: a fresh process
  registers and the policy takes it in at an iteration boundary);
- where, for step-based crashes and hangs: the point of the worker's step at which it
  kills or freezes itself: `forward` (its first forward of the step, the default),
  `backward` (its first backward), `allreduce` (gradient all-reduce issued, not
  finished), `optimizer` (the step committed, inside the optimizer step), `reconfigure`
  (inside the state copy of a reconfiguration that resumes at or after the step),
  `groups` (on entering the process-group creation of a generation that resumes at or
  after the step: the other ranks then wait in the rendezvous for the dead one),
  `teardown` (tearing down after a failure of a generation running the step).

Step-based crashes and hangs are carried out by the victim itself (deterministic: the
worker signals itself when it reaches the point), everything else by the coordinator.
Each entry fires at most once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

KINDS = ("crash", "hang", "stall", "join")
POINTS = ("forward", "backward", "allreduce", "optimizer", "reconfigure", "groups", "teardown")
DEFAULT_POINT = "forward"

_WHEN = re.compile(r"^(?:(?P<step>\d+)|(?P<secs>\d+(?:\.\d*)?|\.\d+)s)$")
_WHO = re.compile(r"^(?P<node>[^:/,\s]+)(?:/(?P<gpu>\d+))?$")


class InjectionError(ValueError):
    """A malformed or impossible injection schedule; the message names the entry."""


@dataclass(frozen=True)
class Injection:
    """One scheduled failure or join (`index`: its position in the schedule)."""

    index: int
    kind: str
    node: str
    gpu: int = 0
    step: int | None = None
    at_s: float | None = None
    point: str = DEFAULT_POINT

    @property
    def by_worker(self) -> bool:
        """Carried out by the victim itself (a step-based crash or hang)."""
        return self.step is not None and self.kind in ("crash", "hang", "stall")

    def describe(self) -> str:
        when = f"step {self.step}" if self.step is not None else f"{self.at_s:g} s"
        where = f" at {self.point}" if self.by_worker else ""
        return f"{self.kind} {self.node}/{self.gpu} {when}{where}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Injection:
        return cls(**data)


def parse_injections(
    text: str | None, nodes: Sequence[str] | None, gpus_per_node: int = 1, steps: int | None = None
) -> tuple[Injection, ...]:
    """Parse and check a schedule against the job's node names (None: names are not known
    in advance, as on a multi-machine job) and its steps (numbered 0 .. steps - 1; None:
    not checked): an injection that could never fire is refused. Raise InjectionError."""
    if text is None or not text.strip():
        return ()
    known = None if nodes is None else list(nodes)
    entries = [part.strip() for part in text.split(",")]
    out: list[Injection] = []
    for index, entry in enumerate(entries):
        item = _parse_entry(index, entry, known, gpus_per_node)
        if steps is not None and item.step is not None and item.step >= steps:
            raise InjectionError(
                f"--inject entry {index + 1} ({entry!r}): step {item.step} is past the run's "
                f"{steps} steps (0 .. {steps - 1}), so it would never happen"
            )
        out.append(item)
    _check_order(out)
    return tuple(out)


def _parse_entry(index: int, entry: str, nodes: Sequence[str] | None, gpus_per_node: int) -> Injection:
    label = f"--inject entry {index + 1} ({entry!r})"
    fields = entry.split(":")
    if len(fields) not in (3, 4) or not all(fields):
        raise InjectionError(
            f"{label}: expected STEP:WORKER:crash|hang|stall|join[:POINT], e.g. 3:node1:crash or 2.5s:node0:hang"
        )
    when, who, kind = fields[:3]
    match = _WHEN.match(when)
    if match is None:
        raise InjectionError(f"{label}: {when!r} is neither a step (e.g. 3) nor a time (e.g. 2.5s)")
    step = int(match["step"]) if match["step"] is not None else None
    at_s = float(match["secs"]) if match["secs"] is not None else None
    who_match = _WHO.match(who)
    if who_match is None:
        raise InjectionError(f"{label}: {who!r} is not a worker (NODE or NODE/GPU)")
    node, gpu = who_match["node"], int(who_match["gpu"] or 0)
    if nodes is not None and node not in nodes:
        shown = ", ".join(nodes[:8]) + (", ..." if len(nodes) > 8 else "")
        raise InjectionError(f"{label}: unknown worker {who!r}; the job's nodes are {shown}")
    if gpu >= gpus_per_node:
        raise InjectionError(f"{label}: node {node} has GPUs 0..{gpus_per_node - 1}, not {gpu}")
    if kind not in KINDS:
        raise InjectionError(f"{label}: unknown kind {kind!r}; use one of {', '.join(KINDS)}")
    point = fields[3] if len(fields) == 4 else DEFAULT_POINT
    if kind == "stall" and step is None:
        raise InjectionError(f"{label}: a stall is step-based (the worker stalls itself)")
    if len(fields) == 4:
        if step is None or kind == "join":
            raise InjectionError(f"{label}: a point applies to step-based crashes and hangs only")
        if point not in POINTS:
            raise InjectionError(f"{label}: unknown point {point!r}; use one of {', '.join(POINTS)}")
    return Injection(index, kind, node, gpu, step, at_s, point)


def _order_key(item: Injection) -> tuple[int, float]:
    return (0, float(item.step)) if item.step is not None else (1, item.at_s or 0.0)


def _check_order(items: Iterable[Injection]) -> None:
    """A join must follow a failure of the same node (same kind of clock: steps with
    steps, times with times), and a node cannot fail twice without a join between."""
    down: dict[str, Injection] = {}
    for item in sorted(items, key=lambda i: (_order_key(i), i.index)):
        if item.kind == "join":
            if item.node not in down:
                raise InjectionError(
                    f"--inject entry {item.index + 1}: {item.node} joins, but no earlier entry takes it out"
                )
            if (down[item.node].step is None) != (item.step is None):
                raise InjectionError(
                    f"--inject entry {item.index + 1}: a join and the failure before it must both use steps or both use times"
                )
            del down[item.node]
        else:
            if item.node in down:
                raise InjectionError(
                    f"--inject entry {item.index + 1}: {item.node} is already down (entry {down[item.node].index + 1})"
                )
            down[item.node] = item


def injections_to_json(items: Sequence[Injection]) -> list[dict[str, Any]]:
    return [item.to_dict() for item in items]


def injections_from_json(data: Sequence[Mapping[str, Any]] | None) -> tuple[Injection, ...]:
    return tuple(Injection.from_dict(item) for item in data or ())
