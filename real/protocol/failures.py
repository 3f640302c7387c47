"""Failure injection schedules: `--inject STEP:WORKER:KIND[:POINT],...` (pure Python).

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
- or a fault of the node's network link (the node's processes live on): `netdown` (the
  link is cut), `netup` (the link is back, at full rate), `slow` (the link's rate is
  limited, to KBIT kbit/s when a fourth field gives it, else 1000: a straggler). Whoever
  owns the links carries them out (the namespace harness, `real.launch.netns_job`: the
  coordinator hands each to it), so only a job on such hosts takes them;
- where, for step-based crashes and hangs: the point of the worker's step at which it
  kills or freezes itself: `forward` (its first forward of the step, the default),
  `backward` (its first backward), `allreduce` (gradient all-reduce issued, not
  finished), `optimizer` (the step committed, inside the optimizer step), `reconfigure`
  (inside the state copy of a reconfiguration that resumes at or after the step),
  `groups` (on entering the process-group creation of a generation that resumes at or
  after the step: the other ranks then wait in the rendezvous for the dead one),
  `teardown` (tearing down after a failure of a generation running the step). A
  step-based `netdown` may name `recovery`: the cut comes when the coordinator begins
  the first recovery at or after the step (a cut during a recovery).

Step-based crashes and hangs are carried out by the victim itself (deterministic: the
worker signals itself when it reaches the point), everything else by the coordinator.
Each entry fires at most once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

KINDS = ("crash", "hang", "stall", "join", "netdown", "netup", "slow")
NETWORK_KINDS = ("netdown", "netup", "slow")
DEFAULT_SLOW_KBIT = 1000
NET_POINTS = ("recovery",)
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
    rate_kbit: int | None = None  # a `slow`'s rate

    @property
    def network(self) -> bool:
        """A fault of the node's link, carried out by whoever owns the links."""
        return self.kind in NETWORK_KINDS

    @property
    def by_worker(self) -> bool:
        """Carried out by the victim itself (a step-based crash or hang)."""
        return self.step is not None and self.kind in ("crash", "hang", "stall")

    def describe(self) -> str:
        when = f"step {self.step}" if self.step is not None else f"{self.at_s:g} s"
        if self.network:
            where = f" at {self.point}" if self.point in NET_POINTS else ""
            rate = f" to {self.rate_kbit} kbit/s" if self.kind == "slow" else ""
            return f"{self.kind} {self.node} {when}{where}{rate}"
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
            f"{label}: expected STEP:WORKER:KIND[:POINT], KIND one of {'|'.join(KINDS)}, "
            "e.g. 3:node1:crash or 2.5s:node0:hang or 4s:node2:slow:800"
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
    if kind in NETWORK_KINDS:
        return _network_entry(label, fields, Injection(index, kind, node, gpu, step, at_s))
    point = fields[3] if len(fields) == 4 else DEFAULT_POINT
    if kind == "stall" and step is None:
        raise InjectionError(f"{label}: a stall is step-based (the worker stalls itself)")
    if len(fields) == 4:
        if step is None or kind == "join":
            raise InjectionError(f"{label}: a point applies to step-based crashes and hangs only")
        if point not in POINTS:
            raise InjectionError(f"{label}: unknown point {point!r}; use one of {', '.join(POINTS)}")
    return Injection(index, kind, node, gpu, step, at_s, point)


def _network_entry(label: str, fields: Sequence[str], item: Injection) -> Injection:
    """A link fault: the whole node's link (no GPU), a `slow`'s rate, a netdown's point."""
    if item.gpu != 0:
        raise InjectionError(f"{label}: a link belongs to the whole node; name {item.node}, not one GPU of it")
    extra = fields[3] if len(fields) == 4 else None
    if item.kind == "slow":
        if extra is not None and not (extra.isdigit() and int(extra) > 0):
            raise InjectionError(f"{label}: a slow link's rate is a positive whole number of kbit/s, not {extra!r}")
        return replace(item, rate_kbit=int(extra) if extra is not None else DEFAULT_SLOW_KBIT)
    if extra is None:
        return item
    if item.kind != "netdown" or extra not in NET_POINTS or item.step is None:
        raise InjectionError(
            f"{label}: {extra!r} does not apply here; only a step-based netdown takes a point (recovery)"
        )
    return replace(item, point=extra)


def _order_key(item: Injection) -> tuple[int, float]:
    return (0, float(item.step)) if item.step is not None else (1, item.at_s or 0.0)


def _check_order(items: Iterable[Injection]) -> None:
    """A join must follow a failure of the same node (same kind of clock: steps with
    steps, times with times), and a node cannot fail twice without a join between. Its
    link likewise: a netup follows a netdown or a slow of that node, and a cut link is
    not cut again before it is up."""
    down: dict[str, Injection] = {}
    links: dict[str, Injection] = {}
    for item in sorted(items, key=lambda i: (_order_key(i), i.index)):
        if item.network:
            _check_link(item, links)
        elif item.kind == "join":
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


def _check_link(item: Injection, links: dict[str, Injection]) -> None:
    before = links.get(item.node)
    label = f"--inject entry {item.index + 1}"
    if item.kind == "netup":
        if before is None:
            raise InjectionError(f"{label}: {item.node}'s link comes up, but no earlier entry cuts or slows it")
        if (before.step is None) != (item.step is None) or before.point in NET_POINTS:
            raise InjectionError(
                f"{label}: a netup and the entry before it must both use steps or both use times "
                "(and a cut at a recovery has no known time to follow)"
            )
        del links[item.node]
    elif before is not None and before.kind == "netdown":
        raise InjectionError(f"{label}: {item.node}'s link is already cut (entry {before.index + 1})")
    else:
        links[item.node] = item


def injections_to_json(items: Sequence[Injection]) -> list[dict[str, Any]]:
    return [item.to_dict() for item in items]


def injections_from_json(data: Sequence[Mapping[str, Any]] | None) -> tuple[Injection, ...]:
    return tuple(Injection.from_dict(item) for item in data or ())
