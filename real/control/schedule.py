"""Failures and joins the coordinator carries out itself: trace events and timed injections.

Times count from the start of training (generation 0's go). A trace `remove` and a timed
`crash` SIGKILL the node's processes, except a trace removal whose cause is a network fault
or a hang (`traces.model.CAUSE_KIND`: cable, switch, software), which SIGSTOPs them all
(`isolate`): on one machine that is what a cut link leaves, a node alive with its state
that reaches no one, noticed only when its heartbeats stop; a timed `hang` SIGSTOPs one worker (only its
heartbeat deadline reveals it); a trace `add` and a `join` (timed, or at a step
boundary) start a fresh worker set for the node through the local launcher. A link fault
(netdown, netup, slow: timed, at a step boundary, or a netdown at the start of a recovery)
is handed to the owner of the links (`links`). Step-based crashes and hangs are not here:
the victims carry them out (`probe`).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass

from traces.model import CAUSE_KIND

from ..protocol.failures import NET_POINTS, NETWORK_KINDS, Injection
from .links import LinkRequests
from .membership import Membership, ProcessControl
from .outcome import RunOutcome
from .trace_replay import TraceSchedule


@dataclass(frozen=True)
class Timed:
    t_s: float
    # crash | hang | join | netdown | netup | slow; a trace's remove -> crash or isolate, add -> join
    kind: str
    node: str
    gpu: int
    label: str
    rate_kbit: int | None = None


class EventSchedule:
    """The job's timed failures and joins, carried out on `members` and `processes`."""

    def __init__(
        self,
        trace: TraceSchedule | None,
        injections: Sequence[Injection],
        members: Membership,
        outcome: RunOutcome,
        gpus_per_node: int,
        processes: ProcessControl | None,
        links: LinkRequests | None = None,
    ):
        self.members, self.outcome, self.gpus_per_node = members, outcome, gpus_per_node
        self.processes, self.links = processes, links
        timed = []
        if trace is not None:
            for e in trace.events:
                why = f" ({e.cause})" if e.cause else ""
                timed.append(Timed(e.time_s, _trace_kind(e.kind, e.cause), e.node, 0,
                                   f"trace {e.kind} {e.node}{why} at {e.time_s:g} s"))  # fmt: skip
        for item in injections:
            if item.at_s is not None:
                timed.append(_timed(item.at_s, item))
        self.timed = sorted(timed, key=lambda t: t.t_s)
        self.step_joins = sorted(
            (i.step, i.node, i.describe()) for i in injections if i.kind == "join" and i.step is not None
        )
        stepped = [i for i in injections if i.network and i.step is not None]
        self.step_links = sorted((i.step or 0, i.index, _timed(0.0, i)) for i in stepped if i.point not in NET_POINTS)
        self.recovery_links = sorted((i.step or 0, i.index, _timed(0.0, i)) for i in stepped if i.point in NET_POINTS)
        self.t0_wall: float | None = None
        self.failure_times: list[float] = []

    def start(self, t0_wall: float) -> None:
        if self.t0_wall is None:
            self.t0_wall = t0_wall

    def due(self, now: float) -> None:
        while self.timed and self.t0_wall is not None and self.t0_wall + self.timed[0].t_s <= now:
            self._apply(self.timed.pop(0))

    def at_step(self, committed: int) -> None:
        while self.step_joins and self.step_joins[0][0] <= committed:
            _, node, label = self.step_joins.pop(0)
            self._join(node, f"--inject {label}")
        while self.step_links and self.step_links[0][0] <= committed:
            self._apply(self.step_links.pop(0)[2])

    def at_recovery(self, committed: int) -> None:
        """A recovery begins with `committed` steps done: the cuts scheduled for it."""
        while self.recovery_links and self.recovery_links[0][0] <= committed:
            self._apply(self.recovery_links.pop(0)[2])

    def left_injections(self) -> list[str]:
        """The `--inject` entries the coordinator was to carry out that never came (the run
        ended first: a time past its end, a step it never reached, a recovery that never
        began); trace events past the end are the trace's business and are not listed."""
        pending = [t.label for t in self.timed if t.label.startswith("--inject")]
        pending += [label for _, _, label in self.step_joins]
        pending += [t.label for _, _, t in (*self.step_links, *self.recovery_links)]
        return [label.removeprefix("--inject ") for label in pending]

    def take_failure_times(self) -> list[float]:
        times, self.failure_times = self.failure_times, []
        return times

    # -- actions -----------------------------------------------------------------------------
    def _apply(self, item: Timed) -> None:
        if item.kind in NETWORK_KINDS:
            if self.links is not None:
                self.links.hand_over(item.kind, item.node, item.rate_kbit, item.label)
            if item.kind == "netdown":
                self._done(item, self.links is not None)
            else:
                self.outcome.event("injected", what=item.label, applied=self.links is not None)
        elif item.kind == "join":
            self._join(item.node, item.label)
        elif item.kind in ("crash", "isolate"):
            pids = []
            if self.processes:
                pids = self.processes.pids_of(item.node)
                for pid in pids:
                    self.processes.signal(pid, signal.SIGKILL if item.kind == "crash" else signal.SIGSTOP)
            self._done(item, bool(pids))
        else:
            wid = self.members.worker_for(item.node, item.gpu)
            ok = wid is not None and self.members.kill(wid, signal.SIGSTOP)
            self._done(item, ok)

    def _done(self, item: Timed, hit: bool) -> None:
        if hit:
            self.failure_times.append(time.time())
        self.outcome.event("injected", what=item.label, applied=hit)

    def _join(self, node: str, label: str) -> None:
        if self.processes is None or (self.processes.pids_of(node)):
            self.outcome.event("injected", what=label, applied=False, why="the node still has processes")
            return
        for gpu in range(self.gpus_per_node):
            self.processes.spawn(node, gpu)
        self.outcome.event("injected", what=label, applied=True)


def _timed(t_s: float, item: Injection) -> Timed:
    return Timed(t_s, item.kind, item.node, item.gpu, f"--inject {item.describe()}", item.rate_kbit)


def _trace_kind(kind: str, cause: str | None) -> str:
    """A trace event's action: an add joins; a removal crashes the node, or isolates it when
    its cause is a network fault or a hang (it lives on, silent)."""
    if kind == "add":
        return "join"
    return "isolate" if CAUSE_KIND.get(cause or "") in ("network", "hang") else "crash"
